"""The request and response bodies of jobs in the v1 API (docs/api.md): a submission, a change to a waiting job,
and a job as every listing shows it, with the states a job goes through.

A job's bodies are the API's largest and most often extended, so they have a module of their own; the other
resources' bodies are in `nanum.server.schemas`, whose names (`Name`, `Constraint`) they share.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field, field_validator

from nanum.server.arrays import parse_array
from nanum.server.inputs import ApiIn
from nanum.server.limits import (
    MAX_ARGS,
    MAX_COMMAND_BYTES,
    MAX_CPUS,
    MAX_DEPENDENCIES,
    MAX_ENV_BYTES,
    MAX_ENV_VARS,
    MAX_GPUS,
    MAX_MEMORY_MB,
    MAX_NAME,
    MAX_NODES,
    MAX_PATH,
    MAX_RETRIES,
    MAX_TIME_LIMIT_S,
)
from nanum.server.schemas import Constraint, Name

JOB_STATES = ("pending", "running", "completed", "failed", "cancelled", "timeout", "lost", "held")
ACTIVE_STATES = ("pending", "running", "held")
FINISHED_STATES = ("completed", "failed", "cancelled", "timeout")


def _size(texts: list[str]) -> int:
    return sum(len(t.encode("utf-8", "surrogatepass")) for t in texts)


#: the highest tier (`JobSubmit.tier`): ten tiers, 0..9.
MAX_TIER = 9
TIER_HELP = ("0..9, set by admins only: every queue order puts a higher tier first, and the order's own rule "
             "decides inside a tier")

JobRef = Annotated[str, Field(max_length=24, pattern=r"^[0-9]{1,9}(_[0-9]{1,7})?$")]


class JobSubmit(ApiIn):
    command: list[str] = Field(min_length=1, max_length=MAX_ARGS, description="the program and its arguments")
    name: str | None = Field(default=None, max_length=MAX_NAME)
    gpus: int = Field(default=1, ge=0, le=MAX_GPUS, description="GPUs on each node")
    nodes: int = Field(default=1, ge=1, le=MAX_NODES)
    gpu_model: str | None = Field(default=None, max_length=64, pattern=r"^[A-Za-z0-9_.-]+(,[A-Za-z0-9_.-]+)*$",
                                  description="a GPU model, or several separated by commas: any of them")
    gpu_memory_mb: int | None = Field(default=None, ge=0, le=MAX_MEMORY_MB,
                                      description="the least memory each of its GPUs must have")
    constraints: list[Constraint] = Field(default_factory=list, max_length=32,
                                          description="node labels `key=value` every node it runs on must have")
    torchrun: bool = Field(default=False, description=(
        "run the command under torchrun on each node, with --nnodes, --nproc-per-node, --node-rank, --master-addr "
        "and --master-port filled in"))
    cpus: int = Field(default=0, ge=0, le=MAX_CPUS, description="cores to reserve on each node; 0: none reserved")
    memory_mb: int | None = Field(default=None, ge=0, le=MAX_MEMORY_MB)
    time_limit_s: float | None = Field(default=None, gt=0, le=MAX_TIME_LIMIT_S)
    priority: int = Field(default=0, ge=0, le=100)
    tier: int = Field(default=0, ge=0, le=MAX_TIER, description=TIER_HELP)
    lab: str | None = Field(default=None, max_length=64)
    workdir: str | None = Field(default=None, max_length=MAX_PATH)
    env: dict[str, str] = Field(default_factory=dict, max_length=MAX_ENV_VARS)
    environment: Name | None = Field(default=None, description="the environment it runs in (`nanum environment list`)")
    datasets: list[Name] = Field(default_factory=list, max_length=32, description="datasets it reads, by name")
    kind: Literal["batch", "notebook", "shell"] = Field(default="batch", description=(
        "`notebook`: JupyterLab, proxied for its owner at /notebooks/ID/; `shell`: a terminal (`nanum shell`); "
        "either runs what the agent starts for it, not `command`"))
    preemptible: bool | None = Field(default=None, description=(
        "may be preempted, and so borrow idle GPUs beyond its lab's share; default: true for batch jobs, false for "
        "notebooks and shells"))
    requeue: bool = Field(default=True, description=(
        "queued again when a node it runs on is lost (its other parts are stopped first); false: it fails instead"))
    client_request_id: str | None = Field(
        default=None, min_length=1, max_length=64, pattern=r"^[A-Za-z0-9._:-]+$",
        description="the same id from the same user again returns the job it made instead of a second one",
    )
    array: str | None = Field(
        default=None, max_length=256, pattern=r"^[0-9,:%-]+$",
        description="an array of tasks, one job each: `0-99%8` (at most 8 running at once), `1,3,5-9`, `0-20:2`",
    )
    after: list[JobRef] = Field(default_factory=list, max_length=MAX_DEPENDENCIES,
                                description="jobs (or arrays, `ID`, or tasks, `ID_TASK`) that must start first")
    after_ok: list[JobRef] = Field(default_factory=list, max_length=MAX_DEPENDENCIES,
                                   description="jobs that must complete successfully first")
    after_failed: list[JobRef] = Field(default_factory=list, max_length=MAX_DEPENDENCIES,
                                       description="jobs that must fail (or be cancelled or time out) first")
    after_any: list[JobRef] = Field(default_factory=list, max_length=MAX_DEPENDENCIES,
                                    description="jobs that must end first, however they end")
    keep_if_unmet: bool = Field(default=False, description=(
        "stay pending when a dependency can no longer be met, instead of being cancelled"))
    retries: int = Field(default=0, ge=0, le=MAX_RETRIES, description="requeue a failed run up to this many times")

    @field_validator("array")
    @classmethod
    def _array(cls, v: str | None) -> str | None:
        if v is not None:
            parse_array(v)  # raises ValueError with the reason
        return v

    def dependencies(self) -> list[list[str]]:
        """`[[kind, target], ...]` as stored (nanum.server.services.eligibility)."""
        pairs = (("started", self.after), ("ok", self.after_ok), ("failed", self.after_failed),
                 ("any", self.after_any))
        return [[kind, target] for kind, targets in pairs for target in targets]

    @field_validator("command")
    @classmethod
    def _program_named(cls, v: list[str]) -> list[str]:
        if not v[0].strip():
            raise ValueError("the program name must not be empty")
        if (size := _size(v)) > MAX_COMMAND_BYTES:
            raise ValueError(f"the command is {size} bytes; at most {MAX_COMMAND_BYTES} are accepted")
        return v

    @field_validator("env")
    @classmethod
    def _env_names(cls, v: dict[str, str]) -> dict[str, str]:
        for key in v:
            if not key or "=" in key:
                raise ValueError(f"{key!r} is not a valid environment variable name")
        if (size := _size([*v, *v.values()])) > MAX_ENV_BYTES:
            raise ValueError(f"the environment is {size} bytes; at most {MAX_ENV_BYTES} are accepted")
        return v


class JobPatch(ApiIn):
    """`nanum modify`: what may change while a job waits. Only the fields present change."""

    time_limit_s: float | None = Field(default=None, gt=0, le=MAX_TIME_LIMIT_S)
    gpus: int | None = Field(default=None, ge=0, le=MAX_GPUS)
    priority: int | None = Field(default=None, ge=0, le=100)
    tier: int | None = Field(default=None, ge=0, le=MAX_TIER, description=TIER_HELP)
    lab: str | None = Field(default=None, max_length=64)
    name: str | None = Field(default=None, min_length=1, max_length=MAX_NAME)


class AllocationOut(BaseModel):
    node: str
    gpus: list[int]


class JobOut(BaseModel):
    id: int
    name: str
    user: str
    lab: str
    state: str
    reason: str | None
    reason_code: str | None
    estimated_start: str | None
    gpus: int
    nodes: int
    gpu_model: str | None
    gpu_memory_mb: int | None = None
    constraints: list[str] = []
    torchrun: bool = False
    cpus: int
    memory_mb: int | None
    time_limit_s: float | None
    priority: int
    tier: int = Field(default=0, description=TIER_HELP)
    kind: str
    preemptible: bool
    requeue: bool = True
    borrowing: bool
    over_reservation: bool = Field(default=False, description=(
        "running on GPUs reserved for a blocked job, which preempts it when it can start"))
    burst: int | None = Field(default=None, description=(
        "the first job of the burst it was submitted in: same user and request, at most 10 s apart"))
    allocation: list[AllocationOut]
    submit_time: str | None
    start_time: str | None
    end_time: str | None
    exit_code: int | None
    command: list[str]
    workdir: str
    env: dict[str, str] | None = Field(description="null for other users' jobs: only the owner and admins see it")
    environment: str | None = Field(default=None, description="the environment it runs in; null: the node's own")
    datasets: dict[str, str] = Field(default={}, description="the datasets it reads: name -> path on the nodes")
    runs: int
    preemptions: int = 0
    lost_gpu_hours: float = Field(default=0.0, description="work since the last checkpoint lost to preemptions")
    last_checkpoint: str | None = None
    hint: str | None = Field(default=None, description="what would help a waiting job start")
    budget_warning: str | None = Field(default=None, description="its lab or user used 80 % or more of a budget")
    predicted_runtime_s: float | None = Field(
        default=None, description="pending or running: the run time predicted from similar finished jobs, seconds"
    )
    prediction_basis: str | None = Field(
        default=None, description="pending or running, after a scheduling tick: what the prediction came from"
    )
    segments: list[SegmentOut] | None = Field(default=None, description="its allocations so far (GET /jobs/{id})")
    gpu_util: float | None = Field(default=None, description="running: its busiest GPU's utilisation, percent")
    gpu_util_avg: float | None = Field(default=None, description="its GPUs' average utilisation over all readings")
    idle: dict[str, Any] | None = Field(default=None, description="running and flagged idle: since when, how long")
    efficiency: dict[str, Any] | None = Field(default=None, description="ended: GPU use summary and hints")
    array_id: int | None = Field(default=None, description="an array task: its array's id")
    array_task: int | None = Field(default=None, description="an array task: its index")
    array_limit: int | None = Field(default=None, description="an array task: how many of its tasks may run at once")
    after: list[list[str]] | None = Field(default=None, description=(
        "the jobs it waits for: [kind, target], kind started, ok, failed or any; target ID or ID_TASK"))
    keep_if_unmet: bool = False
    retries: int = Field(default=0, description="how many more failed runs are requeued")
    exits: list[int | None] = Field(default_factory=list, description="each ended run's exit code, in order")


class SegmentOut(BaseModel):
    """One charged interval of a job's allocation (a run, or part of one): see `nanum.store.SegmentRow`."""

    start: str | None
    end: str | None
    gpus: int
    gpu_hours: float
    outcome: str
    wait_s: float | None
    lost_gpu_hours: float
