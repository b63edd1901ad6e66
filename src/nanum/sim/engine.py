"""The discrete-event loop: replay a trace through the core's `Incremental` scheduler, in virtual time.

The simulator has no policy of its own. At every instant where something happened (jobs arrived, finished or were
preempted) it tells the core (`Incremental.observe`), asks whether a cycle could act (`due`), builds the `Snapshot`
a live server would build — nodes with their owners, running jobs with the expected end the scheduler planned with
(time limit or online prediction, never the true run time), pending jobs with the GPU service they already
received — and applies what the core decides: a `Start` takes GPUs and schedules the job's completion from its TRUE
remaining run time (which only the simulator knows); a `Preempt` stops a job, keeps the work up to its last
checkpoint, and puts it back in the queue with its original submit time. After a preemption the core is asked again
at the same instant, so the job that preempted starts as soon as its victims stop.

Which cycles and partitions may be skipped, and when checkpoints matter, is the core's rule
(`nanum.core.incremental`); the simulator lists checkpoints when the core asks (`_checkpoints`). The labs' and
users' usage goes into snapshots only when the order ranks by it or a lab has a budget (`QueueOrder.reads_usage`,
`reads_users`), and read again only when it can matter: for budgets at every cycle, for fair-share when jobs of
more than one lab (or user) wait, since factors order labs (users) against each other, never a lab's own jobs.
"""

from __future__ import annotations

import heapq
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from nanum.core import (
    Decisions,
    HistoryPredictor,
    Incremental,
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
    planned_end,
)
from nanum.core.fairshare import DEFAULT_HALF_LIFE
from nanum.sim.cluster import ClusterSpec
from nanum.sim.jobs import SimJob, make_jobs
from nanum.sim.traces import TraceJob
from nanum.sim.usage import Calendar, Meters, Period

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
        self.total_gpus = sum(len(n.gpus) for n in self.nodes)
        self.busy = 0
        self.heap: list[tuple[float, int, int]] = []  # (end, job, token): completions
        self.checkpoints: list[tuple[float, int, int]] = []  # (time, job, token): next checkpoint of each run
        self.lab_meters = Meters(self.options.half_life)
        self.user_meters = Meters(self.options.half_life)
        self.calendar = Calendar()
        self.finished = 0
        self._impossible: dict[tuple[object, ...], str] = {}
        self._budgets = any(lab.limits.monthly_gpu_hours is not None for lab in self.labs.values())
        #: usage goes into snapshots only where the core reads it: for an order that ranks by it (users and labs),
        #: for budgets (labs). Otherwise the snapshot has the labs as configured and no users.
        order = policy.make_order()
        self.user_usage = order.reads_users
        self.lab_usage = order.reads_usage or self._budgets
        self.result = SimResult(policy, cluster, self.options, self.jobs, [], [], self.total_gpus)
        #: the labs and users with their usage as last read, and when (see `_snapshot`).
        self._usage_read: tuple[float, str, dict[str, Lab], dict[str, User]] | None = None
        #: the core's incremental scheduler: it decides when a cycle may act and carries state between cycles.
        #: It asks for no reasons: the simulator reads only starts and preemptions.
        self.core = Incremental(policy, self.predictor, self.nodes, self.labs, checkpoints=self._checkpoints)

    def _make_predictor(self) -> Predictor | None:
        if self.options.predictor == "history":
            return HistoryPredictor()
        if self.options.predictor == "oracle":
            return OraclePredictor(self.jobs)
        return None

    @property
    def pending(self) -> dict[JobId, Job]:
        return self.core.pending

    @property
    def running(self) -> dict[JobId, Running]:
        return self.core.running

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
                self.core.touch()
            while heap and heap[0][0] == t:
                _, idx, token = heapq.heappop(heap)
                if jobs[idx].token == token:
                    self._finish(jobs[idx], t)
            while i < n and jobs[i].trace.submit_time == t:
                self._arrive(jobs[i], t)
                i += 1
            self._cycles(t)
            self.result.instants += 1
            self.result.series.append((t, self.busy, len(self.pending)))
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
        """Cycle while the core says one could act; a cycle that preempted is followed by another at once."""
        for _ in range(self.options.max_cycles_per_instant):
            if not self.core.due(t):
                return
            decisions = self.core.cycle(self._snapshot(t))
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

    def _checkpoints(self, t: float) -> Iterable[tuple[JobId, float]]:
        """The checkpoints running jobs have taken by `t` since last asked: (job, the latest)."""
        heap, every = self.checkpoints, self.options.checkpoint_interval
        latest: dict[JobId, float] = {}
        while heap and heap[0][0] <= t:
            when, idx, token = heapq.heappop(heap)
            if idx in self.running and self.jobs[idx].token == token:
                following = when + every
                while following <= t:  # one checkpoint after another, as each would have been taken
                    when, following = following, following + every
                latest[JobId(idx)] = when
                heapq.heappush(heap, (following, idx, token))
        return latest.items()

    # -- snapshot ----------------------------------------------------------------------------------------------

    def _snapshot(self, t: float) -> Snapshot:
        period = self.calendar.at(t)
        pending = self.core.pending_shown()
        labs, users = self._usage(t, period, pending)
        return Snapshot(now=t, nodes=self.nodes, pending=pending, running=tuple(self.running.values()), labs=labs,
                        users=users, month=period.label)

    def _usage(self, t: float, period: Period, pending: tuple[Job, ...]) -> tuple[dict[str, Lab], dict[str, User]]:
        """The labs and users with their usage at `t`. A reading is reused while no budget needs it, the period is
        the same, and the waiting jobs are of one lab (and one user, for an order that ranks users): then every
        job sees the same factor, which puts none of them before another."""
        if not self.lab_usage:
            return self.labs, {}
        read = self._usage_read
        if (read is not None and not self._budgets and read[1] == period.label
                and _one(pending, "lab") and (not self.user_usage or _one(pending, "user"))):
            return read[2], read[3]
        labs: dict[str, Lab] = {}
        lab_usage = self.lab_meters.read(t, period)
        for name, lab in self.labs.items():
            decayed, hours = lab_usage.get(name, (0.0, 0.0))
            labs[name] = lab if not (decayed or hours) else Lab(
                name=name, guaranteed_gpus=lab.guaranteed_gpus, limits=lab.limits, weight=lab.weight,
                used_gpu_hours=hours, decayed_usage=decayed)
        users: dict[str, User] = {}
        if self.user_usage:
            users = {name: User(name=name, decayed_usage=d, used_gpu_hours=h)
                     for name, (d, h) in self.user_meters.read(t, period).items()}
        self._usage_read = (t, period.label, labs, users)
        return labs, users

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
        self.core.observe(arrived=(job,))

    def _start(self, s: Start, t: float) -> None:
        sj = self.jobs[s.job_id]
        job = self.pending[s.job_id]
        for p in s.placements:
            if not self.free[p.node].issuperset(p.gpus) or len(p.gpus) != sj.gpus:
                raise SimError(f"the core placed job {sj.trace.job_id} on busy or wrong GPUs {p.gpus} of {p.node}")
            self.free[p.node].difference_update(p.gpus)
        self.busy += sj.total_gpus
        overhead = self.options.restart_cost if sj.preemptions else 0.0
        planned = expected_runtime(job, self.predictor)
        if sj.first_start is None:
            sj.first_start, sj.predicted = t, planned
        expected = planned_end(t, planned, restart=overhead, done=sj.done)
        run = Running(job=job, placements=s.placements, start_time=t, expected_end=expected,
                      borrowing=s.borrowing, over_reservation=s.over_reservation)
        self.core.observe(started=(run,))
        sj.run_start, sj.run_overhead, sj.placements = t, overhead, s.placements
        sj.token += 1
        heapq.heappush(self.heap, (t + overhead + sj.work - sj.done, sj.index, sj.token))
        if self.options.checkpoint_interval > 0:
            heapq.heappush(self.checkpoints, (t + overhead + self.options.checkpoint_interval, sj.index, sj.token))
        self._account(sj, t, +1)

    def _stop(self, sj: SimJob, t: float) -> Running:
        run = self.running[JobId(sj.index)]
        self.core.observe(stopped=(run.job.id,))
        for p in run.placements:
            self.free[p.node].update(p.gpus)
            self.result.segments.append(Segment(sj.index, p.node, p.gpus, sj.run_start, t))
        self.busy -= sj.total_gpus
        sj.attained += (t - sj.run_start) * sj.total_gpus
        self._account(sj, t, -1)
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
        self.core.observe(arrived=(sj.core_job(),))

    def _account(self, sj: SimJob, t: float, sign: int) -> None:
        if self.lab_usage:
            period = self.calendar.at(t)
            self.lab_meters.change(sj.lab, t, period, sign * sj.total_gpus)
            if self.user_usage:
                self.user_meters.change(sj.user, t, period, sign * sj.total_gpus)


def _one(jobs: tuple[Job, ...], attribute: str) -> bool:
    """Whether all of `jobs` have the same lab (or user); True for none."""
    if not jobs:
        return True
    first = getattr(jobs[0], attribute)
    return all(getattr(job, attribute) == first for job in jobs)


def simulate(trace: list[TraceJob], cluster: ClusterSpec, policy: Policy, options: SimOptions | None = None,
             progress: Callable[[int, int], None] | None = None) -> SimResult:
    """Replay `trace` on `cluster` under `policy`; see `Simulation`."""
    return Simulation(trace, cluster, policy, options).run(progress)
