"""The frozen data one scheduling cycle reasons about: nodes, jobs, running allocations, labs, users.

Everything here is immutable and carries no behaviour that touches the outside world. Times are seconds on the
driver's clock (the server passes wall-clock epoch seconds, the simulator virtual seconds); the core never reads a
clock. Memory is in MiB everywhere.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import NewType

JobId = NewType("JobId", int)

#: GPU-hours are charged per second of allocation: GPU-seconds / 3600.
SECONDS_PER_HOUR = 3600.0


class NodeState(enum.Enum):
    """A node's administrative state. Only `up` nodes receive new jobs; `draining` keeps its running jobs."""

    UP = "up"
    DRAINING = "draining"
    DOWN = "down"


class JobKind(enum.Enum):
    BATCH = "batch"
    NOTEBOOK = "notebook"
    SHELL = "shell"


@dataclass(frozen=True, slots=True)
class Gpu:
    """One GPU of a node. `island` groups GPUs joined by NVLink (or one PCIe switch): GPUs of a job prefer one."""

    index: int
    model: str
    memory_mb: int = 0
    island: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class Node:
    """A machine with GPUs. `owner` names the lab that bought it (None: the organisation's shared pool)."""

    name: str
    gpus: tuple[Gpu, ...]
    cpus: int = 0  # 0: not tracked
    memory_mb: int = 0  # 0: not tracked
    labels: frozenset[str] = frozenset()
    state: NodeState = NodeState.UP
    owner: str | None = None
    #: GPU indices that something outside nanum is using (a process no job owns): treated as busy.
    busy_gpus: frozenset[int] = frozenset()

    @property
    def gpu_model(self) -> str:
        return self.gpus[0].model if self.gpus else ""


@dataclass(frozen=True, slots=True, kw_only=True)
class Job:
    """A request: `gpus` GPUs (and `cpus`, `memory_mb`) on each of `nodes` nodes, all at once (a gang when nodes > 1).

    `attained_gpu_seconds` is the GPU service the job already received in earlier runs (it was preempted and
    requeued); the LAS order uses it. `time_limit` is the user's limit in seconds, None when unlimited.
    `priority` (0..100) is the owner's; `tier` (0..9) is an admin's: every queue order puts a higher tier first
    (nanum.core.ordering). A tier orders the queue, and so gets its partition's backfill reservation first; it does
    not by itself preempt (preemption goes by the order's classes, which ignore it).
    """

    id: JobId
    user: str
    lab: str
    gpus: int
    nodes: int = 1
    gpu_model: str | None = None
    cpus: int = 0
    memory_mb: int = 0
    time_limit: float | None = None
    priority: int = 0
    tier: int = 0
    kind: JobKind = JobKind.BATCH
    submit_time: float = 0.0
    preemptible: bool = True
    name: str = ""
    attained_gpu_seconds: float = 0.0
    #: node labels the job requires (all of them).
    labels: frozenset[str] = frozenset()
    #: for some of those labels, what a node without it lacks, in words ("no node has podman for environment
    #: torch"): said when no node has that label.
    label_reasons: tuple[tuple[str, str], ...] = ()
    #: GPU models of which it accepts any (`gpu_model` names exactly one); empty: any model.
    gpu_models: frozenset[str] = frozenset()
    #: the least memory per GPU (MiB) it accepts; 0: any.
    gpu_memory_mb: int = 0
    #: the first job of the burst it was submitted in (nanum.core.bursts); None when it is that first job or alone.
    burst: JobId | None = None
    #: (the array's id, the task's index) for a task of a job array; None for any other job.
    array: tuple[JobId, int] | None = None

    @property
    def total_gpus(self) -> int:
        return self.gpus * self.nodes

    @property
    def ref(self) -> str:
        """The job as users name it in reasons and on the command line: `12_7` for task 7 of array 12, else its
        id."""
        return str(self.id) if self.array is None else f"{self.array[0]}_{self.array[1]}"


def serves(node: Node, job: Job) -> bool:
    """Whether `node` offers what `job` asks of any node it runs on besides room: its labels, enough GPU memory."""
    if job.labels and not job.labels <= node.labels:
        return False
    return not job.gpu_memory_mb or all(g.memory_mb >= job.gpu_memory_mb for g in node.gpus)


def takes_model(job: Job, model: str) -> bool:
    """Whether `job` may run on GPUs of `model`."""
    return (job.gpu_model is None or model == job.gpu_model) and (not job.gpu_models or model in job.gpu_models)


@dataclass(frozen=True, slots=True)
class Placement:
    """The GPUs one job holds on one node."""

    node: str
    gpus: tuple[int, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class Running:
    """A running job with its allocation. `expected_end` is start + time limit or predicted run time (None: unknown).

    `borrowing` marks a job started beyond its lab's guarantee: the first to be preempted when an owner reclaims.
    `over_reservation` marks a job backfilled onto GPUs reserved for a blocked job that it was expected to
    delay: that partition's first blocked job takes them back (preempts it) once they are all it still needs.
    `last_checkpoint` is when it last saved its state (None: never), so preemption can lose the least work.
    """

    job: Job
    placements: tuple[Placement, ...]
    start_time: float
    expected_end: float | None = None
    borrowing: bool = False
    last_checkpoint: float | None = None
    over_reservation: bool = False

    @property
    def gpus(self) -> int:
        return sum(len(p.gpus) for p in self.placements)


@dataclass(frozen=True, slots=True, kw_only=True)
class Limits:
    """Hard limits; None means unlimited."""

    max_gpus: int | None = None
    max_running_jobs: int | None = None
    monthly_gpu_hours: float | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Lab:
    """The unit of sharing. `guaranteed_gpus` is its deserved share (reclaimed from borrowers on demand);
    `weight` its fair share against other labs; `used_gpu_hours` what it used this budget month;
    `decayed_usage` its GPU-seconds with half-life decay (see `nanum.core.fairshare.decay`).
    `guaranteed_gpus` None: the lab takes no part in guarantees (its jobs never borrow, are never reclaimed)."""

    name: str
    guaranteed_gpus: int | None = None
    limits: Limits = field(default_factory=Limits)
    weight: float = 1.0
    used_gpu_hours: float = 0.0
    decayed_usage: float = 0.0


@dataclass(frozen=True, slots=True, kw_only=True)
class User:
    name: str
    limits: Limits = field(default_factory=Limits)
    used_gpu_hours: float = 0.0
    decayed_usage: float = 0.0


@dataclass(frozen=True, slots=True, kw_only=True)
class Snapshot:
    """Everything one cycle needs. `month` names the budget period for reasons ("November")."""

    now: float
    nodes: tuple[Node, ...]
    pending: tuple[Job, ...] = ()
    running: tuple[Running, ...] = ()
    labs: Mapping[str, Lab] = field(default_factory=dict)
    users: Mapping[str, User] = field(default_factory=dict)
    month: str = "this month"
