"""Accounting: GPU-hours charged per second of allocation, jobs, average wait and budget use, over any window,
by day, user or lab (`GET /api/v1/usage`, `nanum usage`).

The ground truth is the `segments` table (one row per charged interval of a job's allocation) plus the running
jobs' time not charged yet; a window clips each interval to itself, so usage over a window is exact to the second
and equals the sum of the jobs' allocations in it. Days and months are UTC.

- `jobs`: jobs that held GPUs in the window (per row: in that day, for that user, for that lab);
- `avg_wait_s`: mean time queued before each run that started in the window;
- `lost_gpu_hours`: work since the last checkpoint thrown away by preemptions that ended in the window;
- `budget_percent`: for a calendar-month window grouped by lab or user, the share of that monthly budget used.
"""

from __future__ import annotations

import calendar
import time
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from typing import Any

from sqlalchemy import Select, select

from nanum.server.context import ServerContext
from nanum.server.errors import BadRequest, Invalid
from nanum.server.schemas import iso
from nanum.server.services.lifecycle import month_end, month_start
from nanum.store import JobRow, LabRow, SegmentRow, UserRow

DAY = 86400.0
Query = Select[*tuple[Any, ...]]
GROUPS = ("day", "user", "lab")
#: Windows lie within [1970-01-01, 3000-01-01) UTC; a date outside is refused (422).
EARLIEST, LATEST = 0.0, float(calendar.timegm((3000, 1, 1, 0, 0, 0)))


@dataclass(frozen=True, slots=True)
class Window:
    since: float
    until: float
    #: A whole calendar month: budgets apply to it.
    month: bool = False


@dataclass(frozen=True, slots=True)
class Piece:
    """A job's allocation within the window: `gpus` GPUs from `start` to `end`."""

    job_id: int
    user: str
    lab: str
    gpus: int
    start: float
    end: float
    wait_s: float | None
    lost: float


@dataclass(slots=True)
class Tally:
    gpu_seconds: float = 0.0
    jobs: set[int] = field(default_factory=set)
    waits: list[float] = field(default_factory=list)
    lost: float = 0.0

    def out(self, key: str, budget: float | None, month: bool) -> dict[str, Any]:
        hours = self.gpu_seconds / 3600.0
        percent = round(100.0 * hours / budget, 1) if month and budget else None
        return {
            "key": key,
            "gpu_hours": round(hours, 6),
            "gpu_seconds": round(self.gpu_seconds, 3),
            "jobs": len(self.jobs),
            "avg_wait_s": round(sum(self.waits) / len(self.waits), 3) if self.waits else None,
            "lost_gpu_hours": round(self.lost / 3600.0, 6),
            "budget_gpu_hours": budget,
            "budget_percent": percent,
        }


def window(month: str | None, since: str | None, until: str | None, now: float) -> Window:
    """The window a request names: a calendar month, or [since, until) (dates are whole UTC days), else this
    month so far. Raises BadRequest naming the bad value."""
    if month is not None:
        if since is not None or until is not None:
            raise BadRequest("give either month or since/until, not both")
        try:
            first = datetime.strptime(month, "%Y-%m").replace(tzinfo=UTC).timestamp()
        except ValueError:
            raise BadRequest(f"invalid month {month!r}: write YYYY-MM, e.g. 2026-11") from None
        return Window(_in_range(first, "month", month), _in_range(month_end(first), "month", month), month=True)
    if since is None and until is None:
        return Window(month_start(now), month_end(now), month=True)
    start = _when(since, "since", end_of_day=False) if since is not None else 0.0
    end = _when(until, "until", end_of_day=True) if until is not None else now
    if end <= start:
        raise BadRequest(f"until ({until}) must be after since ({since})")
    return Window(start, end)


def _when(text: str, name: str, *, end_of_day: bool) -> float:
    try:
        day = date.fromisoformat(text)
    except ValueError:
        pass
    else:
        return _in_range(float(calendar.timegm(day.timetuple())) + (DAY if end_of_day else 0.0), name, text)
    try:
        parsed = datetime.fromisoformat(text.replace("Z", "+00:00"))
        when = (parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)).timestamp()
    except (ValueError, OverflowError):
        raise BadRequest(f"invalid {name} {text!r}: write a date (2026-11-01) or a time (2026-11-01T09:00)") from None
    return _in_range(when, name, text)


def _in_range(when: float, name: str, text: str) -> float:
    if not EARLIEST <= when <= LATEST:
        raise Invalid(f"{name} {text} is out of range; give a date from 1970-01-01 to 2999-12-31")
    return when


def report(
    ctx: ServerContext, win: Window, *, by: str, lab: str | None = None, user: str | None = None
) -> dict[str, Any]:
    if by not in GROUPS:
        raise BadRequest(f"invalid by {by!r}: choose day, user or lab")
    now = ctx.clock()
    with ctx.db.read() as s:
        pieces = [
            *_charged(s.execute(_filter(_segments(win), lab, user))),
            *_running(s.execute(_filter(_running_query(), lab, user)), now),
        ]
        budgets = _budgets(s, by)
    tallies: dict[str, Tally] = defaultdict(Tally)
    total = Tally()
    for piece in pieces:
        for key, start, end in _split(piece, win, by):
            for tally in (tallies[key], total):
                _add(tally, piece, start, end, win)
    rows = [tallies[k].out(k, budgets.get(k), win.month) for k in sorted(tallies)]
    return {
        "since": iso(win.since) if win.since > 0 else None,
        "until": iso(win.until),
        "by": by,
        "lab": lab,
        "user": user,
        "rows": rows,
        "total": total.out("total", None, False),
    }


def _add(tally: Tally, piece: Piece, start: float, end: float, win: Window) -> None:
    tally.gpu_seconds += piece.gpus * (end - start)
    tally.jobs.add(piece.job_id)
    if piece.wait_s is not None and start == piece.start and win.since <= piece.start < win.until:
        tally.waits.append(piece.wait_s)
    if piece.lost and end == piece.end and win.since < piece.end <= win.until:
        tally.lost += piece.lost


def _split(piece: Piece, win: Window, by: str) -> list[tuple[str, float, float]]:
    """The piece clipped to the window, as (group key, start, end); by day, cut at UTC midnights."""
    start, end = max(piece.start, win.since), min(piece.end, win.until)
    if end < start or (end == start and not win.since <= start < win.until):
        return []
    if by != "day":
        return [(piece.user if by == "user" else piece.lab, start, end)]
    out = []
    while True:
        cut = min((start // DAY + 1) * DAY, end)
        out.append((time.strftime("%Y-%m-%d", time.gmtime(start)), start, cut))
        if cut >= end:
            return out
        start = cut


def _segments(win: Window) -> Query:
    return (
        select(
            SegmentRow.job_id,
            SegmentRow.gpus,
            SegmentRow.start,
            SegmentRow.end,
            SegmentRow.wait_s,
            SegmentRow.lost_gpu_seconds,
            UserRow.name.label("user"),
            LabRow.name.label("lab"),
        )
        .join(UserRow, UserRow.id == SegmentRow.user_id)
        .join(LabRow, LabRow.id == SegmentRow.lab_id)
        .where(SegmentRow.end >= win.since, SegmentRow.start < win.until)
    )


def _running_query() -> Query:
    return (
        select(
            JobRow.id,
            JobRow.gpus,
            JobRow.nodes,
            JobRow.start_time,
            JobRow.charged_until,
            JobRow.queued_at,
            JobRow.submit_time,
            UserRow.name.label("user"),
            LabRow.name.label("lab"),
        )
        .join(UserRow, UserRow.id == JobRow.user_id)
        .join(LabRow, LabRow.id == JobRow.lab_id)
        .where(JobRow.state == "running", JobRow.start_time.is_not(None))
    )


def _filter(query: Query, lab: str | None, user: str | None) -> Query:
    if lab:
        query = query.where(LabRow.name == lab)
    if user:
        query = query.where(UserRow.name == user)
    return query


def _charged(rows: Any) -> list[Piece]:
    return [Piece(r.job_id, r.user, r.lab, r.gpus, r.start, r.end, r.wait_s, r.lost_gpu_seconds) for r in rows]


def _running(rows: Any, now: float) -> list[Piece]:
    """The running jobs' time not charged yet, up to now."""
    out = []
    for r in rows:
        since = r.charged_until or r.start_time
        wait = r.start_time - (r.queued_at or r.submit_time) if since == r.start_time else None
        out.append(Piece(r.id, r.user, r.lab, r.gpus * r.nodes, since, max(now, since), wait, 0.0))
    return out


def _budgets(s: Any, by: str) -> dict[str, float]:
    if by == "day":
        return {}
    row = LabRow if by == "lab" else UserRow
    query = select(row.name, row.monthly_gpu_hours).where(row.monthly_gpu_hours.is_not(None))
    return {name: hours for name, hours in s.execute(query)}
