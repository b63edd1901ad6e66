"""The state of one scheduling cycle: the free-capacity index, usage, what was decided so far, and every memo.

`CycleState` is what the steps of a cycle (`nanum.core.scheduler`, `nanum.core.steps`, `nanum.core.explain`) read
and change. It owns the cycle's caches, each remembered for as long as its answer holds:

- per job shape (model, lab, GPUs, nodes, CPUs, memory, labels): the buckets it may use, whether it could ever
  fit (`could ever fit`: against empty up nodes, kept as long as the nodes are), its partition;
- per shape and capacity version: the placement policy's answer (`place`: "fits now");
- per job: the planned run time (`runtime`);
- per cycle: the timeline of expected ends (`timeline`), the victims chosen, and what reclaim and preemption found
  impossible (`no_reclaim`, `no_preempt`, `stuck`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Protocol, cast

from nanum.core.backfill import Reservation, Timeline, reserve
from nanum.core.cache import CycleCache, run_ends
from nanum.core.classes import RunClasses
from nanum.core.decision import Decisions, Pending, Preempt, Reason, Start, pending
from nanum.core.model import Job, JobId, NodeState, Placement, Running, Snapshot, serves
from nanum.core.placement import PlacementPolicy
from nanum.core.policy import Policy
from nanum.core.predict import Predictor, expected_runtime, overdue_end, planned_end
from nanum.core.preempt import ClassOrder
from nanum.core.quota import Admission, Usage, victim_key
from nanum.core.state import ClusterState, NodeFree

Keys = list[tuple[str | None, str]]


@dataclass(slots=True, eq=False)
class Shape:
    """What a cycle needs of a job's request: the buckets it may use, whether it can never fit there, its partition.
    Jobs of one shape share one object, and every answer that depends on the shape alone is remembered under it."""

    keys: Keys
    never: bool
    part: str | None


@dataclass(slots=True)
class Partition:
    reservations: list[Reservation] = field(default_factory=list)
    head: Job | None = None  # the first blocked job
    shown: Reservation | None = None  # the head's start estimate as shown (see `CycleState.reserve`)
    #: it has its head, and no later job gets a reservation or an estimate: most of a long queue.
    settled: bool = False


def partition_of(lab: str, lend: bool, owners: set[str] | frozenset[str]) -> str | None:
    """The partition a lab's jobs compete in: the whole cluster (None) when owners lend, else the lab's own nodes
    (and the shared ones) if it owns any."""
    return None if lend or lab not in owners else lab


class BackfillRule(Protocol):
    """What later jobs of a partition may do behind its first blocked job; the rules are in
    `nanum.core.backfill_rules`."""

    def place(self, c: CycleState, job: Job, shape: Shape, part: Partition,
              borrows: bool) -> tuple[tuple[Placement, ...] | None, bool, bool]:
        """Where `job` starts now behind `part`'s first blocked job (or None), whether it would fit were it not for
        the reservation, and whether it starts over the reservation."""
        ...

    def waits(self, c: CycleState, part: Partition, blocker: str, fits_now: bool) -> Reason | None:
        """Why a later job that did not start waits behind the first blocked job `blocker`, without its place in
        the queue (the cycle writes "3 jobs ahead; " before it); None when it simply does not fit. The answer may
        depend only on `part` and `fits_now`: the cycle gives it to every such job of the partition."""
        ...


class CycleState:
    """The working state of one cycle; see the module docstring."""

    def __init__(
        self, snapshot: Snapshot, policy: Policy, predictor: Predictor | None, cache: CycleCache | None,
        backfill: BackfillRule, explain: bool = True,
    ) -> None:
        self.snap, self.policy, self.predictor, self.cache = snapshot, policy, predictor, cache
        self.explain = explain
        self.placement: PlacementPolicy = policy.make_placement()
        self.order = policy.make_order()
        #: what later jobs of a partition may do behind its first blocked job: the policy's rule
        #: (`nanum.core.backfill_rules.BACKFILLS`).
        self.backfill = backfill
        #: the order's priority classes, when the policy preempts by class (Policy checks the order has them).
        self.classes: ClassOrder | None = cast(ClassOrder, self.order) if policy.preempt else None
        if cache is not None:
            self.state, self.usage = cache.prepare(snapshot)
            self.total_gpus, self.owners = cache.total_gpus, cache.owners
        else:
            self.state = ClusterState.build(snapshot.nodes, snapshot.running)
            self.usage = Usage.of(snapshot.running)
            self.total_gpus = sum(len(n.gpus) for n in snapshot.nodes)
            self.owners = {n.owner for n in snapshot.nodes if n.owner is not None}
        #: `admit` for this cycle's labs and users (`nanum.core.quota.Admission`).
        self.admission = cache.admission(snapshot) if cache is not None else Admission.of(snapshot)
        self.starts: list[Start] = []
        #: the started jobs as users name them (`Job.ref`), for the reasons that wait on their ends
        self._started_refs: dict[JobId, str] = {}
        self.preemptions: list[Preempt] = []
        self.pending: list[Pending] = []
        self.partitions: dict[str | None, Partition] = {}
        self.victims: set[JobId] = set()
        #: a step chose victims by their ranking, whether or not it preempted (`Decisions.ranked`)
        self.ranked = False
        #: per partition, the jobs considered so far that wait (for "N jobs ahead"; counted only with `explain`).
        self.waiting: Counter[str | None] = Counter()
        self._parts: dict[str, str | None] = {}
        self._timeline: Timeline | None = None
        self._overdue: Timeline | None = None
        #: answers that depend only on the nodes, not on what runs: they live as long as the state (see CycleCache).
        self._never: dict[tuple[object, ...], int] = self.state.static.setdefault("could_fit", {})
        self._never_any: dict[tuple[object, ...], bool] = self.state.static.setdefault("never_fits", {})
        #: why a job without an estimate waits, less its place in the queue, per (shape, capacity version, fits
        #: now, first blocked): the long queue of a few shapes formats one reason each (`nanum.core.explain`).
        self.why: dict[tuple[Shape, int, bool, bool], Reason] = {}
        self._shapes: dict[tuple[object, ...], Shape] = {}
        self._runtimes: dict[JobId, float | None] = {}
        self._fit: dict[tuple[object, ...], tuple[Placement, ...] | None] = {}
        self._over: list[Running] | None = None  # running jobs started over a reservation, cheapest victim first
        self._classes: RunClasses | None = None
        #: memos of the steps (`nanum.core.steps`): what they found impossible, and their victim indexes.
        self.no_reclaim: set[Shape] = set()
        self.no_preempt: set[tuple[object, ...]] = set()
        self.reclaimable: tuple[list[Running], dict[int, int]] | None = None
        self.lower: dict[tuple[object, ...], tuple[list[Running], dict[int, int]]] = {}
        #: per (index above, buckets, GPUs per node): the victims of the index that could free enough there.
        self.near: dict[tuple[int, tuple[tuple[str | None, str], ...], int], list[Running]] = {}
        #: (shape, borrowing, class) of jobs that fit nowhere and no step could help: every later job with the same
        #: key is blocked too. Free GPUs only become fewer during a cycle, and the steps' answers depend only on the
        #: key and are remembered for the cycle anyway; so a long queue of such jobs costs one lookup each. Not a
        #: job that fits but waits behind its partition's head without backfill: a later one may have to preempt.
        self.stuck: set[tuple[Shape, bool, int]] = set()

    def decisions(self) -> Decisions:
        return Decisions(tuple(self.starts), tuple(self.preemptions), tuple(self.pending), self.ranked)

    # -- fits now, could ever fit ----------------------------------------------------------------------------------

    def place(self, job: Job, shape: Shape, caps: dict[int, int] | None = None) -> tuple[Placement, ...] | None:
        """Where `job` fits now (the placement policy's answer), remembered until the free capacity next changes.

        Most of a long queue is jobs of a few shapes that do not fit (or fit but wait for a reservation): each
        shape is tried once per change."""
        key = (shape, id(caps), self.state.version)
        if key in self._fit:
            return self._fit[key]
        found = self._fit[key] = self.placement.place(self.state, job, shape.keys, caps)
        return found

    def shape(self, job: Job) -> Shape:
        """The shape of `job`'s request; one lookup per job, computed once per shape."""
        key = (job.gpu_model, job.gpu_models, job.lab, job.gpus, job.nodes, job.cpus, job.memory_mb, job.labels,
               job.gpu_memory_mb)
        hit = self._shapes.get(key)
        if hit is None:
            pools = None if self.policy.lend else (None, job.lab)
            keys = self.state.keys_for(job, pools)
            part = partition_of(job.lab, self.policy.lend, self.owners)
            hit = self._shapes[key] = Shape(keys, self._never_fits(job, keys), part)
        return hit

    def _never_fits(self, job: Job, keys: Keys) -> bool:
        """True when no up node this job may use is big enough for it, whatever runs there (cached per shape)."""
        cache_key = (id(keys), job.gpus, job.nodes, job.cpus, job.memory_mb, job.labels, job.gpu_memory_mb)
        hit = self._never_any.get(cache_key)
        if hit is None:
            hit = self._never_any[cache_key] = (
                job.gpus > self.state.max_gpus_per_node
                or sum(self._could_fit(key, job) for key in keys) < job.nodes
            )
        return hit

    def _could_fit(self, key: tuple[str | None, str], job: Job) -> int:
        """How many up nodes in bucket `key` could hold one node's share of `job` when empty (cached)."""
        cache_key = (key, job.gpus, job.cpus, job.memory_mb, job.labels, job.gpu_memory_mb)
        hit = self._never.get(cache_key)
        if hit is None:
            hit = self._never[cache_key] = sum(
                1 for nf in self._nodes_of(key)
                if nf.node.state is NodeState.UP and len(nf.node.gpus) >= job.gpus
                and (not nf.node.cpus or job.cpus <= nf.node.cpus)
                and (not nf.node.memory_mb or job.memory_mb <= nf.node.memory_mb)
                and serves(nf.node, job)
            )
        return hit

    def _nodes_of(self, key: tuple[str | None, str]) -> list[NodeFree]:
        """The nodes of bucket `key` (pool, model), up or not, in node order (grouped once per state)."""
        groups = self.state.static.get("nodes_of")
        if groups is None:
            groups = self.state.static["nodes_of"] = {}
            for nf in self.state.nodes:
                groups.setdefault(nf.key, []).append(nf)
        found: list[NodeFree] = groups.get(key, [])
        return found

    # -- what was decided ------------------------------------------------------------------------------------------

    def runtime(self, job: Job) -> float | None:
        """The planned run time of `job`, asked of the predictor once per cycle."""
        if job.id not in self._runtimes:
            self._runtimes[job.id] = expected_runtime(job, self.predictor)
        return self._runtimes[job.id]

    def start(self, job: Job, placements: tuple[Placement, ...], borrowing: bool, part: Partition,
              over: bool = False) -> None:
        for p in placements:
            self.state.take(p, job)
        self.usage.add(job)
        end = planned_end(self.snap.now, self.runtime(job))
        head = part.reservations[0] if part.reservations else None
        if head is not None and (end is None or end > head.start):
            for p in placements:
                idx = self.state.by_name[p.node].index
                if idx in head.caps:
                    head.caps[idx] -= len(p.gpus)
        if end is not None and self._timeline is not None:
            for p in placements:
                self._timeline.add(end, self.state.by_name[p.node].index, len(p.gpus), f"job {job.ref} ends")
        self._started_refs[job.id] = job.ref
        self.starts.append(Start(job_id=job.id, placements=placements, borrowing=borrowing, expected_end=end,
                                 over_reservation=over))

    def wait(self, job: Job, why: Reason, estimate: float | None = None, ahead: int | None = None) -> bool:
        if self.explain:
            self.pending.append(pending(job.id, why, estimate, ahead))
            parts = self._parts
            if job.lab not in parts:
                parts[job.lab] = partition_of(job.lab, self.policy.lend, self.owners)
            self.waiting[parts[job.lab]] += 1
        return True

    def reserve(self, job: Job, shape: Shape, part: Partition) -> tuple[bool, Reservation | None, Reservation | None]:
        """Make `job` the head of `part` if it is the first blocked one, and reserve its start (and estimate the
        next ones' up to `estimate_depth`): (whether it is the head, its reservation, the estimate to show).

        Backfill plans with the GPUs of a run past its expected end as free now: they may be freed any moment.
        The estimate shown (with `explain`) instead expects such a run to end at its `overdue_end`, so it moves on
        while the run does; otherwise it is the reservation itself.

        A cycle that explains nothing, over one partition, reserves only the first blocked job's start: backfill
        plans around that one alone (`nanum.core.backfill_rules`), and the later ones would only be estimates
        nobody reads. (Partitions that meet on shared nodes share the timeline: one's later reservations are future
        usage for another's first.) On a long queue of one shape they were a seventh of a live tick."""
        if part.settled:
            return False, None, None
        first = part.head is None
        if first:
            part.head = job
        res: Reservation | None = None
        depth = self.policy.estimate_depth if self.explain or (self.owners and not self.policy.lend) else 1
        if len(part.reservations) < depth and (first or part.reservations):
            res = reserve(job, self.state, self.timeline(), shape.keys, self.snap.now)
            if res is not None:
                res.end = planned_end(res.start, expected_runtime(job, self.predictor))
                events = [(res.start, i, -g, f"job {job.ref} starts") for i, g in res.nodes.items()]
                if res.end is not None:
                    events += [(res.end, i, g, f"job {job.ref} ends") for i, g in res.nodes.items()]
                if depth > 1:
                    self.timeline().extend(events)
                part.reservations.append(res)
        shown = res
        if self.explain and res is not None and res.start <= self.snap.now:
            shown = reserve(job, self.state, self._overdue_timeline(), shape.keys, self.snap.now) or res
        if first:
            part.shown = shown
        part.settled = not part.reservations or len(part.reservations) >= depth
        return first, res, shown

    def _overdue_timeline(self) -> Timeline:
        """The timeline with runs past their expected end expected to end at their `overdue_end` (built once)."""
        if self._overdue is None:
            now, state = self.snap.now, self.state
            over = {r.job.id for r in self.over_runs()} if self.policy.preempt else set()
            events: list[tuple[float, int, int, str]] = []
            for run in self.snap.running:
                if run.job.id in self.victims:
                    continue
                if run.job.id in over:
                    events += [(now, state.by_name[p.node].index, len(p.gpus),
                                f"job {run.job.ref} yields the GPUs it was backfilled onto")
                               for p in run.placements if p.node in state.by_name]
                    continue
                for end, idx, gpus, why in run_ends(run, state):
                    if end < now:
                        limit = run.job.time_limit
                        end = overdue_end(run.start_time, end, now, limit)
                        capped = limit is not None and end == run.start_time + limit
                        why = (f"job {run.job.ref} reaches its time limit" if capped else
                               f"job {run.job.ref} is expected to end (it has run past its first estimate)")
                    events.append((end, idx, gpus, why))
            refs = self._started_refs
            events += [(start.expected_end, state.by_name[p.node].index, len(p.gpus), f"job {refs[start.job_id]} ends")
                       for start in self.starts if start.expected_end is not None for p in start.placements]
            self._overdue = Timeline(state)
            self._overdue.extend(events)
        return self._overdue

    # -- what runs -------------------------------------------------------------------------------------------------

    def timeline(self) -> Timeline:
        """Expected ends of running jobs and of jobs started this cycle, built once, on first need.

        With `+preempt`, jobs started over a reservation free their GPUs now: they yield them to the partition's
        first blocked job as soon as that lets it start."""
        if self._timeline is None:
            now = self.snap.now
            over = [r for r in self.over_runs() if r.job.id not in self.victims] if self.policy.preempt else []
            if self.cache is not None:
                victims = self.victims
                gone = {e for run in self.snap.running if run.job.id in victims for e in self.cache.ends_of(run)
                        } if victims else set()
                gone.update(e for run in over for e in self.cache.ends_of(run))
                self._timeline = Timeline(self.state, self.cache.ends, now, gone)
            else:
                self._timeline = Timeline(self.state)
                skip = {r.job.id for r in over}
                self._timeline.extend(self._running_ends(r for r in self.snap.running if r.job.id not in skip))
            self._timeline.extend(
                (now, self.state.by_name[p.node].index, len(p.gpus),
                 f"job {run.job.ref} yields the GPUs it was backfilled onto")
                for run in over for p in run.placements if p.node in self.state.by_name)
            self._timeline.extend(
                (start.expected_end, self.state.by_name[p.node].index, len(p.gpus),
                 f"job {self._started_refs[start.job_id]} ends")
                for start in self.starts if start.expected_end is not None for p in start.placements)
        return self._timeline

    def _running_ends(self, running: Iterable[Running]) -> list[tuple[float, int, int, str]]:
        now, state, victims = self.snap.now, self.state, self.victims
        ends: list[tuple[float, int, int, str]] = []
        for run in running:
            if run.job.id not in victims:
                ends += run_ends(run, state, now)
        return ends

    def over_runs(self) -> list[Running]:
        """Running jobs started over a reservation, cheapest victim first; built on first need."""
        if self._over is None:
            runs = self.cache.over.values() if self.cache is not None else (
                r for r in self.snap.running if r.over_reservation)
            self._over = sorted(runs, key=victim_key)
        return self._over

    def run_classes(self) -> RunClasses:
        """The running jobs' classes and victim ranking at `now`: carried by the cache, else built; on first need."""
        if self._classes is None:
            assert self.classes is not None
            snap = self.snap
            self._classes = (RunClasses.of(self.classes, snap.running, snap.now) if self.cache is None
                             else self.cache.run_classes(self.classes, snap))
        return self._classes
