"""The rows of pending and running jobs, and where jobs hold GPUs, kept by the scheduler from tick to tick.

The first read takes every pending and running job; each later one takes only the job rows written since
(`nanum.store.revs`: the database stamps each row it writes, whoever writes it), and keeps, replaces or drops
each: a row that is no longer pending or running leaves. So a tick reads what changed, not the whole queue, and a
row that did not change is the very same object as at the last tick (the snapshot reuses its core job).

The GPUs jobs hold (their allocation rows) are read the same way: all at the first read, then only those of the
jobs whose rows were written since, since inserting or deleting an allocation stamps its job's row. A job that
holds GPUs while no longer running (a stopped gang waiting for its last part) is among them.
"""

from __future__ import annotations

from collections import defaultdict, namedtuple
from collections.abc import Iterable, Mapping
from typing import Any

from sqlalchemy import Connection, bindparam, select
from sqlalchemy.orm import Session

from nanum.core.model import Placement
from nanum.store import AllocationRow, JobRow, revs

ACTIVE = frozenset({"pending", "running"})
_HELD = select(AllocationRow.job_id, AllocationRow.node_id, AllocationRow.gpu_index)
_HELD_BY = _HELD.where(AllocationRow.job_id.in_(bindparam("ids", expanding=True)))
#: job ids per query for the GPUs of the jobs written since the last read
_IDS_PER_QUERY = 5000


class JobRows:
    """Pending and running job rows of `columns` (which must include `JobRow.id` and `JobRow.state`)."""

    def __init__(self, columns: tuple[Any, ...]) -> None:
        # Built once: building a statement of this many columns costs about as much as running it.
        self._every = select(*columns).where(JobRow.state.in_(ACTIVE))
        self._since = select(*columns).where(JobRow.rev >= bindparam("mark"))
        self.running: dict[int, Any] = {}
        #: in id order (the queue's order of submission)
        self.pending: dict[int, Any] = {}
        #: where each job holds GPUs (or, needing none, runs), by job id; a job holding nothing is left out
        self.held: dict[int, tuple[Placement, ...]] = {}
        self.mark: int | None = None
        #: the mark the last read started from: None when it read every pending and running row
        self.since: int | None = None
        #: the ids of the rows the last read took, in the order read: every pending and running job at a first
        #: read (`mark` None before it), else the ones written since the read before (a row that left included)
        self.written: list[int] = []
        self._record: Any = None

    def forget(self) -> None:
        """Read every pending and running row afresh next time, as at first."""
        self.running, self.pending, self.held, self.written, self.mark, self.since = {}, {}, {}, [], None, None

    def read(self, s: Session, names: Mapping[int, str] | None) -> tuple[list[Any], list[Any]]:
        """(running rows, pending rows in id order) as of `s`'s snapshot (a repeatable read on PostgreSQL), and
        `held` brought up to date. `names`: every node's name by its id; None: `held` is not kept (a reader that
        needs no placements, `nanum.server.snapshot.followed_jobs`)."""
        conn = s.connection()
        mark = revs.mark(conn)
        running, pending = self.running, self.pending
        last = next(reversed(pending), 0)
        unordered = False
        written: list[int] = []
        result = conn.execute(self._every) if self.mark is None else conn.execute(self._since, {"mark": self.mark})
        if self._record is None:
            self._record = namedtuple("JobRecord", result.keys())  # type: ignore[misc]
        record = self._record._make
        for found in result:
            row = record(found)  # a plain tuple: reading its fields at every tick is several times cheaper
            job_id, state = row.id, row.state
            written.append(job_id)
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
        if names is not None:
            self._read_held(conn, names, None if self.mark is None else written)
        self.written, self.since = written, self.mark
        self.mark = mark  # last: a read that fails half way is done again from the same mark
        return list(running.values()), list(pending.values())

    def _read_held(self, conn: Connection, names: Mapping[int, str], written: list[int] | None) -> None:
        """Bring `held` up to date: every allocation (`written` None), or those of the jobs `written`."""
        held = self.held
        if written is None:
            held.clear()
            found = _placements(conn.execute(_HELD), names)
        else:
            for job_id in written:
                held.pop(job_id, None)
            found = {}
            for i in range(0, len(written), _IDS_PER_QUERY):
                found.update(_placements(conn.execute(_HELD_BY, {"ids": written[i:i + _IDS_PER_QUERY]}), names))
        held.update(found)


def _placements(rows: Iterable[Any], names: Mapping[int, str]) -> dict[int, tuple[Placement, ...]]:
    """Allocation rows (job id, node id, GPU index or None) as each job's placements, by node id."""
    parts: defaultdict[tuple[int, int], list[int]] = defaultdict(list)
    for job_id, node_id, gpu in rows:
        gpus = parts[(job_id, node_id)]  # a job that needs no GPU on the node still holds its CPUs and memory
        if gpu is not None:
            gpus.append(gpu)
    out: defaultdict[int, list[Placement]] = defaultdict(list)
    for (job_id, node_id), gpus in sorted(parts.items()):
        if node_id in names:
            out[job_id].append(Placement(names[node_id], tuple(sorted(gpus))))
    return {job_id: tuple(places) for job_id, places in out.items()}
