"""The discrete-event loop: replay a trace through `nanum.core.schedule`, in virtual time.

The simulator has no policy of its own. At every instant where something happened (jobs arrived, finished or were
preempted) it builds the `Snapshot` a live server would build — nodes with their owners, running jobs with the
expected end the scheduler planned with (time limit or online prediction, never the true run time), pending jobs
with the GPU service they already received — calls the core, and applies what it decides: a `Start` takes GPUs and
schedules the job's completion from its TRUE remaining run time (which only the simulator knows); a `Preempt` stops
a job, keeps the work up to its last checkpoint, and puts it back in the queue with its original submit time.

A cycle is skipped when it provably cannot start or preempt anything: nothing changed since the last cycle, or no
pending job fits in the free GPUs its lab may use, no lab under its guarantee waits while others borrow, and (with
`+preempt`) no pending job is of a higher class than a running job it may preempt and no job started over a
reservation runs in its partition. Orders that change with time
alone (fair-share decay, priority age) are re-evaluated at every event.

When labs keep to their own nodes (`lend = false`), the partitions of a cycle do not interact: the core is shown
only the pending jobs of the partitions where one of those three things could happen. The others would only get
their reasons, which the simulator does not read; the decisions are the same (`skip`). Likewise the checkpoints
running jobs took reach the core only in a cycle that preempts (see `_checkpoint`), and the labs' and users' usage
only when the order ranks by it or a lab has a budget (`QueueOrder.reads_usage`).
"""

from __future__ import annotations

import heapq
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from itertools import chain
from typing import cast

from nanum.core import (
    CycleCache,
    Decisions,
    HistoryPredictor,
    Job,
    JobId,
    Lab,
    Policy,
    Predictor,
    Running,
    Snapshot,
    Start,
    User,
    expected_runtime,
    impossible,
    schedule,
)
from nanum.core.classes import rise_time
from nanum.core.fairshare import DEFAULT_HALF_LIFE
from nanum.core.preempt import ClassOrder, attained
from nanum.core.scheduler import partition_of
from nanum.sim.cluster import ClusterSpec
from nanum.sim.jobs import SimJob, make_jobs
from nanum.sim.traces import TraceJob
from nanum.sim.usage import Calendar, Meters

PREDICTORS = ("history", "none", "oracle")
INF = float("inf")


class SimError(RuntimeError):
    """The core decided something impossible (a GPU given twice): a bug to report, never a user error."""


@dataclass(frozen=True, slots=True, kw_only=True)
class SimOptions:
    """`restart_cost`: seconds a preempted job spends restarting; `checkpoint_interval`: seconds of progress between
    checkpoints (0: never, all progress of a run is lost); `predictor`: history (online, default), none, or oracle
    (true run times: a reference for published oracle results, never a fair comparison)."""

    restart_cost: float = 60.0
    checkpoint_interval: float = 1800.0
    predictor: str = "history"
    half_life: float = DEFAULT_HALF_LIFE
    max_cycles_per_instant: int = 1000

    def __post_init__(self) -> None:
        if self.predictor not in PREDICTORS:
            raise ValueError(f"unknown predictor {self.predictor!r}; choose one of {', '.join(PREDICTORS)}")
        if self.restart_cost < 0 or self.checkpoint_interval < 0:
            raise ValueError("restart cost and checkpoint interval must be >= 0 seconds")


class OraclePredictor:
    """Knows every job's true run time. Only for reproducing published oracle baselines."""

    name = "oracle"

    def __init__(self, jobs: Iterable[SimJob]) -> None:
        self._truth = {JobId(j.index): j.work for j in jobs}

    def predict(self, job: Job) -> float | None:
        return self._truth.get(job.id)


@dataclass(frozen=True, slots=True)
class Segment:
    """One run of one job on one node: `gpus` indices held from `start` to `end`."""

    job: int
    node: str
    gpus: tuple[int, ...]
    start: float
    end: float


@dataclass(slots=True)
class SimResult:
    policy: Policy
    cluster: ClusterSpec
    options: SimOptions
    jobs: list[SimJob]
    segments: list[Segment]
    series: list[tuple[float, int, int]]  # (time, busy GPUs, pending jobs) after each instant
    total_gpus: int
    wall_seconds: float = 0.0
    cycles: int = 0
    instants: int = 0
    stats: Counter[str] = field(default_factory=Counter)


class Simulation:
    """One replay of one trace on one cluster under one policy. `run()` once."""

    def __init__(self, trace: list[TraceJob], cluster: ClusterSpec, policy: Policy, options: SimOptions | None = None):
        self.cluster, self.policy, self.options = cluster, policy, options or SimOptions()
        self.nodes = cluster.build_nodes()
        self.jobs = make_jobs(trace, self.nodes, policy.lend)
        self.labs = cluster.labs_for(j.lab for j in self.jobs)
        self.predictor: Predictor | None = self._make_predictor()
        self.free = {n.name: {g.index for g in n.gpus} for n in self.nodes}
        self.owner = {n.name: n.owner for n in self.nodes}
        self.pool_free: Counter[str | None] = Counter()
        #: per pool, how many nodes have each number of free GPUs (so the largest free block is at hand).
        self.blocks: dict[str | None, Counter[int]] = {}
        for n in self.nodes:
            self.pool_free[n.owner] += len(n.gpus)
            self.blocks.setdefault(n.owner, Counter())[len(n.gpus)] += 1
        self.total_gpus = sum(self.pool_free.values())
        self.pending: dict[int, Job] = {}
        #: the same jobs per partition (as the core keys them), so that a cycle shown some partitions finds theirs.
        self.queues: dict[str | None, dict[int, Job]] = {}
        self.running: dict[int, Running] = {}
        self.sizes: dict[str, Counter[int]] = {}  # per lab, pending jobs by GPUs in all
        self.widths: dict[str, Counter[int]] = {}  # per lab, pending jobs by GPUs per node
        self.lab_used: Counter[str] = Counter()
        self.borrowers = 0
        #: running jobs started over a reservation, per partition: its first blocked job may take them back.
        self.over_reservation: Counter[str | None] = Counter()
        self.heap: list[tuple[float, int, int]] = []  # (end, job, token): completions
        self.ends: dict[int, float] = {}  # job -> when its current run completes
        self.checkpoints: list[tuple[float, int, int]] = []  # (time, job, token): next checkpoint of each run
        self.lab_meters = Meters(self.options.half_life)
        self.user_meters = Meters(self.options.half_life)
        self.calendar = Calendar()
        self.changed = False
        self.finished = 0
        self._impossible: dict[tuple[object, ...], str] = {}
        self._budgets = any(lab.limits.monthly_gpu_hours is not None for lab in self.labs.values())
        #: usage goes into snapshots only where the core reads it: for an order that ranks by it (users and labs),
        #: for budgets (labs). Otherwise the snapshot has the labs as configured and no users.
        self.user_usage = policy.make_order().reads_usage
        self.lab_usage = self.user_usage or self._budgets
        self.result = SimResult(policy, cluster, self.options, self.jobs, [], [], self.total_gpus)
        #: carries the core's working state from cycle to cycle; told of every start and stop (`expect`).
        self.cache = CycleCache()
        self.owners = {n.owner for n in self.nodes if n.owner is not None}
        #: skip cycles, and partitions of a cycle, that provably decide nothing, and show checkpoints only to cycles
        #: that preempt (off: a cycle at every change, with every pending job and checkpoint; the same decisions).
        self.skip = True
        #: partitions may be left out: they share no GPUs, or no one plans on the shared ones (estimate depth 1).
        self.prune = not policy.lend and (policy.estimate_depth == 1 or not self.pool_free[None])
        self._show: set[str | None] | None = None
        #: with `+preempt`: the classes of pending jobs per lab, and of preemptible running jobs per lab and of
        #: those that borrow, kept current as running jobs rise a class (`_rise`).
        self.classes = cast(ClassOrder, policy.make_order()) if policy.preempt else None
        self.level: dict[int, int] = {}
        self.pending_levels: dict[str, Counter[int]] = {}
        self.run_levels: dict[str, Counter[int]] = {}
        self.borrow_levels: Counter[int] = Counter()
        self.rises: list[tuple[float, int, int]] = []  # (time, job, token): check the class of a run again
        #: the seam to the core: one cycle for one snapshot (tests wrap it to compare with a cache-less cycle).
        #: It asks for no reasons: the simulator reads only starts and preemptions.
        self.decide: Callable[[Snapshot], Decisions] = lambda snap: schedule(
            snap, policy, self.predictor, self.cache, explain=False)

    def _make_predictor(self) -> Predictor | None:
        if self.options.predictor == "history":
            return HistoryPredictor()
        if self.options.predictor == "oracle":
            return OraclePredictor(self.jobs)
        return None

    # -- the loop ----------------------------------------------------------------------------------------------

    def run(self, progress: Callable[[int, int], None] | None = None) -> SimResult:
        started = time.perf_counter()
        jobs, heap, n = self.jobs, self.heap, len(self.jobs)
        i, reported = 0, 0
        while i < n or heap or (self.pending and self._budgets):
            t = jobs[i].trace.submit_time if i < n else INF
            if heap and heap[0][0] <= t:
                t = heap[0][0]
            if t == INF:  # only budget-blocked jobs are left: wake them when the next period starts
                t = self._next_period(self.result.series[-1][0] if self.result.series else 0.0)
                self.changed = True
            while heap and heap[0][0] == t:
                _, idx, token = heapq.heappop(heap)
                if jobs[idx].token == token:
                    self._finish(jobs[idx], t)
            while i < n and jobs[i].trace.submit_time == t:
                self._arrive(jobs[i], t)
                i += 1
            self._cycles(t)
            self.result.instants += 1
            self.result.series.append((t, self.total_gpus - sum(self.pool_free.values()), len(self.pending)))
            if progress is not None and self.finished - reported >= 500:
                reported = self.finished
                progress(self.finished, n)
        if progress is not None:
            progress(self.finished, n)
        self.result.wall_seconds = time.perf_counter() - started
        return self.result

    def _next_period(self, t: float) -> float:
        self.result.stats["budget wake-ups"] += 1
        if self.result.stats["budget wake-ups"] > 1200:
            raise SimError("jobs stay blocked by budgets for 100 years of simulated time; check monthly_gpu_hours")
        return self.calendar.at(t).end

    def _cycles(self, t: float) -> None:
        for _ in range(self.options.max_cycles_per_instant):
            if not self._worth(t):
                return
            self.changed = False
            if not self.skip:
                self._checkpoint(t)
            self.cache.expect()  # every start and stop since the last cycle was told as it happened
            decisions = self.decide(self._snapshot(t))
            if decisions.preemptions and self._checkpoint(t):
                decisions = self.decide(self._snapshot(t))
            self.result.cycles += 1
            self._apply(decisions, t)
            if not decisions.preemptions:
                return
        self.result.stats["instants that hit the cycle cap"] += 1

    def _apply(self, decisions: Decisions, t: float) -> None:
        for p in decisions.preemptions:
            self._preempt(self.jobs[p.job_id], t)
        for s in decisions.starts:
            self._start(s, t)

    # -- when a cycle is worth running -------------------------------------------------------------------------

    def _worth(self, t: float) -> bool:
        """Whether a cycle at `t` could start or preempt anything; also picks the partitions the core is shown."""
        self._show = None
        if not self.changed or not self.pending:
            return False
        if not self.skip:
            return True
        if self.classes is not None:
            live = self._live(t)
            if not live:
                # With jobs running, such a cycle always ran (and found nothing): clear `changed` as it did, so
                # that the next cycle comes at the same instant as before.
                self.changed = self.changed and not self.running
                return False
        elif not self._fits_somewhere() and not self._may_reclaim():
            return False
        else:
            live = self._live(t) if self.prune else set()
        if self.prune:
            self._show = live
        return True

    def _fits_somewhere(self) -> bool:
        total_free = sum(self.pool_free.values())
        return any(sizes and min(sizes) <= self._free_for(lab, total_free) for lab, sizes in self.sizes.items())

    def _free_for(self, lab: str, total_free: int) -> int:
        """Free GPUs `lab`'s jobs may use: all of them when owners lend, else its own and the shared ones."""
        return total_free if self.policy.lend else self.pool_free[lab] + self.pool_free[None]

    def _live(self, t: float) -> set[str | None]:
        """The partitions (as the core keys them: a lab that owns nodes, or None) where a pending job could start,
        reclaim or preempt: its smallest job fits in the free GPUs its lab may use, or its lab is under its
        guarantee while others borrow, or one of its jobs is of a higher class than a running job it may preempt
        (one of its own lab's or a borrower), or a job runs there over a reservation (its first blocked job may
        take the GPUs back)."""
        if self.classes is not None:
            self._rise(t)
        total_free = sum(self.pool_free.values())
        live: set[str | None] = set()
        for lab, sizes in self.sizes.items():
            part = partition_of(lab, self.policy.lend, self.owners)
            if not sizes or part in live:
                continue
            smallest = min(sizes)
            if (self._fits(lab, smallest, total_free) or self._reclaims(lab, smallest) or self._outranks(lab)
                    or self.over_reservation[part]):
                live.add(part)
        return live

    def _fits(self, lab: str, smallest: int, total_free: int) -> bool:
        """Whether some pending job of `lab` might fit the free GPUs it may use: its smallest job in their number,
        and its narrowest job (GPUs per node) in the largest free block on one node."""
        if smallest > self._free_for(lab, total_free):
            return False
        pools = self.blocks.values() if self.policy.lend else (self.blocks.get(lab), self.blocks.get(None))
        block = max((max(free) for free in pools if free), default=0)
        return min(self.widths[lab]) <= block

    def _reclaims(self, lab: str, smallest: int) -> bool:
        guarantee = self.labs[lab].guaranteed_gpus
        return (self.policy.reclaim and self.borrowers > 0 and guarantee is not None
                and self.lab_used[lab] + smallest <= guarantee)

    def _outranks(self, lab: str) -> bool:
        levels = self.pending_levels.get(lab)
        if self.classes is None or not levels:
            return False
        lowest_class = max((*self.run_levels.get(lab, ()), *self.borrow_levels), default=-1)
        return lowest_class > min(levels)

    def _may_reclaim(self) -> bool:
        if not (self.policy.lend and self.policy.reclaim and self.borrowers):
            return False
        for lab, sizes in self.sizes.items():
            guarantee = self.labs[lab].guaranteed_gpus
            if sizes and guarantee is not None and self.lab_used[lab] + min(sizes) <= guarantee:
                return True
        return False

    def _rise(self, t: float) -> None:
        """Bring the class of every running job that may have risen one by `t` up to date."""
        rises = self.rises
        due = []
        while rises and rises[0][0] <= t:
            due.append(heapq.heappop(rises))
        for _, idx, token in due:
            run = self.running.get(idx)
            sj = self.jobs[idx]
            if run is None or sj.token != token:
                continue
            assert self.classes is not None
            now = self.classes.level(run.job, attained(run, t))
            if now != self.level[idx]:
                self._count_run(run, -1)
                self.level[idx] = now
                self._count_run(run, +1)
            self._watch(run, t, sj)

    def _watch(self, run: Running, since: float, sj: SimJob) -> None:
        """Check the class of `run` again at the latest when it could rise above its class at `since`; not at all
        if it stays there until it ends. Classes never fall as service grows, so a bisection finds the time."""
        assert self.classes is not None
        when = rise_time(self.classes, run, self.level[sj.index], since, self.ends[sj.index])  # ended by then
        if when is not None:
            heapq.heappush(self.rises, (when, sj.index, sj.token))

    def _count_run(self, run: Running, sign: int) -> None:
        if run.job.preemptible:
            level = self.level[run.job.id]
            _count(self.run_levels.setdefault(run.job.lab, Counter()), level, sign)
            if run.borrowing:
                _count(self.borrow_levels, level, sign)

    def _checkpoint(self, t: float) -> bool:
        """Give running jobs the checkpoints they have taken by `t`, so victims are chosen by the work they lose;
        False when none had taken one since it was last asked.

        Only a cycle that preempts is asked for them: the core reads a checkpoint only to rank victims, and the
        ranking decides which victims, never whether there are any. So a cycle that preempts nothing decides the
        same with the runs as they were, and one that preempts is decided again with the checkpoints. Sparing
        the other cycles a new `Running` per checkpoint saves the cycle cache from re-ranking them."""
        heap, every = self.checkpoints, self.options.checkpoint_interval
        latest: dict[int, float] = {}
        while heap and heap[0][0] <= t:
            when, idx, token = heapq.heappop(heap)
            if idx in self.running and self.jobs[idx].token == token:
                following = when + every
                while following <= t:  # one checkpoint after another, as each would have been taken
                    when, following = following, following + every
                latest[idx] = when
                heapq.heappush(heap, (following, idx, token))
        for idx, when in latest.items():
            run = self.running[idx]
            self.running[idx] = Running(job=run.job, placements=run.placements, start_time=run.start_time,
                                        expected_end=run.expected_end, borrowing=run.borrowing, last_checkpoint=when,
                                        over_reservation=run.over_reservation)
            self.cache.expect(came=(self.running[idx],), gone=(run,))
        return bool(latest)

    # -- snapshot ----------------------------------------------------------------------------------------------

    def _snapshot(self, t: float) -> Snapshot:
        period = self.calendar.at(t)
        labs: dict[str, Lab] = self.labs
        users: dict[str, User] = {}
        if self.lab_usage:
            labs = {}
            lab_usage = self.lab_meters.read(t, period)
            for name, lab in self.labs.items():
                decayed, hours = lab_usage.get(name, (0.0, 0.0))
                labs[name] = lab if not (decayed or hours) else Lab(
                    name=name, guaranteed_gpus=lab.guaranteed_gpus, limits=lab.limits, weight=lab.weight,
                    used_gpu_hours=hours, decayed_usage=decayed)
        if self.user_usage:
            users = {name: User(name=name, decayed_usage=d, used_gpu_hours=h)
                     for name, (d, h) in self.user_meters.read(t, period).items()}
        if self._show is None:
            pending = tuple(self.pending.values())
        else:
            show = self._show
            pending = tuple(chain.from_iterable(queue.values() for part, queue in self.queues.items() if part in show))
        return Snapshot(now=t, nodes=self.nodes, pending=pending,
                        running=tuple(self.running.values()), labs=labs, users=users, month=period.label)

    # -- applying events and decisions -------------------------------------------------------------------------

    def _arrive(self, sj: SimJob, t: float) -> None:
        if sj.nodes == 0:
            model = f" of model {sj.trace.gpu_type}" if sj.trace.gpu_type else ""
            sj.unschedulable = f"no node lab {sj.lab} may use has GPUs{model}"
            return
        job = sj.core_job()
        key = (job.lab, job.gpus, job.nodes, job.gpu_model)
        if key not in self._impossible:
            why = impossible(job, self.nodes, self.labs, self.policy.lend)
            self._impossible[key] = "" if why is None else why.message
        if self._impossible[key]:
            sj.unschedulable = self._impossible[key]
            return
        self._enqueue(sj, job)

    def _enqueue(self, sj: SimJob, job: Job) -> None:
        self.pending[sj.index] = job
        self.queues.setdefault(partition_of(sj.lab, self.policy.lend, self.owners), {})[sj.index] = job
        self.sizes.setdefault(sj.lab, Counter())[sj.total_gpus] += 1
        self.widths.setdefault(sj.lab, Counter())[sj.gpus] += 1
        if self.classes is not None:
            level = self.level[sj.index] = self.classes.level(job, job.attained_gpu_seconds)
            _count(self.pending_levels.setdefault(sj.lab, Counter()), level, +1)
        self.changed = True

    def _start(self, s: Start, t: float) -> None:
        sj = self.jobs[s.job_id]
        job = self.pending.pop(sj.index)
        del self.queues[partition_of(sj.lab, self.policy.lend, self.owners)][sj.index]
        self._dequeue_size(sj)
        for p in s.placements:
            if not self.free[p.node].issuperset(p.gpus) or len(p.gpus) != sj.gpus:
                raise SimError(f"the core placed job {sj.trace.job_id} on busy or wrong GPUs {p.gpus} of {p.node}")
            self._hand(p.node, p.gpus, -1)
        overhead = self.options.restart_cost if sj.preemptions else 0.0
        planned = expected_runtime(job, self.predictor)
        if sj.first_start is None:
            sj.first_start, sj.predicted = t, planned
        expected = None if planned is None else t + overhead + max(planned - sj.done, 0.0)
        self.running[sj.index] = Running(job=job, placements=s.placements, start_time=t, expected_end=expected,
                                         borrowing=s.borrowing, over_reservation=s.over_reservation)
        self.cache.expect(came=(self.running[sj.index],))
        sj.run_start, sj.run_overhead, sj.placements = t, overhead, s.placements
        sj.token += 1
        self.ends[sj.index] = t + overhead + sj.work - sj.done
        heapq.heappush(self.heap, (self.ends[sj.index], sj.index, sj.token))
        if self.options.checkpoint_interval > 0:
            heapq.heappush(self.checkpoints, (t + overhead + self.options.checkpoint_interval, sj.index, sj.token))
        self._account(sj, t, +1, s.borrowing, s.over_reservation)
        if self.classes is not None:  # its class is that of the pending job: it has received nothing more yet
            run = self.running[sj.index]
            _count(self.pending_levels[sj.lab], self.level[sj.index], -1)
            self._count_run(run, +1)
            self._watch(run, t, sj)

    def _stop(self, sj: SimJob, t: float) -> Running:
        run = self.running.pop(sj.index)
        self.cache.expect(gone=(run,))
        if self.classes is not None:
            self._count_run(run, -1)
        for p in run.placements:
            self._hand(p.node, p.gpus, +1)
            self.result.segments.append(Segment(sj.index, p.node, p.gpus, sj.run_start, t))
        sj.attained += (t - sj.run_start) * sj.total_gpus
        self._account(sj, t, -1, run.borrowing, run.over_reservation)
        self.changed = True
        return run

    def _finish(self, sj: SimJob, t: float) -> None:
        run = self._stop(sj, t)
        sj.end = t
        sj.lost += sj.run_overhead  # the restart of the last run did no work either
        self.finished += 1
        observe = getattr(self.predictor, "observe", None)
        if observe is not None:
            observe(run.job, sj.work)

    def _preempt(self, sj: SimJob, t: float) -> None:
        self._stop(sj, t)
        elapsed = t - sj.run_start
        progress = max(elapsed - sj.run_overhead, 0.0)
        every = self.options.checkpoint_interval
        saved = min(progress // every * every, sj.work - sj.done) if every > 0 else 0.0
        sj.done += saved
        sj.lost += elapsed - saved
        sj.preemptions += 1
        sj.token += 1  # its scheduled completion no longer holds
        self.result.stats["preemptions"] += 1
        self._enqueue(sj, sj.core_job())

    def _account(self, sj: SimJob, t: float, sign: int, borrowing: bool, over_reservation: bool) -> None:
        self.lab_used[sj.lab] += sign * sj.total_gpus
        self.borrowers += sign if borrowing else 0
        if over_reservation:
            self.over_reservation[partition_of(sj.lab, self.policy.lend, self.owners)] += sign
        if self.lab_usage:
            period = self.calendar.at(t)
            self.lab_meters.change(sj.lab, t, period, sign * sj.total_gpus)
            if self.user_usage:
                self.user_meters.change(sj.user, t, period, sign * sj.total_gpus)

    def _hand(self, node: str, gpus: tuple[int, ...], sign: int) -> None:
        """Take (-1) or give back (+1) `gpus` of `node`, keeping the counts per pool current."""
        free, pool = self.free[node], self.owner[node]
        _count(self.blocks[pool], len(free), -1)
        (free.update if sign > 0 else free.difference_update)(gpus)
        _count(self.blocks[pool], len(free), +1)
        self.pool_free[pool] += sign * len(gpus)

    def _dequeue_size(self, sj: SimJob) -> None:
        _count(self.sizes[sj.lab], sj.total_gpus, -1)
        _count(self.widths[sj.lab], sj.gpus, -1)


def _count(counts: Counter[int], key: int, sign: int) -> None:
    counts[key] += sign
    if counts[key] <= 0:
        del counts[key]


def simulate(trace: list[TraceJob], cluster: ClusterSpec, policy: Policy, options: SimOptions | None = None,
             progress: Callable[[int, int], None] | None = None) -> SimResult:
    """Replay `trace` on `cluster` under `policy`; see `Simulation`."""
    return Simulation(trace, cluster, policy, options).run(progress)
