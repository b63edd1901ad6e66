"""One scheduling cycle: from a Snapshot to Decisions. The live server and the simulator both call `schedule`.

The cycle, in order:

1. order the pending queue with the policy's queue order;
2. pass one: in that order, every job that would *not* borrow: admit it against budgets and limits, then place
   it (with EASY backfill around the first blocked job of each partition); a blocked job whose lab is under its
   guarantee reclaims GPUs from borrowers; with `+preempt`, the first blocked job of a partition takes back GPUs
   from jobs backfilled over its reservation, and a blocked job preempts running jobs of a lower priority class
   (`nanum.core.preempt`);
3. pass two: the jobs that would borrow, in the same order, on the GPUs left over;
4. every job left pending gets a reason with numbers and, where one can be computed, an estimated start.

A partition is the whole cluster when owners lend their idle GPUs, else each lab's own nodes (plus shared ones).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import cast

from nanum.core.backfill import Reservation, Timeline, reserve
from nanum.core.cache import CycleCache, run_ends
from nanum.core.classes import RunClasses
from nanum.core.decision import Code, Decisions, Pending, Preempt, Reason, Start
from nanum.core.model import Job, JobId, Limits, NodeState, Placement, Running, Snapshot
from nanum.core.ordering import OrderContext
from nanum.core.placement import PlacementPolicy, fits
from nanum.core.policy import Policy
from nanum.core.predict import Predictor, expected_runtime, planned_end
from nanum.core.preempt import ClassOrder, attained, class_victim_key, may_preempt
from nanum.core.quota import Usage, admit, impossible, victim_key, would_borrow
from nanum.core.state import ClusterState, NodeFree

Keys = list[tuple[str | None, str]]
NO_LIMITS = Limits()


def schedule(
    snapshot: Snapshot, policy: Policy, predictor: Predictor | None = None, cache: CycleCache | None = None,
    *, explain: bool = True,
) -> Decisions:
    """Decide which pending jobs start where, which running jobs yield, and why the rest wait.

    Pure and deterministic: the same snapshot, policy and predictor state always give the same decisions.
    `cache` (see `CycleCache`) only makes repeated calls cheaper; the decisions are the same without it.
    `explain=False` leaves out the `Pending` records (reasons and start estimates) for a driver that reads none,
    such as the simulator: writing them costs a good part of a long queue's cycle. The starts and preemptions are
    the same, since the reservations backfill plans around are still made."""
    cycle = _Cycle(snapshot, policy, predictor, cache, explain)
    # 1. Order the queue.
    ctx = OrderContext(snapshot.now, snapshot.labs, snapshot.users, cycle.total_gpus, predictor, snapshot.running,
                       cache.siblings if cache is not None else None)
    order = cycle.order
    queue = sorted(snapshot.pending, key=lambda j: order.sort_key(j, ctx))
    # 2. Owners first: jobs within their lab's guarantee (or in labs without one).
    borrowers = [(pos, job) for pos, job in enumerate(queue) if not cycle.consider(job, pos, borrowing=False)]
    # 3. Then borrowers, on what is left.
    for pos, job in borrowers:
        cycle.consider(job, pos, borrowing=True)
    # 4. Reasons and estimates were collected along the way.
    return Decisions(tuple(cycle.starts), tuple(cycle.preemptions), tuple(cycle.pending))


@dataclass(slots=True, eq=False)
class _Shape:
    """What a cycle needs of a job's request: the buckets it may use, whether it can never fit there, its partition.
    Jobs of one shape (model, lab, GPUs, nodes, CPUs, memory, labels) share one object, and every answer that
    depends on the shape alone is remembered under it."""

    keys: Keys
    never: bool
    part: str | None


@dataclass(slots=True)
class _Partition:
    reservations: list[Reservation] = field(default_factory=list)
    head: Job | None = None  # the first blocked job


class _Cycle:
    """The working state of one cycle; `consider` is called once per job (twice for a deferred borrower)."""

    def __init__(
        self, snapshot: Snapshot, policy: Policy, predictor: Predictor | None, cache: CycleCache | None,
        explain: bool = True,
    ) -> None:
        self.snap, self.policy, self.predictor, self.cache = snapshot, policy, predictor, cache
        self.explain = explain
        self.placement: PlacementPolicy = policy.make_placement()
        self.order = policy.make_order()
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
        #: labs and users with any limit or budget: only their jobs need `admit`.
        self.limited = {x.name for x in snapshot.labs.values() if x.limits != NO_LIMITS}
        self.limited |= {x.name for x in snapshot.users.values() if x.limits != NO_LIMITS}
        self.starts: list[Start] = []
        self.preemptions: list[Preempt] = []
        self.pending: list[Pending] = []
        self.partitions: dict[str | None, _Partition] = {}
        self.victims: set[JobId] = set()
        self._timeline: Timeline | None = None
        #: answers that depend only on the nodes, not on what runs: they live as long as the state (see CycleCache).
        self._never: dict[tuple[object, ...], int] = self.state.static.setdefault("could_fit", {})
        self._never_any: dict[tuple[object, ...], bool] = self.state.static.setdefault("never_fits", {})
        self._room: dict[tuple[object, ...], str] = {}
        self._shapes: dict[tuple[object, ...], _Shape] = {}
        self._runtimes: dict[JobId, float | None] = {}
        self._no_reclaim: set[_Shape] = set()
        self._fit: dict[tuple[object, ...], tuple[Placement, ...] | None] = {}
        self._reclaimable: tuple[list[Running], dict[int, int]] | None = None
        self._over: list[Running] | None = None  # running jobs started over a reservation, cheapest victim first
        self._classes: RunClasses | None = None
        self._lower: dict[tuple[object, ...], tuple[list[Running], dict[int, int]]] = {}
        self._no_preempt: set[tuple[object, ...]] = set()
        #: (shape, borrowing, class) of jobs that fit nowhere and could neither reclaim nor preempt: every later job
        #: with the same key is blocked too. Free GPUs only become fewer during a cycle, and the other two answers
        #: depend only on the key (reclaim on the shape, preemption on class and shape) and are remembered for the
        #: cycle anyway; so a long queue of such jobs costs one lookup each. Not a job that fits but waits behind
        #: its partition's head without backfill: it does not try to preempt, a later one may have to.
        self._stuck: set[tuple[_Shape, bool, int]] = set()

    # -- the per-job steps -------------------------------------------------------------------------------------

    def consider(self, job: Job, pos: int, *, borrowing: bool) -> bool:
        """Start, reclaim for, or explain `job`. Returns False only when pass one defers it as a borrower.

        In pass two (`borrowing`) the job is known to borrow: its lab's usage has only grown since pass one."""
        borrows = borrowing or would_borrow(job, self.usage, self.snap.labs)
        if borrows and not borrowing:
            return False
        if (job.lab in self.limited or job.user in self.limited) and (
            why := admit(job, self.usage, self.snap.labs, self.snap.users, self.snap.month)
        ) is not None:
            return self._wait(job, why)
        if borrows and not job.preemptible:
            lab = self.snap.labs[job.lab]
            return self._wait(job, Reason(Code.LAB_LIMIT, (
                f"lab {job.lab} is at its guarantee of {lab.guaranteed_gpus} GPUs "
                f"({self.usage.lab_gpus[job.lab]} in use); a job that must not be preempted never borrows")))
        shape = self._shape(job)
        if shape.never:
            why = impossible(job, self.snap.nodes, self.snap.labs, self.policy.lend)
            return self._wait(job, why or Reason(Code.NODE_DOWN, "every node that could run it is down or draining"))
        part = self.partitions.get(shape.part)
        if part is None:
            part = self.partitions[shape.part] = _Partition()
        stuck = (shape, borrows, self.classes.level(job, job.attained_gpu_seconds) if self.classes else 0)
        if stuck in self._stuck:
            return self._blocked(job, shape, part, pos, False)
        placement, fits_now, over = self._try_place(job, shape, part, borrows)
        if placement is not None:
            self._start(job, placement, borrows, part, over)
            return True
        if not borrowing and self._entitled(job) and self._reclaim(job, shape):
            return True
        if part.head is None and self.policy.preempt and self._take_back(job, shape):
            return True
        if self.policy.preempt and self._preempt_lower(job, shape, borrows):
            return True
        if not fits_now and self._place(job, shape) is None:
            self._stuck.add(stuck)
        return self._blocked(job, shape, part, pos, fits_now)

    def _try_place(
        self, job: Job, shape: _Shape, part: _Partition, borrows: bool
    ) -> tuple[tuple[Placement, ...] | None, bool, bool]:
        """Where `job` starts now (or None), whether it would fit were it not for a reservation, and whether it
        starts over one: with `+preempt`, a job the head may preempt (`may_preempt`) need not wait for a
        reservation it would delay; the head takes the GPUs back when it can start (`_take_back`)."""
        if part.head is None:
            found = self._place(job, shape)
            return found, found is not None, False
        if not self.policy.backfill:
            return None, False, False
        found = self._place(job, shape)
        head = part.reservations[0] if part.reservations else None
        if found is None or head is None or not head.caps:
            return found, found is not None, False
        runtime = self._runtime(job)
        if runtime is not None and self.snap.now + runtime <= head.start:
            return found, True, False  # ends before the reservation: may use any free GPU
        around = self._place(job, shape, head.caps)
        if around is None and self.policy.preempt and job.preemptible and (borrows or job.lab == part.head.lab):
            return found, True, True  # would delay the reservation: starts, and yields when it is due
        return around, True, False

    def _runtime(self, job: Job) -> float | None:
        """The planned run time of `job`, asked of the predictor once per cycle."""
        if job.id not in self._runtimes:
            self._runtimes[job.id] = expected_runtime(job, self.predictor)
        return self._runtimes[job.id]

    def _place(self, job: Job, shape: _Shape, caps: dict[int, int] | None = None) -> tuple[Placement, ...] | None:
        """The placement policy's answer, remembered until the free capacity next changes.

        Most of a long queue is jobs of a few shapes that do not fit (or fit but wait for a reservation): each
        shape is tried once per change."""
        key = (shape, id(caps), self.state.version)
        if key in self._fit:
            return self._fit[key]
        found = self._fit[key] = self.placement.place(self.state, job, shape.keys, caps)
        return found

    def _start(
        self, job: Job, placements: tuple[Placement, ...], borrowing: bool, part: _Partition, over: bool = False
    ) -> None:
        for p in placements:
            self.state.take(p, job)
        self.usage.add(job)
        runtime = self._runtime(job)
        end = planned_end(self.snap.now, runtime)
        head = part.reservations[0] if part.reservations else None
        if head is not None and (end is None or end > head.start):
            for p in placements:
                idx = self.state.by_name[p.node].index
                if idx in head.caps:
                    head.caps[idx] -= len(p.gpus)
        if end is not None and self._timeline is not None:
            for p in placements:
                self._timeline.add(end, self.state.by_name[p.node].index, len(p.gpus), f"job {job.id} ends")
        self.starts.append(Start(job_id=job.id, placements=placements, borrowing=borrowing, expected_end=end,
                                 over_reservation=over))

    def _wait(self, job: Job, why: Reason, estimate: float | None = None) -> bool:
        if self.explain:
            self.pending.append(Pending(job_id=job.id, reason=why, estimated_start=estimate))
        return True

    # -- blocked jobs: reservation, estimate, reason ----------------------------------------------------------

    def _blocked(self, job: Job, shape: _Shape, part: _Partition, pos: int, fits_now: bool) -> bool:
        """Make the first blocked job of `part` its head and reserve its start (and estimate the next ones' up to
        `estimate_depth`), then say why `job` waits."""
        first = part.head is None
        if first:
            part.head = job
        res: Reservation | None = None
        if len(part.reservations) < self.policy.estimate_depth and (first or part.reservations):
            res = reserve(job, self.state, self.timeline(), shape.keys, self.snap.now)
            if res is not None:
                self._plan(job, res)
                part.reservations.append(res)
        return not self.explain or self._explain(job, shape, part, pos, fits_now, first, res)

    def _explain(self, job: Job, shape: _Shape, part: _Partition, pos: int, fits_now: bool, first: bool,
                 res: Reservation | None) -> bool:
        now = self.snap.now
        blocker = part.head.id if part.head is not None else job.id
        ahead = "next in line" if pos == 0 else "1 job ahead" if pos == 1 else f"{pos} jobs ahead"
        if res is not None:
            when = f"{'reserved to start' if first else 'expected to start'} in {_human(res.start - now)}"
            code = Code.RESERVED if first else Code.QUEUED
            return self._wait(job, Reason(code, f"{ahead}; {when} when {res.cause}"), res.start)
        if not first and self.policy.backfill and fits_now:
            held = part.reservations[0] if part.reservations else None
            when = f", reserved to start in {_human(held.start - now)}" if held else ""
            return self._wait(job, Reason(Code.BACKFILL, f"{ahead}; starting now would delay job {blocker}{when}"))
        if not first and not self.policy.backfill:
            return self._wait(job, Reason(Code.QUEUED, f"{ahead}; waiting behind job {blocker}"))
        room = self._room.get((shape, self.state.version))
        if room is None:
            room = self._room[(shape, self.state.version)] = self._no_room(job, shape.keys)
        return self._wait(job, Reason(Code.RESOURCES, f"{ahead}; {room}"))

    def _plan(self, job: Job, res: Reservation) -> None:
        runtime = expected_runtime(job, self.predictor)
        res.end = None if runtime is None else res.start + runtime
        events = [(res.start, i, -g, f"job {job.id} starts") for i, g in res.nodes.items()]
        if res.end is not None:
            events += [(res.end, i, g, f"job {job.id} ends") for i, g in res.nodes.items()]
        if self.policy.estimate_depth > 1:
            self.timeline().extend(events)

    def timeline(self) -> Timeline:
        """Expected ends of running jobs and of jobs started this cycle, built once, on first need.

        With `+preempt`, jobs started over a reservation free their GPUs now: they yield them to the partition's
        first blocked job as soon as that lets it start."""
        if self._timeline is None:
            now = self.snap.now
            over = [r for r in self._over_runs() if r.job.id not in self.victims] if self.policy.preempt else []
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
                 f"job {run.job.id} yields the GPUs it was backfilled onto")
                for run in over for p in run.placements if p.node in self.state.by_name)
            self._timeline.extend(
                (start.expected_end, self.state.by_name[p.node].index, len(p.gpus), f"job {start.job_id} ends")
                for start in self.starts if start.expected_end is not None for p in start.placements)
        return self._timeline

    def _running_ends(self, running: Iterable[Running]) -> Iterable[tuple[float, int, int, str]]:
        now = self.snap.now
        for run in running:
            if run.job.id not in self.victims:
                for end, idx, gpus, why in run_ends(run, self.state):
                    yield (max(end, now), idx, gpus, why)

    def _no_room(self, job: Job, keys: Keys) -> str:
        model = f" of model {job.gpu_model}" if job.gpu_model else ""
        if job.nodes > 1:
            have = sum(1 for nf in self.state.candidates(keys, job.gpus, True) if fits(nf, job, None))
            return f"needs {job.nodes} nodes with {job.gpus} free GPUs{model} each; {have} have that now"
        block, where = self.state.largest_block(keys)
        if block >= job.gpus:
            return (f"needs {_gpus(job.gpus)}{model} with {job.cpus} CPUs and {job.memory_mb} MiB on one node; "
                    "no node has all of that free")
        if where is None:
            return f"needs {_gpus(job.gpus)}{model} on one node; no GPU{model} is free"
        return (f"needs {_gpus(job.gpus)}{model} on one node; the largest free block is {block} "
                f"(node {where.node.name}); with --gpus {block} it would fit now")

    # -- reclaim -----------------------------------------------------------------------------------------------

    def _entitled(self, job: Job) -> bool:
        lab = self.snap.labs.get(job.lab)
        return self.policy.reclaim and lab is not None and lab.guaranteed_gpus is not None

    def _reclaim(self, job: Job, shape: _Shape) -> bool:
        """Preempt the cheapest borrowers whose GPUs let `job` start; their GPUs stay theirs until they stop.

        Borrowers of other labs are taken in `victim_key` order, counting what each frees on its nodes, until
        enough nodes would fit the job: so the chosen nodes are those whose most expensive victim is cheapest.
        Only the victims on the chosen nodes are preempted. A failure is remembered for the rest of the cycle:
        borrowers only ever become fewer and free GPUs scarcer."""
        if shape in self._no_reclaim:
            return False
        borrowers, reach = self._reclaim_index()
        chosen = self._victims_for(job, shape.keys, (r for r in borrowers if r.job.lab != job.lab), reach)
        if chosen is None:
            self._no_reclaim.add(shape)
            return False
        fitting, victims = chosen
        victims.sort(key=victim_key)
        self._stop_for(job, fitting, victims, lambda run: (
            f"lab {job.lab} reclaims its guaranteed GPUs for job {job.id}; job {run.job.id} was borrowing"),
            lambda ids: Reason(Code.RECLAIMING, f"reclaiming guaranteed GPUs from borrowing job(s) {ids}"))
        return True

    def _victims_for(
        self, job: Job, keys: Keys, runs: Iterable[Running], reach: dict[int, int]
    ) -> tuple[list[int], list[Running]] | None:
        """Walk `runs` (cheapest victim first), counting what each frees on its nodes, until enough nodes would
        fit `job`: the chosen node indices and the victims on them, or None when even all of them are not enough.
        `reach` bounds, per node, free GPUs plus what all of `runs` there could free."""
        allowed = set(keys)
        fitting: list[int] = []
        if job.nodes > 1:  # a single-node job that fit somewhere would have been placed already
            fitting = [nf.index for nf in self.state.candidates(keys, job.gpus, True) if fits(nf, job, None)]
        freed: dict[int, list[int]] = {}  # node index -> [GPUs, CPUs, MiB] the victims so far would free
        taken: dict[int, list[Running]] = {}
        for run in runs:
            if run.job.id in self.victims:
                continue
            for p in run.placements:
                nf = self.state.by_name[p.node]
                if nf.key not in allowed or reach.get(nf.index, 0) < job.gpus or nf.index in fitting:
                    continue
                extra = freed.setdefault(nf.index, [0, 0, 0])
                extra[0] += len(p.gpus)
                extra[1] += run.job.cpus
                extra[2] += run.job.memory_mb
                taken.setdefault(nf.index, []).append(run)
                if _fits_with(nf, job, extra):
                    fitting.append(nf.index)
            if len(fitting) >= job.nodes:
                break
        if len(fitting) < job.nodes:
            return None
        return fitting, list({r.job.id: r for idx in fitting for r in taken.get(idx, ())}.values())

    def _stop_for(self, job: Job, fitting: list[int], victims: list[Running], why: Callable[[Running], str],
                  waits: Callable[[str], Reason]) -> None:
        """Preempt `victims` (in this order) so that `job` can start on the `fitting` nodes once they stopped; `why`
        says why each stops, `waits(ids)` why `job` waits meanwhile.

        The victims keep their GPUs until they have stopped; the job starts in a later cycle. The GPUs already
        free on the chosen nodes are held for it meanwhile: a job started on them later in this cycle would be
        the next victim, and `job` would wait for ever."""
        for idx in fitting:
            nf = self.state.nodes[idx]
            hold = min(len(nf.free), job.gpus)
            if hold:
                self.state.take(Placement(nf.node.name, nf.pick_gpus(hold)), job)
        self.usage.add(job)
        for run in victims:
            self.victims.add(run.job.id)  # still counted in its lab's usage until it has stopped
            self.preemptions.append(Preempt(job_id=run.job.id, for_job=job.id, reason=why(run)))
        self._wait(job, waits(", ".join(str(i) for i in sorted(r.job.id for r in victims))))

    # -- taking back a reservation (see nanum.core.preempt) ----------------------------------------------------

    def _take_back(self, job: Job, shape: _Shape) -> bool:
        """Preempt jobs started over a reservation so that `job`, its partition's first blocked job, can start."""
        over = self._over_runs()
        if not over or self._place(job, shape) is not None:
            return False
        runs = [r for r in over if may_preempt(job, r)]
        chosen = self._victims_for(job, shape.keys, runs, self._reach(runs)) if runs else None
        if chosen is None:
            return False
        fitting, victims = chosen
        self._stop_for(job, fitting, victims, lambda run: (
            f"job {job.id} takes back the GPUs reserved for it; job {run.job.id} was backfilled over that "
            "reservation"),
            lambda ids: Reason(Code.PREEMPTING, f"taking back its reserved GPUs from job(s) {ids}, backfilled over "
                                                "its reservation"))
        return True

    def _over_runs(self) -> list[Running]:
        """Running jobs started over a reservation, cheapest victim first; built on first need."""
        if self._over is None:
            runs = self.cache.over.values() if self.cache is not None else (
                r for r in self.snap.running if r.over_reservation)
            self._over = sorted(runs, key=victim_key)
        return self._over

    # -- preemption by priority class (see nanum.core.preempt) ------------------------------------------------

    def _preempt_lower(self, job: Job, shape: _Shape, borrows: bool) -> bool:
        """Preempt running jobs of a lower class than `job` so that it can start; False if that cannot help.

        A job that would borrow even once its victims of its own lab have stopped preempts only borrowers: its
        lab's jobs within the guarantee would come back ahead of it (owners' jobs start before borrowers), and it
        would stop them again and again."""
        if self._place(job, shape) is not None:
            return False  # it fits now: only backfill holds it back, and preempting would not change that
        assert self.classes is not None
        mine = self.classes.level(job, job.attained_gpu_seconds)
        if (mine, shape, borrows) in self._no_preempt:
            return False
        runs, reach = self._lower_index(mine, job, False)
        chosen = self._victims_for(job, shape.keys, runs, reach)
        if chosen is not None and borrows and self._would_come_back_first(job, chosen[1]):
            runs, reach = self._lower_index(mine, job, True)
            chosen = self._victims_for(job, shape.keys, runs, reach)
        if chosen is None:
            self._no_preempt.add((mine, shape, borrows))
            return False
        fitting, victims = chosen
        victims.sort(key=lambda r: class_victim_key(self._level(r), r))
        self._stop_for(job, fitting, victims, lambda run: (
            f"job {job.id} (class {mine}) preempts job {run.job.id} (class {self._level(run)}, "
            f"{attained(run, self.snap.now) / 3600:.1f} GPU-hours received)"),
            lambda ids: Reason(Code.PREEMPTING, f"class {mine}: preempting lower-class job(s) {ids}"))
        return True

    def _would_come_back_first(self, job: Job, victims: list[Running]) -> bool:
        """Whether a victim of `job`'s own lab is within the guarantee while `job` would still borrow after they
        all stopped: that victim would start again before `job`."""
        own = [run for run in victims if run.job.lab == job.lab]
        if all(run.borrowing for run in own):
            return False
        guarantee = self.snap.labs[job.lab].guaranteed_gpus or 0
        return self.usage.lab_gpus[job.lab] - sum(run.gpus for run in own) + job.total_gpus > guarantee

    def _level(self, run: Running) -> int:
        return self._run_classes().level(run)

    def _run_classes(self) -> RunClasses:
        """The running jobs' classes and victim ranking at `now`: carried by the cache, else built; on first need."""
        if self._classes is None:
            assert self.classes is not None
            snap = self.snap
            self._classes = (RunClasses.of(self.classes, snap.running, snap.now) if self.cache is None
                             else self.cache.run_classes(self.classes, snap))
        return self._classes

    def _lower_index(self, level: int, job: Job, borrowers_only: bool) -> tuple[list[Running], dict[int, int]]:
        """Running jobs `job` may preempt (class below `level`; only borrowers if it borrows), cheapest first, and
        per node the GPUs that free plus theirs reach (see `_reclaim_index`). Cached per (level, lab, borrows) for
        the cycle."""
        key = (level, job.lab, borrowers_only)
        hit = self._lower.get(key)
        if hit is None:
            runs = list(self._run_classes().victims(job.lab, level, borrowers_only))
            hit = self._lower[key] = (runs, self._reach(runs))
        return hit

    def _reach(self, runs: list[Running]) -> dict[int, int]:
        reach: dict[int, int] = {}
        for run in runs:
            for p in run.placements:
                nf = self.state.by_name.get(p.node)
                if nf is not None:
                    reach[nf.index] = reach.get(nf.index, len(nf.free)) + len(p.gpus)
        return reach

    def _reclaim_index(self) -> tuple[list[Running], dict[int, int]]:
        """Preemptible borrowers, cheapest victim first, and per node the GPUs that free plus borrowed reach
        (an upper bound all cycle long: free GPUs only get fewer). Built on first need."""
        if self._reclaimable is None:
            runs = sorted((r for r in self.snap.running if r.borrowing and r.job.preemptible), key=victim_key)
            self._reclaimable = (runs, self._reach(runs))
        return self._reclaimable

    # -- partitions and impossible requests ---------------------------------------------------------------------

    def _shape(self, job: Job) -> _Shape:
        """The shape of `job`'s request; one lookup per job, computed once per shape."""
        key = (job.gpu_model, job.lab, job.gpus, job.nodes, job.cpus, job.memory_mb, job.labels)
        hit = self._shapes.get(key)
        if hit is None:
            keys = self._keys(job)
            part = partition_of(job.lab, self.policy.lend, self.owners)
            hit = self._shapes[key] = _Shape(keys, self._never_fits(job, keys), part)
        return hit

    def _keys(self, job: Job) -> Keys:
        pools = None if self.policy.lend else (None, job.lab)
        return self.state.keys_for(job, pools)

    def _never_fits(self, job: Job, keys: Keys) -> bool:
        """True when no up node this job may use is big enough for it, whatever runs there (cached per shape)."""
        cache_key = (id(keys), job.gpus, job.nodes, job.cpus, job.memory_mb, job.labels)
        hit = self._never_any.get(cache_key)
        if hit is None:
            hit = self._never_any[cache_key] = (
                job.gpus > self.state.max_gpus_per_node
                or sum(self._could_fit(key, job) for key in keys) < job.nodes
            )
        return hit

    def _could_fit(self, key: tuple[str | None, str], job: Job) -> int:
        """How many up nodes in bucket `key` could hold one node's share of `job` when empty (cached)."""
        cache_key = (key, job.gpus, job.cpus, job.memory_mb, job.labels)
        hit = self._never.get(cache_key)
        if hit is None:
            hit = self._never[cache_key] = sum(
                1 for nf in self.state.nodes
                if nf.key == key and nf.node.state is NodeState.UP and len(nf.node.gpus) >= job.gpus
                and (not nf.node.cpus or job.cpus <= nf.node.cpus)
                and (not nf.node.memory_mb or job.memory_mb <= nf.node.memory_mb)
                and job.labels <= nf.node.labels
            )
        return hit


def partition_of(lab: str, lend: bool, owners: set[str] | frozenset[str]) -> str | None:
    """The partition a lab's jobs compete in: the whole cluster (None) when owners lend, else the lab's own nodes
    (and the shared ones) if it owns any."""
    return None if lend or lab not in owners else lab


def _fits_with(nf: NodeFree, job: Job, extra: list[int]) -> bool:
    """Would `job` fit on `nf` once `extra` = [GPUs, CPUs, MiB] more were free?"""
    return (
        len(nf.free) + extra[0] >= job.gpus
        and (nf.cpus is None or nf.cpus + extra[1] >= job.cpus)
        and (nf.memory_mb is None or nf.memory_mb + extra[2] >= job.memory_mb)
        and job.labels <= nf.node.labels
    )


def _gpus(count: int) -> str:
    return "1 GPU" if count == 1 else f"{count} GPUs"


def _human(seconds: float) -> str:
    """3d 4h, 2h 10m, 5m 3s, 40s."""
    s = max(round(seconds), 0)
    d, h, m = s // 86400, s % 86400 // 3600, s % 3600 // 60
    if d:
        return f"{d}d {h}h"
    if h:
        return f"{h}h {m}m"
    if m:
        return f"{m}m {s % 60}s"
    return f"{s}s"
