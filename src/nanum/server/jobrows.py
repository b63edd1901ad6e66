"""The rows of pending and running jobs, kept by the scheduler from tick to tick.

The first read takes every pending and running job; each later one takes only the job rows written since
(`nanum.store.revs`: the database stamps each row it writes, whoever writes it), and keeps, replaces or drops
each: a row that is no longer pending or running leaves. So a tick reads what changed, not the whole queue, and a
row that did not change is the very same object as at the last tick (the snapshot reuses its core job).
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from nanum.store import JobRow, revs

ACTIVE = frozenset({"pending", "running"})


class JobRows:
    """Pending and running job rows of `columns` (which must include `JobRow.id` and `JobRow.state`)."""

    def __init__(self, columns: tuple[Any, ...]) -> None:
        self.columns = columns
        self.rows: dict[int, Any] = {}
        self.mark: int | None = None

    def read(self, s: Session) -> tuple[list[Any], list[Any]]:
        """(running rows, pending rows in id order) as of `s`'s snapshot (a repeatable read on PostgreSQL)."""
        mark = revs.mark(s.connection())
        which = JobRow.state.in_(ACTIVE) if self.mark is None else JobRow.rev >= self.mark
        query = select(*self.columns).where(which)
        rows = self.rows
        for row in s.execute(query):
            if row.state in ACTIVE:
                rows[row.id] = row
            else:
                rows.pop(row.id, None)
        self.mark = mark
        running = [r for r in rows.values() if r.state == "running"]
        pending = sorted((r for r in rows.values() if r.state == "pending"), key=_id)
        return running, pending


def _id(row: Any) -> int:
    return int(row.id)
