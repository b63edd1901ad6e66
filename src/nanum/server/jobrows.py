"""The rows of pending and running jobs, kept by the scheduler from tick to tick.

The first read takes every pending and running job; each later one takes only the job rows written since
(`nanum.store.revs`: the database stamps each row it writes, whoever writes it), and keeps, replaces or drops
each: a row that is no longer pending or running leaves. So a tick reads what changed, not the whole queue, and a
row that did not change is the very same object as at the last tick (the snapshot reuses its core job).
"""

from __future__ import annotations

from collections import namedtuple
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from nanum.store import JobRow, revs

ACTIVE = frozenset({"pending", "running"})


class JobRows:
    """Pending and running job rows of `columns` (which must include `JobRow.id` and `JobRow.state`)."""

    def __init__(self, columns: tuple[Any, ...]) -> None:
        self.columns = columns
        self.running: dict[int, Any] = {}
        #: in id order (the queue's order of submission)
        self.pending: dict[int, Any] = {}
        self.mark: int | None = None
        self._record: Any = None

    def read(self, s: Session) -> tuple[list[Any], list[Any]]:
        """(running rows, pending rows in id order) as of `s`'s snapshot (a repeatable read on PostgreSQL)."""
        mark = revs.mark(s.connection())
        which = JobRow.state.in_(ACTIVE) if self.mark is None else JobRow.rev >= self.mark
        running, pending = self.running, self.pending
        last = next(reversed(pending), 0)
        unordered = False
        result = s.execute(select(*self.columns).where(which))
        if self._record is None:
            self._record = namedtuple("JobRecord", result.keys())  # type: ignore[misc]
        record = self._record._make
        for found in result:
            row = record(found)  # a plain tuple: reading its fields at every tick is several times cheaper
            job_id, state = row.id, row.state
            if state == "pending":
                running.pop(job_id, None)
                if job_id not in pending and job_id < last:
                    unordered = True  # back in the queue (requeued): its place is by id
                last = max(last, job_id)
                pending[job_id] = row  # a row already there keeps its place
            elif state == "running":
                pending.pop(job_id, None)
                running[job_id] = row
            else:
                pending.pop(job_id, None)
                running.pop(job_id, None)
        if unordered:
            self.pending = pending = dict(sorted(pending.items()))  # by id: ids are unique, rows never compared
        self.mark = mark
        return list(running.values()), list(pending.values())
