"""Importers: raw public GPU-cluster traces → the normalised trace. One small function per format, found by name.

Every importer reads its raw file row by row and either yields a `TraceJob` or records why a row was skipped (with
its line number) in the `ImportReport`; conversions that lose detail (a fractional GPU rounded up, a run time cut at
the end of the trace) are counted as notes. Nothing is dropped silently.

- `philly-pollux`: Philly per-job list (`timestamp, duration, num_gpus, gpu_time, cluster`); lab = the VC.
- `microsoft-itp`: Microsoft ITP / ElasticFlow (`job_id, submission_time, duration, num_gpu[, model_name, ...]`).
- `alibaba-openb`: Alibaba GPU v2023 pod list; `--nodes` gives the node list and writes a cluster file beside it.
- `gavel`: Gavel per-VC trace (TSV, steps not seconds); `--throughputs` gives Gavel's throughput JSON.
- `tiresias`: Tiresias/Chronus job list (`job_id, num_gpu, submit_time, ..., duration[, user]`).
- `nanum`: a normalised trace (re-validated, filtered).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from nanum.sim.openb import pods
from nanum.sim.rows import ImportOptions, gpu_count, rows
from nanum.sim.traces import ImportReport, TraceError, TraceJob, count, number, open_text, read_trace

Importer = Callable[[Path, ImportOptions, ImportReport], Iterator[TraceJob]]


def parse_time(text: str) -> float:
    """`2017-10-01 00:00:00` / `2017-10-01T00:00:00` (UTC) or plain seconds → seconds."""
    text = text.strip()
    try:
        return float(text)
    except ValueError:
        pass
    try:
        moment = datetime.fromisoformat(text.replace(" ", "T"))
    except ValueError:
        raise ValueError(f"{text!r} is neither seconds nor a date like 2017-10-01T00:00:00") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.timestamp()


# -- formats -----------------------------------------------------------------------------------------------------


def philly_pollux(path: Path, opts: ImportOptions, report: ImportReport) -> Iterator[TraceJob]:
    for line, row in rows(path, ("timestamp", "duration", "num_gpus", "cluster"), "philly-pollux", report):
        gpus = gpu_count(row["num_gpus"], report, line)
        if gpus is None:
            continue
        try:
            submit = parse_time(row["timestamp"])
            duration = number(row["duration"], "duration", positive=True)
        except ValueError as e:
            report.skip(line, str(e))
            continue
        if not row["cluster"]:
            report.skip(line, "empty cluster (VC)")
            continue
        yield TraceJob(job_id=str(line - 1), submit_time=submit, duration=duration, num_gpus=gpus, lab=row["cluster"])


def microsoft_itp(path: Path, opts: ImportOptions, report: ImportReport) -> Iterator[TraceJob]:
    for line, row in rows(path, ("job_id", "submission_time", "duration", "num_gpu"), "microsoft-itp", report):
        gpus = gpu_count(row["num_gpu"], report, line)
        if gpus is None:
            continue
        try:
            submit = number(row["submission_time"], "submission_time")
            duration = number(row["duration"], "duration", positive=True)
        except ValueError as e:
            report.skip(line, str(e))
            continue
        if not row["job_id"]:
            report.skip(line, "empty job_id")
            continue
        yield TraceJob(job_id=row["job_id"], submit_time=submit, duration=duration, num_gpus=gpus,
                       lab=opts.lab, name=row.get("model_name", ""))


def tiresias(path: Path, opts: ImportOptions, report: ImportReport) -> Iterator[TraceJob]:
    for line, row in rows(path, ("job_id", "num_gpu", "submit_time", "duration"), "tiresias", report):
        gpus = gpu_count(row["num_gpu"], report, line)
        if gpus is None:
            continue
        try:
            submit = number(row["submit_time"], "submit_time")
            duration = number(row["duration"], "duration", positive=True)
        except ValueError as e:
            report.skip(line, str(e))
            continue
        user = row.get("user", "")
        yield TraceJob(job_id=row["job_id"], submit_time=submit, duration=duration, num_gpus=gpus,
                       user=user, lab=user or opts.lab, name=row.get("model_name", ""))


def alibaba_openb(path: Path, opts: ImportOptions, report: ImportReport) -> Iterator[TraceJob]:
    yield from pods(path, opts, report)


def gavel(path: Path, opts: ImportOptions, report: ImportReport) -> Iterator[TraceJob]:
    if opts.throughputs is None:
        raise TraceError(
            "gavel traces count training steps, not seconds; pass --throughputs with Gavel's throughput JSON "
            "(e.g. scheduler/oracle_throughputs.json) and --worker (default v100)"
        )
    rates = _gavel_rates(opts.throughputs, opts.worker)
    files = sorted(p for p in path.iterdir() if ".trace" in p.name) if path.is_dir() else [path]
    if not files:
        raise TraceError(f"{path} holds no *.trace files")
    for file in files:
        lab = opts.lab or file.name.split(".trace")[0]
        yield from _gavel_file(file, lab, rates, report)


def _gavel_rates(path: Path, worker: str) -> dict[str, float]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise TraceError(f"cannot read throughputs {path}: {e}") from None
    if worker not in data:
        raise TraceError(f"throughputs {path} have no worker type {worker!r}; choose one of {', '.join(data)}")
    table = data[worker]
    return {key: float(e["null"]) for key, e in table.items() if isinstance(e, dict) and "null" in e}


def _gavel_file(file: Path, lab: str, rates: dict[str, float], report: ImportReport) -> Iterator[TraceJob]:
    with open_text(file) as f:
        for line, text in enumerate(f, start=1):
            if not text.strip():
                continue
            report.rows += 1
            fields = text.rstrip("\n").split("\t")
            if len(fields) != 7:
                report.skip(line, f"{file.name}: expected 7 tab-separated fields, found {len(fields)}")
                continue
            job_type, steps, arrival, scale = fields[0], fields[4], fields[5], fields[6]
            try:
                total = number(steps, "total steps", positive=True)
                submit = number(arrival, "arrival time")
                gpus = count(scale, "scale factor")
            except ValueError as e:
                report.skip(line, f"{file.name}: {e}")
                continue
            rate = rates.get(f"('{job_type}', {gpus})") or rates.get(job_type)
            if not rate:
                report.skip(line, f"{file.name}: no throughput for {job_type!r} on {gpus} GPU(s)")
                continue
            yield TraceJob(job_id=f"{lab}-{line}", submit_time=submit, duration=math.ceil(total / rate),
                           num_gpus=gpus, lab=lab, name=job_type)


def nanum_csv(path: Path, opts: ImportOptions, report: ImportReport) -> Iterator[TraceJob]:
    jobs, inner = read_trace(path)
    report.rows += inner.rows
    report.problems.extend(inner.problems)
    yield from jobs


FORMATS: dict[str, tuple[Importer, str]] = {
    "philly-pollux": (philly_pollux, "Philly per-job list: timestamp, duration, num_gpus, gpu_time, cluster"),
    "microsoft-itp": (microsoft_itp, "Microsoft ITP / ElasticFlow: job_id, submission_time, duration, num_gpu"),
    "alibaba-openb": (alibaba_openb, "Alibaba GPU v2023 openb pod list (+ --nodes node list)"),
    "gavel": (gavel, "Gavel per-VC trace (TSV; needs --throughputs)"),
    "tiresias": (tiresias, "Tiresias / Chronus: job_id, num_gpu, submit_time, ..., duration"),
    "nanum": (nanum_csv, "nanum's normalised trace"),
}


@dataclass(frozen=True, slots=True, kw_only=True)
class Filter:
    """Keep only jobs submitted in [since, until] and of the given labs (None: all)."""

    since: float | None = None
    until: float | None = None
    labs: frozenset[str] | None = None

    def keeps(self, job: TraceJob, report: ImportReport) -> bool:
        if self.since is not None and job.submit_time < self.since:
            report.note("submitted before --since (filtered)")
            return False
        if self.until is not None and job.submit_time > self.until:
            report.note("submitted after --until (filtered)")
            return False
        if self.labs is not None and job.lab not in self.labs:
            report.note("lab not in --labs (filtered)")
            return False
        return True


def import_trace(
    fmt: str, raw: Path, opts: ImportOptions, keep: Filter | None = None
) -> tuple[list[TraceJob], ImportReport]:
    """Run the importer `fmt` on `raw`; returns the kept jobs sorted by submit time, and the report."""
    if fmt not in FORMATS:
        raise TraceError(f"unknown trace format {fmt!r}; choose one of {', '.join(FORMATS)}")
    if not raw.exists():
        raise TraceError(f"{raw} does not exist; give the path of the raw trace")
    report = ImportReport(source=str(raw))
    importer, _ = FORMATS[fmt]
    keep = keep or Filter()
    jobs = [job for job in importer(raw, opts, report) if keep.keeps(job, report)]
    jobs.sort(key=lambda j: j.submit_time)
    report.kept = len(jobs)
    return jobs, report
