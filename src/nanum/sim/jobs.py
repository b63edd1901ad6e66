"""The simulator's per-job record: what the trace says, what happened to it, and the truth only the simulator knows.

A `SimJob` carries the true run time (`work`), which the simulator uses only to schedule the job's completion; the
scheduling core never sees it. The shape rule for jobs wider than a node lives here too (`shape`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from nanum.core import Job, JobId, JobKind, Node, Placement
from nanum.core.bursts import Bursts
from nanum.sim.traces import TraceJob

#: Lab (and user) of trace rows that name none.
DEFAULT_LAB = "default"


@dataclass(slots=True)
class SimJob:
    """One job through the simulation. Times in seconds; `done` is checkpointed progress, `lost` wasted seconds."""

    index: int
    trace: TraceJob
    lab: str
    user: str
    gpus: int  # per node
    nodes: int
    work: float  # true run time (capped by the time limit): the simulator's secret
    done: float = 0.0
    attained: float = 0.0  # GPU-seconds received so far
    lost: float = 0.0  # wall seconds of runs thrown away (restart cost + work since the last checkpoint)
    preemptions: int = 0
    first_start: float | None = None
    end: float | None = None
    run_start: float = 0.0
    run_overhead: float = 0.0
    token: int = 0
    predicted: float | None = None
    burst: int | None = None  # the first job of its burst (nanum.core.bursts), as an index
    unschedulable: str = ""
    placements: tuple[Placement, ...] = field(default_factory=tuple)

    @property
    def total_gpus(self) -> int:
        return self.gpus * self.nodes

    @property
    def status(self) -> str:
        if self.unschedulable:
            return "unschedulable"
        if self.end is None:
            return "unfinished"
        if self.trace.time_limit is not None and self.trace.duration > self.trace.time_limit:
            return "timeout"
        return self.trace.status or "completed"

    def core_job(self) -> Job:
        """The request as the core sees it: no true run time, only the limit and what it has received. Traces
        have no admin tiers: every trace job is in tier 0, so each order ranks them by its own rule alone."""
        t = self.trace
        return Job(
            id=JobId(self.index), user=self.user, lab=self.lab, gpus=self.gpus, nodes=self.nodes,
            gpu_model=t.gpu_type or None, time_limit=t.time_limit, priority=t.priority,
            kind=JobKind.NOTEBOOK if t.kind == "notebook" else JobKind.BATCH, submit_time=t.submit_time,
            name=t.name, attained_gpu_seconds=self.attained, burst=None if self.burst is None else JobId(self.burst),
        )


def shape(trace: TraceJob, widest: int) -> tuple[int, int]:
    """(GPUs per node, nodes) for a trace job, given the widest node it may use.

    A job that names its node count spreads its GPUs evenly over them. Otherwise a job that fits one node stays on
    one node; a wider one becomes a gang of ceil(num_gpus / widest) nodes with ceil(num_gpus / nodes) GPUs each
    (16 GPUs on 4-GPU nodes: 4 × 4; 12 on 8-GPU nodes: 2 × 6). (0, 0) when no node has a GPU it may use.
    """
    if trace.num_nodes:
        return math.ceil(trace.num_gpus / trace.num_nodes), trace.num_nodes
    if widest <= 0:
        return 0, 0
    if trace.num_gpus <= widest:
        return trace.num_gpus, 1
    nodes = math.ceil(trace.num_gpus / widest)
    return math.ceil(trace.num_gpus / nodes), nodes


def widest_nodes(nodes: tuple[Node, ...]) -> dict[tuple[str | None, str | None], int]:
    """The widest node per (owner, model), and per (owner, None) for any model: shape() needs them."""
    widest: dict[tuple[str | None, str | None], int] = {}
    for n in nodes:
        for key in ((n.owner, n.gpu_model), (n.owner, None)):
            widest[key] = max(widest.get(key, 0), len(n.gpus))
    return widest


def widest_for(lab: str, model: str | None, widest: dict[tuple[str | None, str | None], int], lend: bool) -> int:
    """The widest node a job of `lab` may use: any owner's when labs lend, else its own and the shared ones."""
    owners = {o for o, _ in widest} if lend else {lab, None}
    return max((w for (o, m), w in widest.items() if o in owners and m == model), default=0)


def make_jobs(trace: list[TraceJob], nodes: tuple[Node, ...], lend: bool) -> list[SimJob]:
    """SimJobs in submit order (index = core JobId), shaped for this cluster, each in its burst."""
    widest = widest_nodes(nodes)
    bursts = Bursts()
    cache: dict[tuple[str, str | None], int] = {}
    jobs: list[SimJob] = []
    for i, t in enumerate(sorted(trace, key=lambda j: j.submit_time)):
        lab = t.lab or DEFAULT_LAB
        model = t.gpu_type or None
        key = (lab, model)
        if key not in cache:
            cache[key] = widest_for(lab, model, widest, lend)
        gpus, count = shape(t, cache[key])
        work = t.duration if t.time_limit is None else min(t.duration, t.time_limit)
        sj = SimJob(index=i, trace=t, lab=lab, user=t.user or lab, gpus=gpus, nodes=count, work=work)
        sj.burst = bursts.join(sj.core_job())
        jobs.append(sj)
    return jobs
