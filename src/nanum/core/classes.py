"""The priority classes of running jobs, and each lab's victims in order, kept current from cycle to cycle (`+preempt`).

A blocked job of class c may preempt the running jobs of a class below c that it may stop at all (its own lab's,
and other labs' borrowers), cheapest first (`nanum.core.preempt`). Ranking every running job at every cycle costs
a class computation and a sort over all of them; `RunClasses` keeps the ranking instead and updates it by what
changed since the last cycle:

- runs that came or left (a `CycleCache` knows them from its own diff), and runs passed as a new object, say after
  a checkpoint: same class, a new victim key;
- runs whose class rose. A run's class only rises as it receives service, so a run still in its class at its
  expected end is looked at again only then; otherwise `rise_time` finds by bisection a time up to which it surely
  stays in its class, and it is looked at again then (at the latest after `HORIZON`).

The classes and the ranking are exactly those of a fresh computation at every `now`, which never goes back. A
`CycleCache` carries one `RunClasses` from cycle to cycle; without a cache a cycle builds one for itself (`of`).
"""

from __future__ import annotations

import bisect
import heapq
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from nanum.core.model import JobId, Running
from nanum.core.preempt import ClassOrder, attained, class_victim_key

#: the longest a run goes unlooked-at: a run in its last class is looked at once per HORIZON of service.
HORIZON = 86400.0
Entry = tuple[tuple[float, ...], JobId]  # (victim key, job id): victim keys are unique (they end in the job id)


def rise_time(classes: ClassOrder, run: Running, level: int, lo: float, hi: float) -> float | None:
    """A time in [lo, hi) up to which `run` surely stays in class `level` (its class at `lo`), less than a second
    before it leaves it; None when it is still in `level` at `hi`."""
    if classes.level(run.job, attained(run, hi)) <= level:
        return None
    while hi - lo > 1.0:
        mid = (lo + hi) / 2
        if classes.level(run.job, attained(run, mid)) > level:
            hi = mid
        else:
            lo = mid
    return lo


@dataclass(slots=True)
class _Run:
    run: Running
    level: int
    entry: Entry
    check_at: float


class RunClasses:
    """Preemptible running jobs by lab, in victim order, with their classes at the `now` of the last `update`."""

    def __init__(self, classes: ClassOrder) -> None:
        self.classes = classes
        self._runs: dict[JobId, _Run] = {}  # a job runs once at a time
        self._by_lab: dict[str, list[Entry]] = {}  # each lab's preemptible runs, cheapest victim first
        self._borrowed: list[Entry] = []  # preemptible runs that borrow, of every lab, cheapest victim first
        self._checks: list[tuple[float, JobId]] = []  # when to look at a run's class again
        self._now = float("-inf")

    @classmethod
    def of(cls, classes: ClassOrder, running: Iterable[Running], now: float) -> RunClasses:
        held = cls(classes)
        held.update(now, came=running)
        return held

    def update(self, now: float, came: Iterable[Running] = (), gone: Iterable[Running] = (),
               moved: Iterable[tuple[Running, Running]] = ()) -> None:
        """Bring classes and ranking to `now`, after the runs `came` and `gone` since the last update, and `moved`:
        (old, new) pairs where `new` is a new object for the same run (its class is the same, not its victim key)."""
        if now < self._now:
            raise ValueError(f"time went back from {self._now} to {now}")
        self._now = now
        for run in gone:
            self._unlist(self._runs.pop(run.job.id))
        for old, new in moved:
            self._move(self._runs[old.job.id], new)
        for run in came:
            self._add(run, now)
        checks = self._checks
        while checks and checks[0][0] < now:  # a run keeps its class up to its check time, that time included
            when, key = heapq.heappop(checks)
            known = self._runs.get(key)
            if known is not None and known.check_at == when:
                self._check(known, now)

    def level(self, run: Running) -> int:
        """The class of `run` (one of the running jobs of the last update) at that update's `now`."""
        return self._runs[run.job.id].level

    def victims(self, lab: str, below: int, borrowers_only: bool = False) -> Iterator[Running]:
        """The running jobs a job of `lab` in class `below` may preempt, cheapest first: its lab's own and other
        labs' borrowers (only borrowers, for a job that borrows), of a class lower than `below` (a higher number)."""
        runs = self._runs
        if borrowers_only:
            candidates: Iterable[tuple[tuple[float, ...], JobId]] = self._borrowed
        else:
            own = self._by_lab.get(lab, [])
            candidates = heapq.merge(own, (e for e in self._borrowed if runs[e[1]].run.job.lab != lab))
        for _, key in candidates:
            known = runs[key]
            if known.level <= below:
                return
            yield known.run

    # -- keeping the ranking current ----------------------------------------------------------------------------

    def _add(self, run: Running, now: float) -> None:
        level = self.classes.level(run.job, attained(run, now))
        known = self._runs[run.job.id] = _Run(run, level, (class_victim_key(level, run), run.job.id), now)
        self._insert(known)
        heapq.heappush(self._checks, (now, run.job.id))  # watched from the next update on: most runs are short-lived

    def _move(self, known: _Run, run: Running) -> None:
        self._unlist(known)
        known.run, known.entry = run, (class_victim_key(known.level, run), run.job.id)
        self._insert(known)

    def _check(self, known: _Run, now: float) -> None:
        run = known.run
        level = self.classes.level(run.job, attained(run, now))
        if level != known.level:
            self._unlist(known)
            known.level = level
            known.entry = (class_victim_key(level, run), known.entry[1])
            self._insert(known)
        end = run.expected_end
        if end is not None and end > now and self.classes.level(run.job, attained(run, end)) <= level:
            known.check_at = end  # most runs end in their class: one look tells, and a late one is bisected then
        else:
            rise = rise_time(self.classes, run, level, now, now + HORIZON)
            known.check_at = now + HORIZON if rise is None else rise
        heapq.heappush(self._checks, (known.check_at, run.job.id))

    def _lists(self, run: Running) -> Iterator[list[Entry]]:
        if run.job.preemptible:
            yield self._by_lab.setdefault(run.job.lab, [])
            if run.borrowing:
                yield self._borrowed

    def _insert(self, known: _Run) -> None:
        for entries in self._lists(known.run):
            bisect.insort(entries, known.entry)

    def _unlist(self, known: _Run) -> None:
        for entries in self._lists(known.run):
            del entries[bisect.bisect_left(entries, known.entry)]

