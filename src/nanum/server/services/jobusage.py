"""What monitoring adds to a job as people see it: its GPU utilisation now and on average, whether it is flagged
idle (since when, and how long), and once it ended its efficiency summary and timeline."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from nanum.server.context import ServerContext
from nanum.server.errors import NotFound
from nanum.server.schemas import iso
from nanum.server.services import history
from nanum.store import JobRow, JobStatsRow

CHUNK = 500
_COLUMNS = (
    JobStatsRow.job_id,
    JobStatsRow.readings,
    JobStatsRow.util_sum,
    JobStatsRow.util_peak,
    JobStatsRow.util_now,
    JobStatsRow.memory_now,
    JobStatsRow.idle_stage,
    JobStatsRow.idle_since,
    JobStatsRow.flagged_at,
    JobStatsRow.summary,
)


def attach(ctx: ServerContext, bodies: list[dict[str, Any]], now: float | None = None) -> list[dict[str, Any]]:
    """Add `gpu_util`, `gpu_util_avg`, `idle` and `efficiency` to job bodies (in place) where known."""
    ids = [b["id"] for b in bodies if b.get("state") not in ("pending", "held")]
    if not ids:
        return bodies
    now = ctx.clock() if now is None else now
    with ctx.db.read() as s:
        found = {r.job_id: r for r in _stats(s, ids)}
    for body in bodies:
        row = found.get(body["id"])
        if row is not None:
            body.update(fields(row, body["state"], now))
    return bodies


def _stats(s: Session, ids: list[int]) -> Iterable[Any]:
    for i in range(0, len(ids), CHUNK):
        yield from s.execute(select(*_COLUMNS).where(JobStatsRow.job_id.in_(ids[i : i + CHUNK])))


def fields(row: Any, state: str, now: float) -> dict[str, Any]:
    out: dict[str, Any] = {"gpu_util_avg": round(row.util_sum / row.readings, 1) if row.readings else None}
    if state == "running":
        out["gpu_util"] = row.util_now
        if row.idle_stage in ("flagged", "released") and row.idle_since is not None:
            out["idle"] = {
                "stage": row.idle_stage,
                "since": iso(row.idle_since),
                "for_s": round(max(now - row.idle_since, 0.0)),
                "flagged_at": iso(row.flagged_at),
            }
    elif row.summary is not None:
        out["efficiency"] = row.summary
    return out


def usage(ctx: ServerContext, job_id: int) -> dict[str, Any]:
    """A job's GPU use: the figures of `attach`, its idle state, and its utilisation timeline."""
    now = ctx.clock()
    with ctx.db.read() as s:
        job = s.execute(select(JobRow.state, JobRow.start_time, JobRow.end_time).where(JobRow.id == job_id)).first()
        if job is None:
            raise NotFound(f"no job {job_id}")
        stats = s.get(JobStatsRow, job_id)
        if stats is not None and stats.timeline is not None:
            timeline = stats.timeline
        elif job.start_time is not None:
            timeline = history.thin(history.job_timeline(s, job_id, job.start_time, job.end_time or now), 600)
        else:
            timeline = []
    out: dict[str, Any] = {"job_id": job_id, "state": job.state, "timeline": timeline}
    if stats is not None:
        out.update(fields(stats, job.state, now))
        out["idle_stage"] = stats.idle_stage if job.state == "running" else None
        out["idle_since"] = iso(stats.idle_since) if job.state == "running" else None
        out["gpu_util_peak"] = stats.util_peak
        out["gpu_memory_peak_mb"] = stats.memory_peak
        out["gpu_memory_mb"] = stats.gpu_memory_mb
    return out
