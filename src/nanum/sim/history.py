"""A server's history as simulator input: the rows of `GET /api/v1/trace` as a normalised trace and its cluster
as a cluster file (`nanum trace export`), and the `--since 90d` windows the planning commands take."""

from __future__ import annotations

import re
import time
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from nanum.sim.traces import TraceJob, write_trace

AGO_RE = re.compile(r"^(\d+(?:\.\d+)?)\s*([smhdw])$")
UNIT_S = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 7 * 86400.0}


def when(text: str | None, now: float | None = None) -> str | None:
    """`90d`, `12h`, `2w` (that long ago) as a UTC time the server reads; a date or time passes through."""
    if text is None:
        return None
    m = AGO_RE.match(text.strip())
    if not m:
        return text.strip()
    ago = float(m.group(1)) * UNIT_S[m.group(2)]
    moment = (time.time() if now is None else now) - ago
    return datetime.fromtimestamp(moment, UTC).strftime("%Y-%m-%dT%H:%M:%S")


def trace_jobs(rows: Iterable[Mapping[str, Any]]) -> list[TraceJob]:
    """The server's trace rows as `TraceJob`s, in submit order."""
    jobs = [
        TraceJob(
            job_id=str(r["job_id"]), submit_time=float(r["submit_time"]), duration=float(r["duration"]),
            num_gpus=int(r["num_gpus"]), user=r.get("user") or "", lab=r.get("lab") or "",
            gpu_type=r.get("gpu_type") or "", num_nodes=int(r.get("num_nodes") or 0),
            time_limit=None if r.get("time_limit") is None else float(r["time_limit"]),
            status=r.get("status") or "", name=r.get("name") or "", priority=int(r.get("priority") or 0),
            kind=r.get("kind") or "batch",
        )
        for r in rows
    ]
    jobs.sort(key=lambda j: (j.submit_time, int(j.job_id) if j.job_id.isdigit() else 0))
    return jobs


def cluster_path(trace: Path) -> Path:
    """The cluster file beside a trace: `history.csv.gz` → `history.toml`."""
    stem = trace.name.removesuffix(".gz").removesuffix(".csv")
    return trace.with_name(f"{stem}.toml")


def cluster_toml(cluster: Mapping[str, Any], comment: str = "") -> str:
    """A cluster file (`nanum.sim.cluster`) for the server's cluster dict: node groups and lab quotas."""
    lines = [f"# {line}" for line in comment.splitlines()]
    lines += [f"name = {_q(cluster['name'])}", f"lend = {_b(cluster['lend'])}", f"reclaim = {_b(cluster['reclaim'])}"]
    for group in cluster["nodes"]:
        lines += ["", "[[nodes]]", *(f"{k} = {_v(v)}" for k, v in group.items() if v not in (None, ""))]
    for lab, quota in cluster.get("labs", {}).items():
        lines += ["", f"[labs.{_q(lab)}]", *(f"{k} = {_v(v)}" for k, v in quota.items())]
    return "\n".join(lines) + "\n"


def export(answer: Mapping[str, Any], output: Path) -> tuple[int, Path]:
    """Write the trace and, beside it, the cluster file. Returns the number of jobs and the cluster file's path."""
    written = write_trace(trace_jobs(answer["jobs"]), output)
    path = cluster_path(output)
    comment = f"The cluster of a nanum server; its policy was {answer['policy']}."
    path.write_text(cluster_toml(answer["cluster"], comment))
    return written, path


def _q(text: str) -> str:
    return '"' + str(text).replace("\\", "\\\\").replace('"', '\\"') + '"'


def _b(value: bool) -> str:
    return "true" if value else "false"


def _v(value: Any) -> str:
    if isinstance(value, bool):
        return _b(value)
    if isinstance(value, int | float):
        return repr(value)
    return _q(value)
