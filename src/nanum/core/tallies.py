"""The counts `Incremental` keeps between cycles: free GPUs per pool and node (`Capacity`), and, with `+preempt`,
jobs per priority class (`Classes`). Each is updated as jobs start and stop, never rebuilt per cycle."""

from __future__ import annotations

import heapq
from collections import Counter
from typing import Any

from nanum.core.classes import HORIZON, rise_time
from nanum.core.model import Job, JobId, Node, NodeState, Running
from nanum.core.preempt import ClassOrder, attained

__all__ = ["Capacity", "Classes", "count", "counts_of"]


class Capacity:
    """Free GPUs of up nodes per pool (nodes of one owner, None: shared) and per node, and how many nodes of each
    pool have each number of free GPUs, so the largest free block is at hand."""

    def __init__(self, nodes: tuple[Node, ...], lend: bool) -> None:
        self.lend = lend
        up = [n for n in nodes if n.state is NodeState.UP]
        self.free = {n.name: len(n.gpus) - len(n.busy_gpus) for n in up}
        self.owner = {n.name: n.owner for n in up}
        self.pool_free: Counter[str | None] = Counter()
        self.blocks: dict[str | None, Counter[int]] = {}
        for n in up:
            self.pool_free[n.owner] += self.free[n.name]
            count(counts_of(self.blocks, n.owner), self.free[n.name], +1)

    def hand(self, run: Running, sign: int) -> None:
        """Take (-1) or give back (+1) the GPUs of `run`."""
        for p in run.placements:
            if p.node not in self.free:
                continue
            pool = self.owner[p.node]
            count(self.blocks[pool], self.free[p.node], -1)
            self.free[p.node] += sign * len(p.gpus)
            count(self.blocks[pool], self.free[p.node], +1)
            self.pool_free[pool] += sign * len(p.gpus)

    def free_for(self, lab: str) -> int:
        """Free GPUs `lab`'s jobs may use: all of them when owners lend, else its own and the shared ones."""
        return sum(self.pool_free.values()) if self.lend else self.pool_free[lab] + self.pool_free[None]

    def block_for(self, lab: str) -> int:
        """The most free GPUs on one node `lab`'s jobs may use."""
        pools = self.blocks.values() if self.lend else (self.blocks.get(lab), self.blocks.get(None))
        return max((max(free) for free in pools if free), default=0)


class Classes:
    """With `+preempt`: how many pending jobs, and preemptible running jobs, each lab has in each class (and the
    borrowers among the running ones), kept current as running jobs rise a class. A run whose class may have risen
    is looked at again at its expected end if it is still in its class then, else when `rise_time` says."""

    def __init__(self, classes: ClassOrder) -> None:
        self.classes = classes
        self.pending: dict[str, Counter[int]] = {}
        self.running: dict[str, Counter[int]] = {}
        self.borrowed: Counter[int] = Counter()
        self.runs: dict[JobId, tuple[Running, int, int]] = {}  # job -> (run, class, watch token)
        self.rises: list[tuple[float, JobId, int]] = []  # (when, job, token): look at a run's class again
        self.tokens = 0

    def queue(self, job: Job, sign: int) -> None:
        count(counts_of(self.pending, job.lab), self.classes.level(job, job.attained_gpu_seconds), sign)

    def start(self, run: Running) -> None:
        """`run` starts in the class of the pending job: it has received nothing more yet."""
        level = self.classes.level(run.job, run.job.attained_gpu_seconds)
        self.count(run, level, +1)
        self._watch(run, level, run.start_time)

    def stop(self, run: Running) -> None:
        _, level, _ = self.runs.pop(run.job.id)
        self.count(run, level, -1)

    def update(self, now: float) -> None:
        """Bring the class of every running job that may have risen by `now` up to date."""
        rises, runs = self.rises, self.runs
        while rises and rises[0][0] <= now:
            _, key, token = heapq.heappop(rises)
            known = runs.get(key)
            if known is None or known[2] != token:
                continue
            run, level, _ = known
            new = self.classes.level(run.job, attained(run, now))
            if new != level:
                self.count(run, level, -1)
                self.count(run, new, +1)
            self._watch(run, new, now)

    def outranks(self, lab: str) -> bool:
        """Whether a pending job of `lab` is of a higher class than a running job it may preempt: its own lab's
        or a borrower."""
        levels = self.pending.get(lab)
        if not levels:
            return False
        return max((*self.running.get(lab, ()), *self.borrowed), default=-1) > min(levels)

    def _watch(self, run: Running, level: int, since: float) -> None:
        end = run.expected_end
        if end is not None and end > since and self.classes.level(run.job, attained(run, end)) <= level:
            when = end
        else:
            rise = rise_time(self.classes, run, level, since, since + HORIZON)
            when = since + HORIZON if rise is None else rise
        self.tokens += 1
        self.runs[run.job.id] = (run, level, self.tokens)
        heapq.heappush(self.rises, (when, run.job.id, self.tokens))

    def count(self, run: Running, level: int, sign: int) -> None:
        if run.job.preemptible:
            count(counts_of(self.running, run.job.lab), level, sign)
            if run.borrowing:
                count(self.borrowed, level, sign)


def count(counts: Counter[int], key: int, sign: int) -> None:
    """Add `sign` to `counts[key]`, keeping only keys counted above zero."""
    n = counts.get(key, 0) + sign
    if n > 0:
        counts[key] = n
    else:
        counts.pop(key, None)


def counts_of(tallies: dict[Any, Counter[int]], key: Any) -> Counter[int]:
    """`tallies[key]`, a new Counter when there is none yet (`setdefault` would build one at every call)."""
    counts = tallies.get(key)
    if counts is None:
        counts = tallies[key] = Counter()
    return counts
