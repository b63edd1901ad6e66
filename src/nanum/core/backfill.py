"""Backfill: reserve the earliest start of the first blocked job, and let later jobs start only around it.

EASY backfill, as Slurm's backfill plugin does it, in three steps:

1. When the first job of a partition cannot start, sweep the expected ends of running jobs (time limit or
   predicted run time) in time order, adding each freed GPU back to its node, until enough nodes have enough GPUs:
   that time T is the reservation, on those nodes.
2. On each reserved node, `spare` = the GPUs free at T beyond what the reserved job needs.
3. A later job may start now if it is expected to end before T (anywhere), or if it takes no more than the spare
   GPUs of any reserved node (so at T the reserved job still fits).

With `+preempt` a later job that would delay the reservation starts anyway, if the head may preempt it: it runs
`over_reservation`, and once its GPUs are all the head still needs, the head preempts it (`nanum.core.steps.take_back`).
Expected ends are often wrong: a job that runs past its estimate moves T later at every cycle, and plain EASY
would hold the reserved GPUs idle all that time.

Example: 8 GPUs, job A holds 6 until t=100, B holds 2 until t=50. Head job H needs 8: T=100 on that node with
spare 0. Job C (2 GPUs, 40 s) arriving at t=0 cannot start (no free GPU); when B ends at 50, C's 40 s run ends at 90
< 100, so C is backfilled; a 2-GPU job of 60 s would wait, since it would delay H.

The same sweep, repeated for later blocked jobs with the earlier reservations added as future usage, gives the
start estimates shown to users. Reservations count GPUs only; CPUs and memory are checked when a job starts.
"""

from __future__ import annotations

import bisect
import heapq
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from nanum.core.model import Job, JobId, serves
from nanum.core.state import ClusterState, NodeFree

INF = float("inf")


@dataclass(slots=True)
class Reservation:
    """Job `job_id` is planned to start at `start` on `nodes`; `caps[node]` is what long backfill may take there."""

    job_id: JobId
    start: float
    nodes: dict[int, int]
    caps: dict[int, int]
    cause: str
    end: float | None = None


Event = tuple[float, int, int, str]
Key = tuple[str | None, str]


class Timeline:
    """Future GPU releases (and, for estimates, future reservations) as (time, node index, GPU delta, why), kept
    per bucket of nodes (`NodeFree.key`: pool and model) in time order, so a sweep reads only its job's buckets.

    `base` (a `CycleCache`'s expected ends, per bucket) is copied a bucket at a time on first use, without the
    events in `drop` and with those before `now` moved to `now`; it is never changed."""

    def __init__(
        self, state: ClusterState, base: Mapping[Key, list[Event]] | None = None, now: float = -INF,
        drop: set[Event] | None = None,
    ) -> None:
        self._nodes = state.nodes
        self._base = base or {}
        self._now = now
        self._drop = drop
        self._lists: dict[Key, list[Event]] = {}

    def bucket(self, key: Key) -> list[Event]:
        """The events of the nodes in bucket `key`, in time order."""
        events = self._lists.get(key)
        if events is None:
            events = self._base.get(key, [])
            if self._drop:
                events = [e for e in events if e not in self._drop]
            events = self._lists[key] = from_now(events, self._now)
        return events

    def add(self, time: float, node: int, delta: int, why: str) -> None:
        bisect.insort(self.bucket(self._nodes[node].key), (time, node, delta, why))

    def extend(self, items: Iterable[Event]) -> None:
        nodes = self._nodes
        touched: dict[Key, list[Event]] = {}
        for item in items:
            key = nodes[item[1]].key
            events = touched.get(key)
            if events is None:
                events = touched[key] = self.bucket(key)
            events.append(item)
        for events in touched.values():
            events.sort()

    def events(self, keys: list[Key]) -> Iterable[Event]:
        """The events of the nodes in `keys`' buckets, in time order."""
        lists = [self.bucket(key) for key in keys]
        return lists[0] if len(lists) == 1 else heapq.merge(*lists)


def from_now(events: list[Event], now: float) -> list[Event]:
    """A sorted copy of sorted `events` with those before `now` moved to `now`."""
    k = bisect.bisect_right(events, (now, INF))
    if k == 0:
        return list(events)
    return sorted((now, i, g, w) for _, i, g, w in events[:k]) + events[k:]


def _eligible(nf: NodeFree, job: Job, keys: set[tuple[str | None, str]]) -> bool:
    node = nf.node
    return (
        nf.key in keys
        and len(node.gpus) >= job.gpus
        and (not node.cpus or job.cpus <= node.cpus)
        and (not node.memory_mb or job.memory_mb <= node.memory_mb)
        and serves(node, job)
    )


def reserve(
    job: Job, state: ClusterState, timeline: Timeline, keys: list[tuple[str | None, str]], now: float
) -> Reservation | None:
    """The earliest time `job` fits given expected ends, with the nodes it would use; None if no end frees enough."""
    allowed = set(keys)
    free: dict[int, int] = {}
    other: set[int] = set()  # nodes of its buckets the job may not use (too few GPUs, CPUs, memory; labels)
    have = {nf.index for nf in state.candidates(keys, job.gpus, True) if _eligible(nf, job, allowed)}
    for time, idx, delta, why in timeline.events(keys):
        if idx not in free:
            if idx in other:
                continue
            nf = state.nodes[idx]
            if not _eligible(nf, job, allowed):
                other.add(idx)
                continue
            free[idx] = len(nf.free)
        free[idx] += delta
        if free[idx] >= job.gpus:
            have.add(idx)
        else:
            have.discard(idx)
        if len(have) >= job.nodes and delta > 0:
            chosen = sorted(have, key=lambda i: (free.get(i, len(state.nodes[i].free)), i))[: job.nodes]
            caps = {i: free.get(i, len(state.nodes[i].free)) - job.gpus for i in chosen}
            return Reservation(job.id, max(time, now), {i: job.gpus for i in chosen}, caps, why)
    return None
