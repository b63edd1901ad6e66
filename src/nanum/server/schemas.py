"""The request and response bodies of the v1 API (docs/api.md), validated by pydantic at the edge: nodes, users,
labs, usage and priority here, with the names and times they all share; a job's bodies and states are in
`nanum.server.job_schemas`."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field

from nanum.jobfields import LABEL_PATTERN, NAME_PATTERN
from nanum.server.inputs import ApiIn
from nanum.server.limits import MAX_GPU_HOURS, MAX_GRACE_S, MAX_QUOTA, MAX_WEIGHT

Name = Annotated[str, Field(min_length=1, max_length=64, pattern=NAME_PATTERN)]
NodeName = Annotated[str, Field(min_length=1, max_length=128, pattern=NAME_PATTERN)]


def iso(t: float | None) -> str | None:
    """Epoch seconds as ISO 8601 UTC with milliseconds: `2026-11-29T17:20:41.123Z`; None for None and for a
    time no calendar date holds (beyond year 9999, NaN), which an old row may carry."""
    if t is None:
        return None
    try:
        return datetime.fromtimestamp(t, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    except (OverflowError, ValueError, OSError):
        return None


Constraint = Annotated[str, Field(max_length=128, pattern=LABEL_PATTERN)]


class GpuOut(BaseModel):
    index: int
    uuid: str
    model: str
    memory_mb: int
    job_id: int | None = None
    job_ref: str | None = Field(default=None, description=(
        "the job holding it as users name it: `12_7` for task 7 of array 12, else its id (as `nanum ps` says)"))
    user: str | None = None
    util: float | None = Field(default=None, description="utilisation in the latest reading, percent")
    memory_used_mb: int | None = Field(default=None, description="memory in use in the latest reading")
    outside: list[dict[str, Any]] = Field(
        default_factory=list, description="processes on it that no job holding it owns (pid, user, command)"
    )
    health: str | None = Field(default=None, description=(
        "the health problem that took it out of service (Xid, ECC, retired pages), until an admin resumes the node"))


class NodeOut(BaseModel):
    name: str
    state: Literal["up", "draining", "drained", "down"] = Field(description=(
        "`draining`: kept from new jobs while its running ones finish; `drained`: kept from new jobs, none running"))
    drain_reason: str | None = None
    owner: str | None = Field(default=None, description="the lab that owns it: its jobs first, others borrow it idle")
    labels: dict[str, str] = Field(default_factory=dict)
    last_seen: str | None
    simulated: bool
    cpus: int
    memory_mb: int
    limits: str = Field(
        default="",
        description="how the node holds jobs to --cpus and --mem: `cgroup v2`, `cgroup v1` or `not enforced (why)`",
    )
    gpus: list[GpuOut]
    unaccepted_gpus: list[GpuOut] = Field(
        default_factory=list,
        description="GPUs its agent reports beyond those it was accepted with: never scheduled until an admin "
        "accepts them (POST /nodes/{name}/accept)",
    )


class NodeIn(ApiIn):
    name: NodeName


class NodeSet(ApiIn):
    """`nanum node set`: only the fields present change. `owner` "" gives the node back to the shared pool;
    a label with an empty value is removed; `gpu_model` "" goes back to the model its agent reports."""

    owner: str | None = Field(default=None, max_length=64)
    labels: list[Constraint] = Field(default_factory=list, max_length=32)
    gpu_model: str | None = Field(default=None, max_length=64, pattern=r"^[A-Za-z0-9_.-]*$")


class NodeReason(ApiIn):
    """Why a node is drained (shown by `nanum nodes`), resumed or removed (kept in its history)."""

    reason: str | None = Field(default=None, max_length=500)


class TokenOut(BaseModel):
    name: str
    token: str


class UserIn(ApiIn):
    name: Name
    labs: list[Name] = Field(default_factory=list, max_length=256)
    admin: bool = False
    unix_user: str | None = Field(default=None, min_length=1, max_length=64)


class UserOut(BaseModel):
    name: str
    admin: bool
    labs: list[str]
    default_lab: str | None
    unix_user: str | None
    max_gpus: int | None = None
    max_running_jobs: int | None = None
    monthly_gpu_hours: float | None = None


Quota = Annotated[int, Field(ge=0, le=MAX_QUOTA)]
GpuHours = Annotated[float, Field(ge=0, le=MAX_GPU_HOURS)]
Weight = Annotated[float, Field(gt=0, le=MAX_WEIGHT)]
Grace = Annotated[float, Field(ge=0, le=MAX_GRACE_S, description="SIGTERM to SIGKILL when its jobs stop")]


class UserPatch(ApiIn):
    """A user's own limits, on top of their lab's. Only the fields present change; an explicit null removes one."""

    max_gpus: Quota | None = None
    max_running_jobs: Quota | None = None
    monthly_gpu_hours: GpuHours | None = None


class LabLimits(ApiIn):
    guaranteed_gpus: Quota | None = None
    max_gpus: Quota | None = None
    max_running_jobs: Quota | None = None
    monthly_gpu_hours: GpuHours | None = None
    weight: Weight = 1.0
    grace_s: Grace | None = None


class LabIn(LabLimits):
    name: Name


class LabPatch(ApiIn):
    """Only the fields present are changed; an explicit null removes a limit."""

    guaranteed_gpus: Quota | None = None
    max_gpus: Quota | None = None
    max_running_jobs: Quota | None = None
    monthly_gpu_hours: GpuHours | None = None
    weight: Weight | None = None
    grace_s: Grace | None = None


class LabOut(BaseModel):
    """A lab as stored: not bounded like `LabIn`, so rows written before a bound existed still read."""

    name: str
    guaranteed_gpus: int | None = None
    max_gpus: int | None = None
    max_running_jobs: int | None = None
    monthly_gpu_hours: float | None = None
    weight: float = 1.0
    grace_s: float | None = None
    #: Set by creating or changing a lab when its guarantee (or all labs' together) exceeds the cluster's GPUs.
    warning: str | None = None


class BudgetOut(BaseModel):
    used_gpu_hours: float
    budget_gpu_hours: float
    percent: float
    warning: str | None


class AuditOut(BaseModel):
    time: str | None
    actor: str
    action: str
    changes: dict[str, Any]
    message: str


class NodeDetail(NodeOut):
    """`GET /nodes/{name}`: the node as `GET /nodes` shows it, and its history (drains, resumes, GPUs taken out of
    service with the evidence, owner, label and model changes, GPUs accepted), the newest 50 entries, oldest first."""

    history: list[AuditOut]


class LabDetail(LabOut):
    """`GET /labs/{name}`: the quota, who is in the lab, what it runs and used this month, and its history."""

    members: list[str]
    #: the members who manage the lab (its members, their limits, its jobs)
    managers: list[str] = Field(default_factory=list)
    running_jobs: int
    pending_jobs: int
    gpus_in_use: int
    borrowed_gpus: int
    month: str
    used_gpu_hours: float
    lost_gpu_hours: float
    budget: BudgetOut | None
    history: list[AuditOut]


class UsageRowOut(BaseModel):
    key: str
    gpu_hours: float
    gpu_seconds: float
    jobs: int
    avg_wait_s: float | None
    lost_gpu_hours: float
    budget_gpu_hours: float | None = None
    budget_percent: float | None = None


class UsageOut(BaseModel):
    """`GET /usage`: GPU-hours charged per second of allocation in [since, until), grouped by `by`."""

    since: str | None
    until: str | None
    by: Literal["day", "user", "lab"]
    lab: str | None
    user: str | None
    rows: list[UsageRowOut]
    total: UsageRowOut


class PriorityRowOut(BaseModel):
    job_id: int
    job_ref: str = Field(description="the job as `nanum ps` names it: `12_7` for task 7 of array 12, else its id")
    name: str
    user: str
    lab: str
    rank: int = Field(description="place in the queue under the server's order (1: considered first)")
    tier: int = Field(default=0, description="0..9, set by admins: every order puts a higher tier first")
    priority: float = Field(description="the multifactor priority: sum of weight x factor")
    factors: dict[str, float]
    user_fairshare: float


class PriorityOut(BaseModel):
    policy: str
    weights: dict[str, float]
    jobs: list[PriorityRowOut]


class Health(BaseModel):
    status: str = "ok"
    version: str
