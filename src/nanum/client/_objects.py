"""The objects the API returns, as the SDK types them: `TypedDict`s of exactly the fields docs/api.md lists, and
the job states after which a job no longer changes. A job's (`Job`, `SubmitFields`, `Allocation`, `Segment`)
are declared in `nanum.jobfields`, where the server builds its models from them too.

They are plain dicts at run time (the JSON as it came), so reading one costs nothing and a field the server
adds later is simply there; the types are for the reader and for mypy.
"""

from __future__ import annotations

from typing import NamedTuple, TypedDict

TERMINAL_STATES = frozenset({"completed", "failed", "cancelled", "timeout"})
#: The states of a job that has not ended, as `GET /jobs?state=` takes them.
ACTIVE_STATES = ("pending", "held", "running")


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
    """Output of a job from some byte offset; `offset` is where the next read starts, `state` the job's;
    `missing`: bytes of an ended job's output that its node has not sent yet (they follow in a moment); `ref`: the
    job as `nanum ps` names it (`12_0` for an array's first task)."""

    text: str
    offset: int
    state: str
    missing: int = 0
    ref: str = ""

