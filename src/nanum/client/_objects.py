"""The objects the API returns, as the SDK types them: `TypedDict`s of exactly the fields docs/api.md lists, and
the job states after which a job no longer changes.

They are plain dicts at run time (the JSON as it came), so reading one costs nothing and a field the server
adds later is simply there; the types are for the reader and for mypy.
"""

from __future__ import annotations

from typing import Any, NamedTuple, TypedDict

TERMINAL_STATES = frozenset({"completed", "failed", "cancelled", "timeout"})


class Allocation(TypedDict):
    node: str
    gpus: list[int]


class Job(TypedDict):
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
    cpus: int
    memory_mb: int | None
    time_limit_s: float | None
    priority: int
    tier: int  # 0..9, set by admins: every queue order puts a higher tier first
    kind: str
    preemptible: bool
    requeue: bool
    borrowing: bool
    over_reservation: bool
    burst: int | None
    allocation: list[Allocation]
    submit_time: str
    start_time: str | None
    end_time: str | None
    exit_code: int | None
    command: list[str]
    workdir: str
    env: dict[str, str] | None  # None on other users' jobs: only the owner and admins see it
    runs: int
    preemptions: int
    lost_gpu_hours: float
    last_checkpoint: str | None
    hint: str | None
    budget_warning: str | None
    segments: list[dict[str, Any]] | None
    array_id: int | None
    array_task: int | None
    array_limit: int | None
    after: list[list[str]] | None
    keep_if_unmet: bool
    retries: int
    exits: list[int | None]


class SubmitFields(TypedDict, total=False):
    """The optional fields of `POST /jobs`; anything left out takes the server's default."""

    name: str
    gpus: int
    nodes: int
    gpu_model: str | None
    gpu_memory_mb: int | None
    constraints: list[str]
    torchrun: bool
    cpus: int
    memory_mb: int | None
    time_limit_s: float | None
    priority: int
    tier: int  # admins only
    lab: str | None
    workdir: str
    env: dict[str, str]
    kind: str
    preemptible: bool
    requeue: bool
    client_request_id: str
    array: str
    after: list[str]
    after_ok: list[str]
    after_failed: list[str]
    after_any: list[str]
    keep_if_unmet: bool
    retries: int


class Gpu(TypedDict):
    index: int
    uuid: str
    model: str
    memory_mb: int
    job_id: int | None
    user: str | None


class Node(TypedDict):
    name: str
    state: str
    last_seen: str | None
    simulated: bool
    cpus: int
    memory_mb: int
    limits: str
    gpus: list[Gpu]
    unaccepted_gpus: list[Gpu]


class Me(TypedDict):
    name: str
    admin: bool
    labs: list[str]
    default_lab: str | None
    unix_user: str | None


class Lab(TypedDict, total=False):
    name: str
    guaranteed_gpus: int | None
    max_gpus: int | None
    max_running_jobs: int | None
    monthly_gpu_hours: float | None
    weight: float
    grace_s: float | None
    #: when the lab's guarantee is more than the cluster's GPUs (on create and update)
    warning: str


class NewToken(TypedDict):
    """A created user or node with its token, shown once."""

    name: str
    token: str


class LogChunk(NamedTuple):
    """Output of a job from some byte offset; `offset` is where the next read starts, `state` the job's."""

    text: str
    offset: int
    state: str

