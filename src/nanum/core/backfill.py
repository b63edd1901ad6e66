"""Backfill: reserve the earliest start of the first blocked job, and let later jobs start only around it.

EASY backfill, as Slurm's backfill plugin does it, in three steps:

1. When the first job of a partition cannot start, sweep the expected ends of running jobs (time limit or
   predicted run time) in time order, adding each freed GPU back to its node, until enough nodes have enough GPUs:
   that time T is the reservation, on those nodes.
2. On each reserved node, `spare` = the GPUs free at T beyond what the reserved job needs.
3. A later job may start now if it is expected to end before T (anywhere), or if it takes no more than the spare
   GPUs of any reserved node (so at T the reserved job still fits).

Example: 8 GPUs, job A holds 6 until t=100, B holds 2 until t=50. Head job H needs 8: T=100 on that node with
spare 0. Job C (2 GPUs, 40 s) arriving at t=0 cannot start (no free GPU); when B ends at 50, C's 40 s run ends at 90
< 100, so C is backfilled; a 2-GPU job of 60 s would wait, since it would delay H.

The same sweep, repeated for later blocked jobs with the earlier reservations added as future usage, gives the
start estimates shown to users. Reservations count GPUs only; CPUs and memory are checked when a job starts.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable
from dataclasses import dataclass, field

from nanum.core.model import Job, JobId
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


@dataclass(slots=True)
class Timeline:
    """Future GPU releases (and, for estimates, future reservations) as (time, node index, GPU delta, why)."""

    events: list[tuple[float, int, int, str]] = field(default_factory=list)

    def add(self, time: float, node: int, delta: int, why: str) -> None:
        bisect.insort(self.events, (time, node, delta, why))

    def extend(self, items: Iterable[tuple[float, int, int, str]]) -> None:
        self.events.extend(items)
        self.events.sort()


def _eligible(nf: NodeFree, job: Job, keys: set[tuple[str | None, str]]) -> bool:
    node = nf.node
    return (
        nf.key in keys
        and len(node.gpus) >= job.gpus
        and (not node.cpus or job.cpus <= node.cpus)
        and (not node.memory_mb or job.memory_mb <= node.memory_mb)
        and job.labels <= node.labels
    )


def reserve(
    job: Job, state: ClusterState, timeline: Timeline, keys: list[tuple[str | None, str]], now: float
) -> Reservation | None:
    """The earliest time `job` fits given expected ends, with the nodes it would use; None if no end frees enough."""
    allowed = set(keys)
    free: dict[int, int] = {}
    other: set[int] = set()  # nodes the job may not use (the timeline holds every node's events)
    have = {nf.index for nf in state.candidates(keys, job.gpus, True) if _eligible(nf, job, allowed)}
    for time, idx, delta, why in timeline.events:
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
