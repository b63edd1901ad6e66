"""GPU history: rolling readings up into 1-minute and 1-hour buckets, pruning old rows, reading timelines back,
and the efficiency summary (with a compact timeline) each job keeps once it ended.

Retention (`Retention`): full-rate readings for an hour, 1-minute buckets for a week, 1-hour buckets for a year.
A rollup turns every complete bucket since the last one rolled up (`rollup.<res>` in the settings) into one
row per GPU and job: the readings' mean and peak, weighted by how many readings each source row stands for.
Rolling up twice is harmless (existing buckets are kept), so servers sharing a database may all do it.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from sqlalchemy import bindparam, delete, func, select
from sqlalchemy.orm import Session

from nanum.monitor.efficiency import summarize
from nanum.server.context import ServerContext
from nanum.server.services import monitor_settings
from nanum.server.services.samples import insert_ignoring_duplicates, tally_of
from nanum.store import GpuSampleRow, JobRow, JobStatsRow, NodeRow, table

#: Wait this long after a bucket ends before rolling it up: readings arrive a few seconds late.
LAG_S = 30.0
TIMELINE_POINTS = 240
FINISHED = ("completed", "failed", "cancelled", "timeout")


@dataclass(frozen=True, slots=True, kw_only=True)
class Retention:
    raw_s: float = 3600.0
    minute_s: float = 7 * 86400.0
    hour_s: float = 365 * 86400.0

    def keep(self, res: int) -> float:
        return {0: self.raw_s, 60: self.minute_s}.get(res, self.hour_s)


def maintain(ctx: ServerContext, now: float, retention: Retention = Retention()) -> dict[str, int]:
    """One round of upkeep: roll up, prune, summarise finished jobs. Returns counts, for the log and tests."""
    done = {"rolled_60": rollup(ctx, 60, 0, now), "rolled_3600": rollup(ctx, 3600, 60, now)}
    done["pruned"] = prune(ctx, now, retention)
    done["summarised"] = summarise_finished(ctx)
    return done


# -- rollups ---------------------------------------------------------------------------------------------------


def rollup(ctx: ServerContext, res: int, source: int, now: float) -> int:
    """Roll complete `res`-second buckets up from rows of resolution `source`. Returns rows written."""
    key = f"rollup.{res}"
    with ctx.db.write() as s:
        start = monitor_settings.get(s, key)
        if start is None:
            first = s.scalar(select(func.min(GpuSampleRow.at)).where(GpuSampleRow.res == source))
            if first is None:
                return 0
            start = math.floor(first / res) * res
        end = math.floor((now - LAG_S) / res) * res
        if end <= start:
            return 0
        rows = _buckets(s, res, source, float(start), float(end))
        if rows:
            s.connection().execute(insert_ignoring_duplicates(s), rows)
        monitor_settings.put(s, key, end)
        return len(rows)


def _buckets(s: Session, res: int, source: int, start: float, end: float) -> list[dict[str, Any]]:
    found = s.execute(
        select(GpuSampleRow.__table__).where(
            GpuSampleRow.res == source, GpuSampleRow.at >= start, GpuSampleRow.at < end
        )
    )
    acc: dict[tuple[int, int, float, int], list[Any]] = {}
    for r in found:
        key = (r.node_id, r.gpu_index, math.floor(r.at / res) * res, r.job_id)
        a = acc.get(key)
        if a is None:
            acc[key] = [r.util * r.n, r.util_max, r.memory_mb * r.n, r.memory_max, _w(r.power_w, r.n),
                        _w(r.temperature_c, r.n), r.n, _had(r.power_w, r.n), _had(r.temperature_c, r.n)]  # fmt: skip
            continue
        a[0] += r.util * r.n
        a[1] = max(a[1], r.util_max)
        a[2] += r.memory_mb * r.n
        a[3] = max(a[3], r.memory_max)
        a[4] += _w(r.power_w, r.n)
        a[5] += _w(r.temperature_c, r.n)
        a[6] += r.n
        a[7] += _had(r.power_w, r.n)
        a[8] += _had(r.temperature_c, r.n)
    return [
        {
            "node_id": node,
            "gpu_index": gpu,
            "res": res,
            "at": float(t),
            "job_id": job,
            "util": a[0] / a[6],
            "util_max": a[1],
            "memory_mb": a[2] / a[6],
            "memory_max": a[3],
            "power_w": a[4] / a[7] if a[7] else None,
            "temperature_c": a[5] / a[8] if a[8] else None,
            "n": a[6],
        }
        for (node, gpu, t, job), a in acc.items()
    ]


def _w(value: float | None, n: int) -> float:
    return 0.0 if value is None else value * n


def _had(value: float | None, n: int) -> int:
    """The readings behind a mean of `value`: a power or temperature is averaged over the readings that had one."""
    return 0 if value is None else n


def prune(ctx: ServerContext, now: float, retention: Retention) -> int:
    with ctx.db.write() as s:
        total = 0
        for res in (0, 60, 3600):
            stale = delete(GpuSampleRow).where(GpuSampleRow.res == res, GpuSampleRow.at < now - retention.keep(res))
            total += s.connection().execute(stale).rowcount or 0
        return total


# -- reading history back --------------------------------------------------------------------------------------


def job_timeline(
    s: Session, job_id: int, start: float | None, end: float, retention: Retention = Retention()
) -> list[list[float]]:
    """`[[t, util, memory_mb], ...]` of a job (all its runs) at the finest resolution still kept for its whole
    latest run: utilisation averaged over its GPUs, memory per GPU."""
    begin = start if start is not None else end
    for res in (0, 60, 3600):
        if res == 3600 or begin >= end - retention.keep(res):
            points = _series(s, [GpuSampleRow.job_id == job_id], res, 0.0)
            if points or res == 3600:
                return points
    return []


def job_timelines(
    s: Session, spans: dict[int, tuple[float | None, float]], retention: Retention = Retention()
) -> dict[int, list[list[float]]]:
    """`job_timeline` of each job in `spans` (job id → its start and end): those whose latest run lies within the
    raw readings' retention in one statement, the others one by one."""
    raw = retention.keep(0)
    recent = sorted(j for j, (start, end) in spans.items() if (end if start is None else start) >= end - raw)
    found: dict[int, list[list[float]]] = defaultdict(list)
    if recent:
        rows = s.execute(
            select(GpuSampleRow.job_id, GpuSampleRow.at, func.avg(GpuSampleRow.util), func.avg(GpuSampleRow.memory_mb))
            .where(GpuSampleRow.job_id.in_(recent), GpuSampleRow.res == 0)
            .group_by(GpuSampleRow.job_id, GpuSampleRow.at)
            .order_by(GpuSampleRow.job_id, GpuSampleRow.at)
        )
        for job_id, t, u, m in rows:
            found[job_id].append([float(t), round(float(u), 1), round(float(m))])
    return {j: found.get(j) or job_timeline(s, j, *spans[j], retention) for j in spans}


def gpu_timeline(s: Session, node_id: int, gpu: int, since: float, res: int = 60) -> list[list[float]]:
    """`[[t, util, memory_mb], ...]` of one GPU since `since` at resolution `res`."""
    return _series(s, [GpuSampleRow.node_id == node_id, GpuSampleRow.gpu_index == gpu], res, since)


def _series(s: Session, where: list[Any], res: int, since: float) -> list[list[float]]:
    rows = s.execute(
        select(GpuSampleRow.at, func.avg(GpuSampleRow.util), func.avg(GpuSampleRow.memory_mb))
        .where(*where, GpuSampleRow.res == res, GpuSampleRow.at >= since - res)
        .group_by(GpuSampleRow.at)
        .order_by(GpuSampleRow.at)
    )
    return [[float(t), round(float(u), 1), round(float(m))] for t, u, m in rows]


def thin(points: list[list[float]], limit: int = TIMELINE_POINTS) -> list[list[float]]:
    """At most `limit` points: neighbours averaged in equal runs."""
    if len(points) <= limit:
        return points
    step = len(points) / limit
    out = []
    for i in range(limit):
        chunk = points[int(i * step) : int((i + 1) * step)] or [points[-1]]
        out.append([chunk[0][0], *(round(sum(p[k] for p in chunk) / len(chunk), 1) for k in (1, 2))])
    return out


# -- summaries -------------------------------------------------------------------------------------------------


def summarise_finished(ctx: ServerContext, limit: int = 200) -> int:
    """Give every finished job that has readings but no summary yet its summary and timeline.

    Read as plain rows and written in one statement: on a busy cluster this runs every few seconds on the
    scheduling server, beside its ticks, and loading and flushing whole ORM rows of jobs and their tallies was
    a quarter of that process's time at 1,000 nodes (`benchmarks/scale.py`)."""
    with ctx.db.write() as s:
        found = s.connection().execute(_UNSUMMARISED, {"limit": limit}).all()
        if not found:
            return 0
        models = ctx.caches.models.get_or_load("", lambda: cluster_models(s))
        spans = {row.job_id: (row.start_time, row.end_time or row.last or 0.0) for row in found}
        timelines = job_timelines(s, spans)
        s.connection().execute(_SUMMARISE, [{
            "job": row.job_id,
            "summary": summarize(tally_of(row), gpus=row.gpus, gpu_model=row.gpu_model or "",
                                 gpu_memory_mb=row.gpu_memory_mb or 0, cpus=row.cpus or 0, models=models),
            "timeline": thin(timelines[row.job_id]),
        } for row in found])
        return len(found)


_STATS = table(JobStatsRow)
#: What a summary is made of: the job's tally (`tally_of`) and GPU, and its size and run.
_UNSUMMARISED = (
    select(*(_STATS.c[name] for name in ("job_id", "readings", "util_sum", "util_peak", "memory_sum", "memory_peak",
                                         "cpu_sum", "idle", "first", "last", "gpu_model", "gpu_memory_mb")),
           JobRow.start_time, JobRow.end_time, JobRow.gpus, JobRow.cpus)
    .join(JobRow, JobRow.id == _STATS.c.job_id)
    .where(_STATS.c.summary.is_(None), _STATS.c.readings > 0, JobRow.state.in_(FINISHED))
    .limit(bindparam("limit"))
)
_SUMMARISE = (_STATS.update().where(_STATS.c.job_id == bindparam("job"))
              .values(summary=bindparam("summary"), timeline=bindparam("timeline")))


def cluster_models(s: Session) -> dict[str, int]:
    """Memory (MiB) of each GPU model some node has."""
    models: dict[str, int] = defaultdict(int)
    for (inventory,) in s.execute(select(NodeRow.inventory).where(NodeRow.inventory.is_not(None))):
        for g in inventory.get("gpus", ()):
            models[str(g.get("model", ""))] = max(models[str(g.get("model", ""))], int(g.get("memory_mb", 0)))
    return dict(models)
