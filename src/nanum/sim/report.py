"""Run outputs: jobs.csv, allocations.csv, nodes.csv, summary.json, PNG plots, and comparison tables.

- `jobs.csv`: `job_id, user, lab, num_gpus, submit_time, start_time, end_time, queue_delay, jct, preemptions`
  (DESIGN.md), then `duration, lost_seconds, nodes, status` so that a run can be checked on its own
  (`start_time`/`end_time` empty for a job that never ran; `status` says why).
- `allocations.csv`: `job_id, node, gpus, start, end`, one row per node of every run; `gpus` lists indices
  separated by spaces.
- `nodes.csv`: `node, gpus, model, owner`: the cluster the run used (the checker reads it).
- `summary.json`: see `nanum.sim.metrics.summarize`.
- plots: `jct_cdf.png`, `utilisation.png`, `queue_length.png`.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from nanum.sim.engine import SimResult
from nanum.sim.metrics import jct, queue_delay

JOB_COLUMNS = ("job_id", "user", "lab", "num_gpus", "submit_time", "start_time", "end_time", "queue_delay", "jct",
               "preemptions", "duration", "lost_seconds", "nodes", "status")
ALLOC_COLUMNS = ("job_id", "node", "gpus", "start", "end")
PLOT_BINS = 600


def _n(value: float) -> str:
    return str(int(value)) if value == int(value) else f"{value:.3f}"


def write_run(result: SimResult, summary: dict[str, Any], out: Path, plots: bool = True) -> list[Path]:
    """Write every output file of one run into `out`; returns the paths written."""
    out.mkdir(parents=True, exist_ok=True)
    paths = [_jobs_csv(result, out / "jobs.csv"), _allocations_csv(result, out / "allocations.csv"),
             _nodes_csv(result, out / "nodes.csv")]
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    paths.append(out / "summary.json")
    if plots:
        from nanum.sim.plots import plot_run

        paths += plot_run(result, summary, out)
    return paths


def _jobs_csv(result: SimResult, path: Path) -> Path:
    with path.open("w", newline="") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(JOB_COLUMNS)
        for j in result.jobs:
            t = j.trace
            ran = j.end is not None
            w.writerow([
                t.job_id, j.user, j.lab, t.num_gpus, _n(t.submit_time),
                _n(j.first_start) if j.first_start is not None else "", _n(j.end) if j.end is not None else "",
                _n(queue_delay(j)) if ran else "", _n(jct(j)) if ran else "", j.preemptions, _n(j.work),
                _n(j.lost), j.nodes, f"unschedulable: {j.unschedulable}" if j.unschedulable else j.status,
            ])
    return path


def _allocations_csv(result: SimResult, path: Path) -> Path:
    ids = [j.trace.job_id for j in result.jobs]
    with path.open("w", newline="") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(ALLOC_COLUMNS)
        for s in sorted(result.segments, key=lambda s: (s.start, s.job, s.node)):
            w.writerow([ids[s.job], s.node, " ".join(map(str, s.gpus)), _n(s.start), _n(s.end)])
    return path


def _nodes_csv(result: SimResult, path: Path) -> Path:
    with path.open("w", newline="") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(("node", "gpus", "model", "owner"))
        for n in result.cluster.build_nodes():
            w.writerow([n.name, len(n.gpus), n.gpu_model, n.owner or ""])
    return path


# -- tables --------------------------------------------------------------------------------------------------------

#: (header, summary field) of the comparison table printed by `nanum sim --compare`; times in seconds.
COMPARE_COLUMNS: tuple[tuple[str, str], ...] = (
    ("avg JCT", "jct.avg"), ("p95 JCT", "jct.p95"), ("avg queue", "queue_delay.avg"),
    ("p95 queue", "queue_delay.p95"), ("util", "utilisation"), ("preempt", "preemptions"),
    ("lost GPU-h", "lost_gpu_hours"), ("Jain", "fairness.jain_lab_slowdown"), ("sim s", "simulator.wall_seconds"),
)
#: every figure, for documents.
FULL_COLUMNS: tuple[tuple[str, str], ...] = (
    ("avg JCT", "jct.avg"), ("p50 JCT", "jct.p50"), ("p95 JCT", "jct.p95"), ("p99 JCT", "jct.p99"),
    ("avg queue", "queue_delay.avg"), ("p95 queue", "queue_delay.p95"), ("util", "utilisation"),
    ("makespan", "makespan"), ("preempt", "preemptions"), ("lost GPU-h", "lost_gpu_hours"),
    ("Jain", "fairness.jain_lab_slowdown"), ("worst lab slowdown", "fairness.max_lab_avg_slowdown"),
)


def field(summary: dict[str, Any], dotted: str) -> Any:
    value: Any = summary
    for part in dotted.split("."):
        value = value[part]
    return value


def fmt(value: Any, key: str) -> str:
    if key == "utilisation":
        return f"{100 * value:.1f}%"
    if key.startswith("fairness.jain"):
        return f"{value:.3f}"
    if key.startswith("fairness.max"):
        return f"{value:.2f}"
    if isinstance(value, float):
        return f"{value:,.0f}" if abs(value) >= 100 else f"{value:,.1f}"
    return f"{value:,}"


def compare_table(summaries: Sequence[dict[str, Any]], title: str = "") -> Any:
    """One Rich table: a row per run, seconds for times."""
    from rich.table import Table

    table = Table(title=title or None)
    table.add_column("policy")
    for name, _ in COMPARE_COLUMNS:
        table.add_column(name, justify="right")
    for s in summaries:
        table.add_row(s["policy_text"], *(fmt(field(s, key), key) for _, key in COMPARE_COLUMNS))
    return table


def markdown_table(summaries: Sequence[dict[str, Any]], columns: Sequence[tuple[str, str]] = COMPARE_COLUMNS,
                   label: str = "policy") -> str:
    """The same table as Markdown, for docs."""
    head = f"| {label} | " + " | ".join(name for name, _ in columns) + " |"
    rule = "|---|" + "|".join("---:" for _ in columns) + "|"
    rows = [f"| {s['policy_text']} | " + " | ".join(fmt(field(s, k), k) for _, k in columns) + " |"
            for s in summaries]
    return "\n".join([head, rule, *rows])
