"""The Alibaba GPU v2023 (`openb`) importer: pod list → trace, node list → cluster file.

A pod's submit time is `creation_time`, its run time `deletion_time − scheduled_time`. Pods still `Pending` at the
end of the trace never ran (no run time) and are skipped with that reason; pods still `Running` are kept with the
run time observed up to the end of the trace (noted). A pod asking for a fraction of a GPU (`gpu_milli` < 1000) is
given one whole GPU, as nanum allocates whole GPUs (noted). `gpu_spec` naming one model becomes the job's GPU
model; several models become "any model" (noted). The QoS class becomes the job name, so run-time prediction
learns per class (pods carry no user).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path

from nanum.sim.cluster import ClusterSpec, NodeGroup
from nanum.sim.rows import ImportOptions, dict_rows, gpu_count, rows
from nanum.sim.traces import ImportReport, TraceError, TraceJob, number

POD_COLUMNS = ("name", "num_gpu", "gpu_milli", "gpu_spec", "pod_phase", "creation_time", "deletion_time",
               "scheduled_time")
NODE_COLUMNS = ("sn", "cpu_milli", "memory_mib", "gpu", "model")


def pods(path: Path, opts: ImportOptions, report: ImportReport) -> Iterator[TraceJob]:
    models: dict[str, int] | None = None
    if opts.nodes is not None:
        models = _largest_node_per_model(opts.nodes)
    for line, row in rows(path, POD_COLUMNS, "alibaba-openb pod list", report):
        job = _pod(line, row, report, models)
        if job is not None:
            yield job


def _pod(line: int, row: dict[str, str], report: ImportReport, models: dict[str, int] | None) -> TraceJob | None:
    gpus = gpu_count(row["num_gpu"], report, line)
    if gpus is None:
        return None
    if row["pod_phase"] == "Pending" or not row["scheduled_time"]:
        report.skip(line, "never scheduled in the trace (no scheduled_time): no run time")
        return None
    try:
        submit = number(row["creation_time"], "creation_time")
        start = number(row["scheduled_time"], "scheduled_time")
        end = number(row["deletion_time"], "deletion_time")
    except ValueError as e:
        report.skip(line, str(e))
        return None
    if end <= start:
        report.skip(line, "deletion_time is not after scheduled_time: no run time")
        return None
    if row["gpu_milli"] and float(row["gpu_milli"] or 1000) < 1000:
        report.note("pods asking for a fraction of a GPU, given one whole GPU")
    model = _model(row["gpu_spec"], report)
    if models is not None and (why := _misfit(gpus, model, models)):
        report.skip(line, why)
        return None
    if row["pod_phase"] == "Running":
        report.note("pods still running at the end of the trace (run time cut there)")
    status = {"Succeeded": "completed", "Failed": "failed", "Running": "running"}.get(row["pod_phase"], "")
    return TraceJob(job_id=row["name"], submit_time=submit, duration=end - start, num_gpus=gpus,
                    gpu_type=model, status=status, name=row.get("qos", ""))


def _model(spec: str, report: ImportReport) -> str:
    allowed = [m for m in spec.split("|") if m]
    if len(allowed) > 1:
        report.note("pods allowing several GPU models, imported as any model")
        return ""
    return allowed[0] if allowed else ""


def _misfit(gpus: int, model: str, models: dict[str, int]) -> str | None:
    if model and model not in models:
        return f"asks for GPU model {model}, which no node of the node list has"
    biggest = models.get(model, 0) if model else max(models.values(), default=0)
    if gpus > biggest:
        return f"asks for {gpus} GPUs on one node; the largest node{' of ' + model if model else ''} has {biggest}"
    return None


def _largest_node_per_model(path: Path) -> dict[str, int]:
    largest: dict[str, int] = {}
    for group in openb_cluster(path).groups:
        largest[group.model] = max(largest.get(group.model, 0), group.gpus)
    return largest


def openb_cluster(path: Path) -> ClusterSpec:
    """The GPU nodes of an openb node list as node groups (same GPUs, model, CPUs and memory → one group)."""
    if not path.exists():
        raise TraceError(f"node list {path} does not exist")
    shapes: Counter[tuple[int, str, int, int]] = Counter()
    for _line, row in dict_rows(path, NODE_COLUMNS, "alibaba-openb node list"):
        try:
            gpus = int(number(row["gpu"], "gpu"))
            cpus = int(number(row["cpu_milli"], "cpu_milli") // 1000)
            memory = int(number(row["memory_mib"], "memory_mib"))
        except ValueError as e:
            raise TraceError(f"node list {path}, node {row.get('sn', '?')}: {e}") from None
        if gpus > 0:
            shapes[(gpus, row["model"] or "GPU", cpus, memory)] += 1
    if not shapes:
        raise TraceError(f"node list {path} has no node with GPUs")
    groups = tuple(
        NodeGroup(count=n, gpus=g, model=m, cpus=c, memory_mb=mem, name=f"{m.lower()}-{g}g-{i:02d}")
        for i, ((g, m, c, mem), n) in enumerate(sorted(shapes.items()))
    )
    return ClusterSpec(name=path.name.split(".")[0], groups=groups)
