"""Charging labs and users for the runs that ended: their decayed usage (fair-share) and their monthly GPU-seconds
(budgets, reports).

A heartbeat that ends a run only inserts its segment (`lifecycle.charge`). The rows charged here are shared by
every job of a lab, so a heartbeat that updated them held them locked until it committed while every other node
ending a job of that lab waited in line (at 300 nodes, scheduling cycles of 20 s behind those waits). Instead
the scheduling leader settles all new segments in a tick's write transaction (which it commits anyway), at most
every `scheduler.SETTLE_EVERY_S`: it is the one writer of these rows besides an admin's edits. Until then a
snapshot counts the unsettled segments beside the usage stored (`unsettled`), so no tick decides on usage that
misses a run. A segment is settled exactly once: it is charged and marked in the same transaction.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from sqlalchemy import bindparam, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from nanum.core import decay
from nanum.server.services.lifecycle import by_month
from nanum.store import LabRow, SegmentRow, UsageRow, UserRow, table

__all__ = ["settle"]

#: Segments settled per transaction at most (a long outage's backlog is settled over a few ticks).
BATCH = 5000


def settle(s: Session, half_life: float) -> int:
    """Charge every unsettled segment to its lab and user, and mark it settled, in the transaction of `s` (the
    scheduler's write). Returns how many it settled."""
    conn = s.connection()
    rows = conn.execute(_TO_SETTLE).all()
    if not rows:
        return 0
    charged = [r for r in rows if r.end > r.start and r.gpus > 0]
    _charge(s, LabRow, "lab", {r.lab_id for r in charged}, [(r.lab_id, r) for r in charged], half_life)
    _charge(s, UserRow, "user", {r.user_id for r in charged}, [(r.user_id, r) for r in charged], half_life)
    conn.execute(_MARK_SETTLED, {"ids": [r.id for r in rows]})
    return len(rows)


def unsettled(s: Session) -> list[Any]:
    """The runs not yet charged to their owners: (lab, user, gpus, start, end) of each unsettled segment, for a
    snapshot to count beside the usage stored."""
    return list(s.connection().execute(_UNSETTLED).all())


def in_month(run: Any, month: str) -> float:
    """The GPU-seconds of an unsettled run (`unsettled`) that fall in `month` (YYYY-MM)."""
    return sum(seconds for m, seconds in by_month(run.gpus, run.start, run.end) if m == month)


def _charge(s: Session, model: type[LabRow] | type[UserRow], kind: str, ids: set[int], owed: list[tuple[int, Any]],
            half_life: float) -> None:
    """Add each segment to its owner's decayed usage, in the order the runs ended, and to the owner's months.
    Rows are locked in id order (FOR NO KEY UPDATE: a new segment's foreign-key check, KEY SHARE, still passes)."""
    if not ids:
        return
    rows = {row.id: [row.name, row.decayed_usage, row.decayed_at]
            for row in s.connection().execute(_OWNERS[kind], {"ids": sorted(ids)})}
    months: dict[tuple[str, str], float] = defaultdict(float)
    for owner_id, seg in sorted(owed, key=lambda pair: (pair[0], pair[1].end)):
        row = rows.get(owner_id)
        if row is None:
            continue
        name, usage, at = row
        row[1] = decay(usage, seg.end - at, half_life) + seg.gpus * (seg.end - seg.start)
        row[2] = max(at, seg.end)
        for month, seconds in by_month(seg.gpus, seg.start, seg.end):
            months[(month, name)] += seconds
    owners = table(model)
    s.connection().execute(
        owners.update().where(owners.c.id == bindparam("owner"))
        .values(decayed_usage=bindparam("usage"), decayed_at=bindparam("at")),
        [{"owner": owner_id, "usage": usage, "at": at} for owner_id, (_, usage, at) in sorted(rows.items())])
    for (month, name), seconds in sorted(months.items()):
        _add_usage(s, month, kind, name, seconds)


def _add_usage(s: Session, month: str, kind: str, name: str, seconds: float) -> None:
    dialect = s.get_bind().dialect.name
    stmt = _UPSERTS.get(dialect)
    if stmt is None:
        insert: Any = (postgresql if dialect == "postgresql" else sqlite).insert(USAGE)
        stmt = _UPSERTS[dialect] = insert.on_conflict_do_update(
            index_elements=["month", "kind", "name"],
            set_={"gpu_seconds": USAGE.c.gpu_seconds + insert.excluded.gpu_seconds},
        )
    s.connection().execute(stmt, {"month": month, "kind": kind, "name": name, "gpu_seconds": seconds})


USAGE = table(UsageRow)
_UPSERTS: dict[str, Any] = {}

# Statements of every tick, built once (building one costs about as much as running it).
_TO_SETTLE = (
    select(SegmentRow.id, SegmentRow.lab_id, SegmentRow.user_id, SegmentRow.gpus, SegmentRow.start, SegmentRow.end)
    .where(SegmentRow.settled.is_(False))
    .order_by(SegmentRow.id)
    .limit(BATCH)
    .with_for_update(skip_locked=True)
)
_MARK_SETTLED = update(SegmentRow).where(SegmentRow.id.in_(bindparam("ids", expanding=True))).values(settled=True)
_UNSETTLED = (
    select(LabRow.name.label("lab"), UserRow.name.label("user"), SegmentRow.gpus, SegmentRow.start, SegmentRow.end)
    .join(LabRow, LabRow.id == SegmentRow.lab_id)
    .join(UserRow, UserRow.id == SegmentRow.user_id)
    .where(SegmentRow.settled.is_(False), SegmentRow.end > SegmentRow.start)
)
_OWNERS = {
    kind: select(model.id, model.name, model.decayed_usage, model.decayed_at)
    .where(model.id.in_(bindparam("ids", expanding=True))).order_by(model.id).with_for_update(key_share=True)
    for kind, model in (("lab", LabRow), ("user", UserRow))
}
