"""A job's fields, declared once: what a submission may say (`SubmitFields`, and `JobRequest` with its command)
and what every listing shows (`Job`, with its `Allocation`s and `Segment`s).

Each field is a key of a `TypedDict`, whose annotation may carry a `Spec`: the field's default, its bounds and
what it means. Everything else is derived from these declarations:

- the SDK (`nanum.client`) types `Client.submit`'s keyword arguments with `SubmitFields` and what it returns
  with `Job` (plain dicts at run time);
- the command line takes any field of `SubmitFields` as an option (`nanum.cli.jobspec.SubmitOptions`) and
  sends each one given;
- the server builds its pydantic models from them (`nanum.server.job_schemas`, with
  `nanum.server.fieldmodels`), stores each submitted field in the `JobRow` column of its name
  (`nanum.server.services.jobs`), and shows each column of a name `Job` declares (`nanum.server.views.job_out`).

So a new field a job may be submitted with is a key of `SubmitFields` (and of `Job`, to be shown), a `JobRow`
column of the same name with its migration, and the command line's option for it.

The module needs nothing beyond the standard library, so that the command line and the SDK read it without
importing pydantic, which costs more than a whole `nanum ps`. It does without `from __future__ import
annotations`: on Python 3.11 a TypedDict tells its required keys from the others only by annotations it sees as
objects.
"""

import functools
import typing
from typing import Annotated, Any, Literal, NotRequired, Required, TypedDict

from nanum.server.limits import (
    MAX_ARGS,
    MAX_CPUS,
    MAX_DEPENDENCIES,
    MAX_ENV_VARS,
    MAX_GPUS,
    MAX_MEMORY_MB,
    MAX_NAME,
    MAX_NODES,
    MAX_PATH,
    MAX_RETRIES,
    MAX_TIME_LIMIT_S,
)

__all__ = [
    "CLEARED_BY_NULL",
    "LABEL_PATTERN",
    "MAX_TIER",
    "NAME_PATTERN",
    "TIER_HELP",
    "Allocation",
    "Command",
    "Constraint",
    "Job",
    "JobChanges",
    "JobRef",
    "JobRequest",
    "Name",
    "Segment",
    "Spec",
    "SubmitFields",
    "bounds",
    "change_text",
    "spec",
]

class Spec:
    """A field's default (`...`: none, the field must be given), its bounds and its meaning: the arguments of
    pydantic's `Field`, which the server passes on to it. In `Job`, `default` is also what a body shows when
    the job's row holds nothing (a row older than the field). Read-only."""

    __slots__ = ("default", "description", "ge", "gt", "le", "max_length", "min_length", "pattern")

    def __init__(self, default: Any = ..., description: str | None = None, *, ge: float | None = None,
                 gt: float | None = None, le: float | None = None, min_length: int | None = None,
                 max_length: int | None = None, pattern: str | None = None) -> None:
        self.default, self.description = default, description
        self.ge, self.gt, self.le, self.pattern = ge, gt, le, pattern
        self.min_length, self.max_length = min_length, max_length

    def checks(self) -> dict[str, Any]:
        """The bounds that are set, by pydantic's names (`ge`, `max_length`, ...)."""
        names = ("ge", "gt", "le", "min_length", "max_length", "pattern")
        return {name: getattr(self, name) for name in names if getattr(self, name) is not None}

    def __repr__(self) -> str:
        shown = {"default": self.default, "description": self.description, **self.checks()}
        return f"Spec({', '.join(f'{k}={v!r}' for k, v in shown.items() if v is not None)})"


#: the highest tier (`SubmitFields.tier`): ten tiers, 0..9.
MAX_TIER = 9
TIER_HELP = ("0..9, set by admins only: every queue order puts a higher tier first, and the order's own rule "
             "decides inside a tier")
#: A node label `key=value`, as `nanum node set --label` sets it and `--constraint` asks for it.
LABEL_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_./-]{0,62}=[A-Za-z0-9_./-]{0,63}$"
#: A name of a user, lab, node, environment or dataset.
NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]*$"

#: The name of an environment or a dataset.
Name = Annotated[str, Spec(min_length=1, max_length=64, pattern=NAME_PATTERN)]
Constraint = Annotated[str, Spec(max_length=128, pattern=LABEL_PATTERN)]
#: A job, an array (`ID`) or an array's task (`ID_TASK`) another job waits for.
JobRef = Annotated[str, Spec(max_length=24, pattern=r"^[0-9]{1,9}(_[0-9]{1,7})?$")]
Command = list[str]


class SubmitFields(TypedDict, total=False):
    """The fields of `POST /jobs` beside its `command`; anything left out takes the default shown."""

    name: Annotated[str | None, Spec(None, max_length=MAX_NAME)]
    gpus: Annotated[int, Spec(1, "GPUs on each node", ge=0, le=MAX_GPUS)]
    nodes: Annotated[int, Spec(1, ge=1, le=MAX_NODES)]
    gpu_model: Annotated[str | None, Spec(
        None, "a GPU model, or several separated by commas: any of them",
        max_length=64, pattern=r"^[A-Za-z0-9_.-]+(,[A-Za-z0-9_.-]+)*$")]
    gpu_memory_mb: Annotated[int | None, Spec(
        None, "the least memory each of its GPUs must have", ge=0, le=MAX_MEMORY_MB)]
    constraints: Annotated[list[Constraint], Spec(
        [], "node labels `key=value` every node it runs on must have", max_length=32)]
    torchrun: Annotated[bool, Spec(False, (
        "run the command under torchrun on each node, with --nnodes, --nproc-per-node, --node-rank, --master-addr "
        "and --master-port filled in"))]
    cpus: Annotated[int, Spec(0, "cores to reserve on each node; 0: none reserved", ge=0, le=MAX_CPUS)]
    memory_mb: Annotated[int | None, Spec(None, ge=0, le=MAX_MEMORY_MB)]
    time_limit_s: Annotated[float | None, Spec(None, gt=0, le=MAX_TIME_LIMIT_S)]
    priority: Annotated[int, Spec(0, ge=0, le=100)]
    tier: Annotated[int, Spec(0, TIER_HELP, ge=0, le=MAX_TIER)]  # admins only
    lab: Annotated[str | None, Spec(None, max_length=64)]
    workdir: Annotated[str | None, Spec(None, max_length=MAX_PATH)]
    env: Annotated[dict[str, str], Spec({}, max_length=MAX_ENV_VARS)]
    environment: Annotated[Name | None, Spec(None, "the environment it runs in (`nanum environment list`)")]
    datasets: Annotated[list[Name], Spec([], "datasets it reads, by name", max_length=32)]
    kind: Annotated[Literal["batch", "notebook", "shell"], Spec("batch", (
        "`notebook`: JupyterLab, proxied for its owner at /notebooks/ID/; `shell`: a terminal (`nanum shell`); "
        "either runs what the agent starts for it, not `command`"))]
    preemptible: Annotated[bool | None, Spec(None, (
        "may be preempted, and so borrow idle GPUs beyond its lab's share; default: true for batch jobs, false for "
        "notebooks and shells"))]
    hold: Annotated[bool, Spec(False, (
        "submitted held: it waits, and is not scheduled, until released (`nanum release ID`; Slurm's `sbatch "
        "--hold`)"))]
    requeue: Annotated[bool, Spec(True, (
        "queued again when a node it runs on is lost (its other parts are stopped first); false: it fails instead"))]
    client_request_id: Annotated[str | None, Spec(
        None, "the same id from the same user again returns the job it made instead of a second one",
        min_length=1, max_length=64, pattern=r"^[A-Za-z0-9._:-]+$")]
    array: Annotated[str | None, Spec(
        None, "an array of tasks, one job each: `0-99%8` (at most 8 running at once), `1,3,5-9`, `0-20:2`",
        max_length=256, pattern=r"^[0-9,:%-]+$")]
    after: Annotated[list[JobRef], Spec(
        [], "jobs (or arrays, `ID`, or tasks, `ID_TASK`) that must start first", max_length=MAX_DEPENDENCIES)]
    after_ok: Annotated[list[JobRef], Spec(
        [], "jobs that must complete successfully first", max_length=MAX_DEPENDENCIES)]
    after_failed: Annotated[list[JobRef], Spec(
        [], "jobs that must fail (or be cancelled or time out) first", max_length=MAX_DEPENDENCIES)]
    after_any: Annotated[list[JobRef], Spec(
        [], "jobs that must end first, however they end", max_length=MAX_DEPENDENCIES)]
    keep_if_unmet: Annotated[bool, Spec(False, (
        "stay pending when a dependency can no longer be met, instead of being cancelled"))]
    retries: Annotated[int, Spec(0, "requeue a failed run up to this many times", ge=0, le=MAX_RETRIES)]


class _Command(TypedDict):
    command: Annotated[Command, Spec(..., "the program and its arguments", min_length=1, max_length=MAX_ARGS)]


#: The fields a change to a waiting job (`PATCH /jobs/{id}`, `nanum modify`) sets to none with `null`: any model,
#: any memory, no limit. `null` leaves any other field as it is.
CLEARED_BY_NULL = frozenset({"gpu_model", "gpu_memory_mb", "memory_mb"})


def change_text(field: str, value: Any) -> str:
    """How one change to a waiting job reads, on the command line and in the job's events: `none` for no labels,
    `any` for a null in `CLEARED_BY_NULL`, else the value."""
    if isinstance(value, list):
        return ",".join(value) or "none"
    return "any" if value is None and field in CLEARED_BY_NULL else str(value)


class JobChanges(TypedDict, total=False):
    """What a change to a waiting job (`PATCH /jobs/{id}`, `Client.modify`, `nanum modify`) may carry: only the
    fields given change, each bounded as in a submission (`SubmitFields`); `tier` is an admin's. None in the
    fields of `CLEARED_BY_NULL` means any model, any memory, no limit; `constraints=[]` drops every label."""

    time_limit_s: float
    gpus: int
    nodes: int
    gpu_model: str | None
    gpu_memory_mb: int | None
    constraints: list[str]
    cpus: int
    memory_mb: int | None
    priority: int
    tier: int
    lab: str
    name: str


class JobRequest(_Command, SubmitFields):
    """The body of `POST /jobs`: the command first, then `SubmitFields` (the server checks them in this order,
    and names the first it refuses)."""


class Allocation(TypedDict):
    node: str
    gpus: list[int]


class Segment(TypedDict):
    """One charged interval of a job's allocation (a run, or part of one): see `nanum.store.SegmentRow`."""

    start: str | None
    end: str | None
    gpus: int
    gpu_hours: float
    outcome: str
    wait_s: float | None
    lost_gpu_hours: float


class Job(TypedDict):
    """A job as every listing shows it. The keys marked `NotRequired` are there only where they say so; every
    other one is always there."""

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
    gpu_memory_mb: Annotated[int | None, Spec(None)]
    constraints: Annotated[list[str], Spec([])]
    torchrun: Annotated[bool, Spec(False)]
    cpus: int
    memory_mb: int | None
    time_limit_s: float | None
    priority: int
    tier: Annotated[int, Spec(0, TIER_HELP)]
    kind: str
    preemptible: bool
    requeue: Annotated[bool, Spec(True)]
    borrowing: bool
    over_reservation: Annotated[bool, Spec(False, (
        "running on GPUs reserved for a blocked job, which preempts it when it can start"))]
    burst: Annotated[int | None, Spec(None, (
        "the first job of the burst it was submitted in: same user and request, at most 10 s apart"))]
    allocation: list[Allocation]
    submit_time: str | None
    start_time: str | None
    end_time: str | None
    exit_code: int | None
    command: Command
    workdir: str
    env: Annotated[dict[str, str] | None, Spec(..., "null for other users' jobs: only the owner and admins see it")]
    environment: Annotated[str | None, Spec(None, "the environment it runs in; null: the node's own")]
    datasets: Annotated[dict[str, str], Spec({}, "the datasets it reads: name -> path on the nodes")]
    runs: int
    preemptions: Annotated[int, Spec(0)]
    lost_gpu_hours: Annotated[float, Spec(0.0, "work since the last checkpoint lost to preemptions")]
    last_checkpoint: Annotated[str | None, Spec(None)]
    hint: Annotated[str | None, Spec(None, "what would help a waiting job start")]
    budget_warning: Annotated[str | None, Spec(None, "its lab or user used 80 % or more of a budget")]
    predicted_runtime_s: Annotated[float | None, Spec(
        None, "pending or running: the run time predicted from similar finished jobs, seconds")]
    prediction_basis: Annotated[str | None, Spec(
        None, "pending or running, after a scheduling tick: what the prediction came from")]
    segments: NotRequired[Annotated[list[Segment] | None, Spec(None, "its allocations so far (GET /jobs/{id})")]]
    gpu_util: NotRequired[Annotated[float | None, Spec(None, "running: its busiest GPU's utilisation, percent")]]
    gpu_util_avg: NotRequired[Annotated[float | None, Spec(
        None, "its GPUs' average utilisation over all readings")]]
    idle: NotRequired[Annotated[dict[str, Any] | None, Spec(None, "running and flagged idle: since when, how long")]]
    efficiency: NotRequired[Annotated[dict[str, Any] | None, Spec(None, "ended: GPU use summary and hints")]]
    array_id: Annotated[int | None, Spec(None, "an array task: its array's id")]
    array_task: Annotated[int | None, Spec(None, "an array task: its index")]
    array_limit: Annotated[int | None, Spec(None, "an array task: how many of its tasks may run at once")]
    after: Annotated[list[list[str]] | None, Spec(None, (
        "the jobs it waits for: [kind, target], kind started, ok, failed or any; target ID or ID_TASK"))]
    keep_if_unmet: Annotated[bool, Spec(False)]
    retries: Annotated[int, Spec(0, "how many more failed runs are requeued")]
    exits: Annotated[list[int | None], Spec([], "each ended run's exit code, in order")]


@functools.cache
def _specs(declared: type) -> dict[str, Spec]:
    hints = typing.get_type_hints(declared, include_extras=True)
    return {name: _spec_of(hint) for name, hint in hints.items()}


def _spec_of(hint: Any) -> Spec:
    if typing.get_origin(hint) in (Required, NotRequired):
        hint = typing.get_args(hint)[0]
    found = [m for m in getattr(hint, "__metadata__", ()) if isinstance(m, Spec)]
    return found[0] if found else Spec()


def spec(declared: type, name: str) -> Spec:
    """The `Spec` of field `name` of the TypedDict `declared` (`Spec()` for a field declared without one)."""
    return _specs(declared)[name]


def bounds(name: str) -> tuple[int, int]:
    """The least and the most a whole-number field of a submission may be: `bounds("tier") == (0, 9)`."""
    found = spec(JobRequest, name)
    if found.ge is None or found.le is None:
        raise ValueError(f"{name} has no lower and upper bound")
    return int(found.ge), int(found.le)
