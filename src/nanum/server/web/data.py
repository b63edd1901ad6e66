"""What the dashboard pages show, read from the store: the queue, one job in full, the labs with their usage."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from sqlalchemy import func, select

from nanum.server.callers import Caller
from nanum.server.context import ServerContext
from nanum.server.errors import NotFound
from nanum.server.services import audit, budgets, jobs, jobusage, labs, usage
from nanum.store import EventRow, JobRow, JobStatsRow, LabRow, UserRow

DAY = 86400.0
LOG_TAIL = 16 * 1024

_JOB_COLUMNS = (
    JobRow.id,
    JobRow.name,
    JobRow.state,
    JobRow.kind,
    JobRow.gpus,
    JobRow.nodes,
    JobRow.gpu_model,
    JobRow.priority,
    JobRow.tier,
    JobRow.reason,
    JobRow.estimated_start,
    JobRow.submit_time,
    JobRow.start_time,
    JobRow.allocation,
    JobRow.borrowing,
    JobRow.array_id,
    JobRow.array_task,
    UserRow.name.label("user"),
    LabRow.name.label("lab"),
    JobStatsRow.util_now,
    JobStatsRow.util_sum,
    JobStatsRow.readings,
    JobStatsRow.idle_stage,
    JobStatsRow.idle_since,
)


def _jobs_query(states: tuple[str, ...]) -> Any:
    return (
        select(*_JOB_COLUMNS)
        .join(UserRow, UserRow.id == JobRow.user_id)
        .join(LabRow, LabRow.id == JobRow.lab_id)
        .outerjoin(JobStatsRow, JobStatsRow.job_id == JobRow.id)
        .where(JobRow.state.in_(states))
    )


#: The queue page lists this many waiting jobs, the first to start, and counts the rest: a browser polling a
#: 100,000-row table every few seconds made the server read and send 100,000 rows each time, and could not draw them.
QUEUE_SHOWN = 500
_WAITING = ("pending", "held")
_WAITING_COUNT = select(func.count()).where(JobRow.state.in_(_WAITING))


def queue(ctx: ServerContext) -> dict[str, Any]:
    """The first `QUEUE_SHOWN` waiting jobs in the order they should start (by estimated start, then tier,
    priority and age), how many wait in all (`waiting`), and running jobs, newest first."""
    first = _jobs_query(_WAITING).order_by(
        JobRow.estimated_start.asc().nulls_last(), JobRow.tier.desc(), JobRow.priority.desc(), JobRow.submit_time,
        JobRow.id).limit(QUEUE_SHOWN)
    with ctx.db.read() as s:
        shown = [dict(r._mapping) for r in s.execute(first)]
        waiting = s.execute(_WAITING_COUNT).scalar_one() if len(shown) == QUEUE_SHOWN else len(shown)
        running = [dict(r._mapping) for r in s.execute(_jobs_query(("running",)).order_by(JobRow.start_time.desc()))]
    for i, job in enumerate(shown, 1):
        job["position"] = i
    for job in running:
        job["gpu_util_avg"] = job["util_sum"] / job["readings"] if job["readings"] else None
        job["where"] = "; ".join(f"{a['node']}:{','.join(map(str, a['gpus']))}" for a in job["allocation"] or ())
    return {"pending": shown, "waiting": waiting, "running": running}


@dataclass(frozen=True, slots=True)
class JobPage:
    job: dict[str, Any]
    events: list[dict[str, Any]]
    usage: dict[str, Any]
    may_manage: bool
    log: str | None
    log_offset: int


def job_page(ctx: ServerContext, caller: Caller, job_id: int, log_offset: int | None = None) -> JobPage:
    """One job: its row, its history, its GPU use; its log (tail, or from `log_offset`) for its owner or admins."""
    with ctx.db.read() as s:
        found = s.execute(
            select(JobRow.__table__, UserRow.name.label("user"), LabRow.name.label("lab"))
            .join(UserRow, UserRow.id == JobRow.user_id)
            .join(LabRow, LabRow.id == JobRow.lab_id)
            .where(JobRow.id == job_id)
        ).first()
        if found is None:
            raise NotFound(f"no job {job_id}")
        events = [
            {"time": e.time, "kind": e.kind, "message": e.message}
            for e in s.execute(
                select(EventRow.time, EventRow.kind, EventRow.message)
                .where(EventRow.job_id == job_id)
                .order_by(EventRow.time, EventRow.id)
            )
        ]
    job = jobs.with_predictions(ctx, [dict(found._mapping)])[0]
    may = caller.may_manage(job["user_id"], job["lab_id"])
    if not may:
        job["env"] = None  # its owner's and admins' alone, as in the API
    log, offset = _log(ctx, job_id, log_offset) if may else (None, 0)
    return JobPage(job, events, jobusage.usage(ctx, job_id), may, log, offset)


def _log(ctx: ServerContext, job_id: int, offset: int | None) -> tuple[str, int]:
    """The log from `offset` (None: its last 16 KiB) as text, and where the next read starts."""
    path = ctx.settings.logs_dir / f"{job_id}.log"
    try:
        with open(path, "rb") as f:
            size = f.seek(0, 2)
            start = max(size - LOG_TAIL, 0) if offset is None else min(max(offset, 0), size)
            f.seek(start)
            data = f.read(LOG_TAIL * 4)
    except FileNotFoundError:
        return "", 0
    return data.decode(errors="replace"), start + len(data)


#: How many of each node's latest changes the Nodes page shows (`nanum node show NAME` has 50).
NODE_HISTORY = 5


def node_history(ctx: ServerContext) -> dict[str, list[dict[str, Any]]]:
    """Each node's latest changes (drains, resumes, health problems with the evidence), by name, oldest first."""
    with ctx.db.read() as s:
        return audit.recent(s, "node", NODE_HISTORY)


def labs_page(ctx: ServerContext, now: float | None = None) -> list[dict[str, Any]]:
    """Every lab: its detail (quota, use now, this month's budget) and usage by day (30 days) and by user."""
    now = time.time() if now is None else now
    with ctx.db.read() as s:
        names = list(s.scalars(select(LabRow.name).order_by(LabRow.name)))
        used = budgets.month_seconds(s, ctx.clock())  # once for every lab (`labs.lab_detail`)
    month = usage.window(None, None, None, now)
    since = (now // DAY - 29) * DAY
    out = []
    for name in names:
        detail = labs.lab_detail(ctx, name, used)
        days = usage.report(ctx, usage.Window(since, now), by="day", lab=name)["rows"]
        users = usage.report(ctx, month, by="user", lab=name)["rows"]
        detail["by_day"] = _days(days, since, now)
        detail["by_user"] = [(r["key"], r["gpu_hours"]) for r in users if r["gpu_hours"] > 0]
        out.append(detail)
    return out


def _days(rows: list[dict[str, Any]], since: float, now: float) -> list[tuple[str, float]]:
    found = {r["key"]: r["gpu_hours"] for r in rows}
    out = []
    t = since
    while t < now:
        key = time.strftime("%Y-%m-%d", time.gmtime(t))
        out.append((key[5:], found.get(key, 0.0)))
        t += DAY
    return out


def timeline_points(page: JobPage, now: float) -> tuple[list[list[float]], float, float]:
    """The job's timeline and the span to draw it over: its run so far, or its whole run once ended."""
    points = page.usage.get("timeline") or []
    start = page.job["start_time"] or (points[0][0] if points else now)
    end = page.job["end_time"] or now
    if points:
        start = min(start, points[0][0])
    return points, start, end
