"""The normalised trace: one row per job, the format every importer writes and the simulator reads.

Columns (DESIGN.md): `job_id, submit_time, duration, num_gpus` are required; `user, lab, gpu_type, num_nodes,
time_limit, status, name, priority, kind` are optional. Times are seconds (absolute epoch seconds when the raw
trace has dates, else seconds from its own origin). A file whose name ends in `.gz` is gzip-compressed.

Reading never drops a row silently: a row that cannot be used becomes a `Problem` (line number and why) in the
`ImportReport` the caller shows to the user.
"""

from __future__ import annotations

import csv
import gzip
import io
import math
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from nanum.units import decimal_number

REQUIRED = ("job_id", "submit_time", "duration", "num_gpus")
OPTIONAL = ("user", "lab", "gpu_type", "num_nodes", "time_limit", "status", "name", "priority", "kind")
COLUMNS = REQUIRED + OPTIONAL


class TraceError(ValueError):
    """A trace file that cannot be read at all (missing, wrong format, missing columns)."""


@dataclass(frozen=True, slots=True)
class TraceJob:
    """One job of a trace. `num_nodes` 0: let the cluster decide (a job wider than a node becomes a gang)."""

    job_id: str
    submit_time: float
    duration: float
    num_gpus: int
    user: str = ""
    lab: str = ""
    gpu_type: str = ""
    num_nodes: int = 0
    time_limit: float | None = None
    status: str = ""
    name: str = ""
    priority: int = 0
    kind: str = "batch"

    def row(self) -> list[str]:
        limit = "" if self.time_limit is None else _num(self.time_limit)
        nodes = str(self.num_nodes) if self.num_nodes else ""
        return [
            self.job_id, _num(self.submit_time), _num(self.duration), str(self.num_gpus), self.user, self.lab,
            self.gpu_type, nodes, limit, self.status, self.name, str(self.priority), self.kind,
        ]


@dataclass(frozen=True, slots=True)
class Problem:
    """A raw row that was not imported: its line number in the raw file and why."""

    line: int
    why: str


@dataclass(slots=True)
class ImportReport:
    """What an import or a trace read did with every row: kept, skipped (with reasons), notes on conversions."""

    source: str
    rows: int = 0
    kept: int = 0
    problems: list[Problem] = field(default_factory=list)
    notes: Counter[str] = field(default_factory=Counter)

    def skip(self, line: int, why: str) -> None:
        self.problems.append(Problem(line, why))

    def note(self, what: str, count: int = 1) -> None:
        self.notes[what] += count

    def reasons(self) -> Counter[str]:
        return Counter(p.why for p in self.problems)

    def summary_lines(self, examples: int = 5) -> list[str]:
        """Human lines: counts, then each reason with its count and the first line numbers."""
        lines = [f"{self.source}: {self.rows:,} rows, {self.kept:,} imported, {len(self.problems):,} skipped"]
        by_reason: dict[str, list[int]] = {}
        for p in self.problems:
            by_reason.setdefault(p.why, []).append(p.line)
        for why, where in sorted(by_reason.items(), key=lambda kv: -len(kv[1])):
            shown = ", ".join(str(n) for n in where[:examples]) + (", ..." if len(where) > examples else "")
            lines.append(f"  skipped {len(where):,}: {why} (lines {shown})")
        for what, count in sorted(self.notes.items()):
            lines.append(f"  note {count:,}: {what}")
        return lines


def open_text(path: Path) -> IO[str]:
    """Open a (possibly gzipped) text file for reading, with a clear error when it is missing."""
    if not path.exists():
        raise TraceError(f"{path} does not exist; give the path of a trace file")
    if path.is_dir():
        raise TraceError(f"{path} is a directory; give a trace file")
    raw: IO[bytes] = gzip.open(path, "rb") if path.suffix == ".gz" else open(path, "rb")  # type: ignore[assignment]  # noqa: SIM115
    return io.TextIOWrapper(raw, encoding="utf-8", newline="")


def write_trace(jobs: Iterable[TraceJob], path: Path) -> int:
    """Write `jobs` as a normalised trace (gzip when `path` ends in .gz). Returns the number of rows."""
    path.parent.mkdir(parents=True, exist_ok=True)
    gz = path.suffix == ".gz"
    raw: IO[bytes] = gzip.open(path, "wb", compresslevel=6) if gz else open(path, "wb")  # type: ignore[assignment]  # noqa: SIM115
    count = 0
    with io.TextIOWrapper(raw, encoding="utf-8", newline="") as out:
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow(COLUMNS)
        for job in jobs:
            writer.writerow(job.row())
            count += 1
    return count


def read_trace(path: Path) -> tuple[list[TraceJob], ImportReport]:
    """Read a normalised trace, sorted by submit time (stable: file order breaks ties)."""
    report = ImportReport(source=str(path))
    with open_text(path) as f:
        reader = csv.reader(f)
        header = next(reader, None)
        if header is None:
            raise TraceError(f"{path} is empty; a trace starts with the header {','.join(REQUIRED)}")
        cols = {name.strip(): i for i, name in enumerate(header)}
        missing = [c for c in REQUIRED if c not in cols]
        if missing:
            raise TraceError(
                f"{path} lacks column(s) {', '.join(missing)}; a normalised trace has {', '.join(REQUIRED)} "
                "(convert raw traces with `nanum trace import`)"
            )
        jobs = list(_parse_rows(reader, cols, report))
    jobs.sort(key=lambda j: j.submit_time)
    return jobs, report


def _parse_rows(reader: Iterator[list[str]], cols: dict[str, int], report: ImportReport) -> Iterator[TraceJob]:
    seen: set[str] = set()
    for line, row in enumerate(reader, start=2):
        if not row:
            continue
        report.rows += 1
        try:
            job = _job_from_row(row, cols)
        except ValueError as e:
            report.skip(line, str(e))
            continue
        if job.job_id in seen:
            report.skip(line, "duplicate job_id")
            continue
        seen.add(job.job_id)
        report.kept += 1
        yield job


def _job_from_row(row: list[str], cols: dict[str, int]) -> TraceJob:
    def get(name: str) -> str:
        i = cols.get(name)
        return row[i].strip() if i is not None and i < len(row) else ""

    job_id = get("job_id")
    if not job_id:
        raise ValueError("empty job_id")
    limit = get("time_limit")
    return TraceJob(
        job_id=job_id,
        submit_time=number(get("submit_time"), "submit_time"),
        duration=number(get("duration"), "duration", positive=True),
        num_gpus=count(get("num_gpus"), "num_gpus"),
        user=get("user"),
        lab=get("lab"),
        gpu_type=get("gpu_type"),
        num_nodes=count(get("num_nodes") or "0", "num_nodes", minimum=0),
        time_limit=number(limit, "time_limit", positive=True) if limit else None,
        status=get("status"),
        name=get("name"),
        priority=int(number(get("priority") or "0", "priority")),
        kind=get("kind") or "batch",
    )


def number(text: str, what: str, *, positive: bool = False) -> float:
    """A finite number as written (`nanum.units.decimal_number`: not `1_0`, which Python's float reads as 10), or
    ValueError naming the field: `duration is not a number ('abc')`."""
    value = decimal_number(text.strip())
    if value is None:
        try:
            finite = math.isfinite(float(text))
        except ValueError:
            finite = True
        raise ValueError(f"{what} is {'not a number' if finite else 'not finite'} ({text!r})")
    if positive and value <= 0:
        raise ValueError(f"{what} is not positive ({text!r})")
    return value


def count(text: str, what: str, *, minimum: int = 1) -> int:
    """A whole number >= minimum (accepts `2.0`), or ValueError naming the field."""
    value = number(text, what)
    if value != int(value):
        raise ValueError(f"{what} is not a whole number ({text!r})")
    if value < minimum:
        raise ValueError(f"{what} is below {minimum} ({text!r})")
    return int(value)


def _num(value: float) -> str:
    return str(int(value)) if value == int(value) else repr(value)
