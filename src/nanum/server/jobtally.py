"""Jobs per state and lab, and how long each job waited before its last start, kept from read to read.

`/metrics` reports jobs per state, pending jobs per lab and a histogram of waits over every job ever started. Read
by `GROUP BY` at every scrape, that cost the database a pass over the whole job history: 92 ms a scrape at 200,000
finished jobs on PostgreSQL, growing with every job run. A `JobTally` reads every job once, then only the rows
written since its last read (`nanum.store.revs`: the database stamps each row it writes), and moves each written
job from what it was counted as to what it is now: a requeued job leaves its finished state and its old wait, and
is counted again at its next start, as the `GROUP BY` would count it.

What a job was counted as is kept by job id in compact arrays (13 bytes a job: 13 MB at a million jobs), since any
job, however old, may be requeued; ids far beyond the jobs counted (a database whose ids jump) are kept in a dict
instead, so that no id makes the arrays huge. Waits are summed in whole microseconds, so that moving a job out
subtracts exactly what moving it in added.
"""

from __future__ import annotations

import bisect
import threading
from array import array
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

from sqlalchemy import bindparam, select
from sqlalchemy.orm import Session

from nanum.store import JobRow, revs

__all__ = ["JobTally", "Waits"]

_COLUMNS = (JobRow.id, JobRow.state, JobRow.lab_id, JobRow.submit_time, JobRow.start_time)
_EVERY = select(*_COLUMNS)
_SINCE = select(*_COLUMNS).where(JobRow.rev >= bindparam("mark"))
#: the state code of a job not counted (never seen)
_NONE = 0
#: the lab of a job not counted, and the wait of one never started
_NO_LAB, _NO_WAIT = 0, -1


@dataclass(slots=True)
class Waits:
    """One lab's waits: how many jobs started, their waits' sum (µs), and how many fall in each bucket (not
    cumulative; the last is past every bound)."""

    count: int = 0
    micros: int = 0
    buckets: list[int] = field(default_factory=list)

    def cumulative(self) -> list[int]:
        out, total = [], 0
        for n in self.buckets[:-1]:
            total += n
            out.append(total)
        return out


class JobTally:
    """The counts, brought up to date by `update`; read them under `lock` (`snapshot`)."""

    def __init__(self, bounds: Sequence[float]) -> None:
        self.bounds = tuple(bounds)
        self.lock = threading.Lock()
        self._mark: int | None = None
        self._codes: dict[str, int] = {}
        self._names: list[str] = [""]
        # by job id: the state code (0: not counted), the lab id, the wait in µs (-1: never started)
        self._state = bytearray()
        self._lab = array("i")
        self._wait = array("q")
        self._far: dict[int, tuple[int, int, int]] = {}  # job id -> (state code, lab id, wait) beyond the arrays
        self._counted = 0
        self.states: Counter[str] = Counter()
        self.pending: Counter[int] = Counter()  # by lab id
        self.waits: dict[int, Waits] = {}  # by lab id

    def update(self, s: Session) -> None:
        """Count the jobs written since the last update (every job at the first), as `s` sees them. `s` must see
        one moment (`Database.read(one_moment=True)`)."""
        with self.lock:
            conn = s.connection()
            mark = revs.mark(conn)
            rows = conn.execute(_EVERY) if self._mark is None else conn.execute(_SINCE, {"mark": self._mark})
            for job_id, state, lab_id, submitted, started in rows:
                self._count(job_id, state, lab_id, None if started is None else started - submitted)
            self._mark = mark

    def snapshot(self) -> tuple[dict[str, int], dict[int, int], dict[int, Waits]]:
        """(jobs per state, pending jobs per lab id, waits per lab id), each without its empty entries."""
        with self.lock:
            return ({k: n for k, n in self.states.items() if n}, {k: n for k, n in self.pending.items() if n},
                    {k: Waits(w.count, w.micros, list(w.buckets)) for k, w in self.waits.items() if w.count})

    def _count(self, job_id: int, state: str, lab_id: int, wait: float | None) -> None:
        code = self._codes.get(state)
        if code is None:
            code = self._codes[state] = len(self._names)
            self._names.append(state)
        micros = _NO_WAIT if wait is None else max(round(wait * 1_000_000), 0)
        near = self._grow(job_id)
        old = (self._state[job_id], self._lab[job_id], self._wait[job_id]) if near else \
            self._far.get(job_id, (_NONE, _NO_LAB, _NO_WAIT))
        if old == (code, lab_id, micros):
            return
        if old[0] == _NONE:
            self._counted += 1
        else:
            self._move(self._names[old[0]], old[1], old[2], -1)
        self._move(state, lab_id, micros, 1)
        if near:
            self._state[job_id], self._lab[job_id], self._wait[job_id] = code, lab_id, micros
        else:
            self._far[job_id] = (code, lab_id, micros)

    def _move(self, state: str, lab_id: int, micros: int, sign: int) -> None:
        self.states[state] += sign
        if state == "pending":
            self.pending[lab_id] += sign
        if micros != _NO_WAIT:
            waits = self.waits.get(lab_id)
            if waits is None:
                waits = self.waits[lab_id] = Waits(buckets=[0] * (len(self.bounds) + 1))
            waits.count += sign
            waits.micros += sign * micros
            # the first bound at or above the wait, as the histogram's `le` counts it
            waits.buckets[bisect.bisect_left(self.bounds, micros / 1_000_000)] += sign

    def _grow(self, job_id: int) -> bool:
        """Make room in the arrays for `job_id`; False where it is too far beyond the jobs counted (see above)."""
        if job_id < len(self._state):
            return True
        if job_id > 4 * self._counted + (1 << 20):
            return False
        more = max(job_id + 1 - len(self._state), len(self._state) // 2, 1024)
        self._state.extend(bytes(more))
        self._lab.extend([_NO_LAB] * more)
        self._wait.extend([_NO_WAIT] * more)
        return True
