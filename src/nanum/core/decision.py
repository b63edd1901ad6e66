"""What a cycle returns: jobs to start (with exact placements), jobs to preempt, and why the rest wait.

Each pending job gets a `Reason`: a closed `Code` a program can act on and a message a person understands, naming
the numbers. What a driver does with each code:

- `RESOURCES`, `RESERVED`, `QUEUED`, `BACKFILL`: wait; the job starts when capacity frees (estimate given where known).
- `LAB_LIMIT`, `USER_LIMIT`: wait until the lab's or user's own jobs finish (or an admin raises the limit).
- `BUDGET`: wait until the month turns or an admin raises the budget; running jobs are not touched.
- `RECLAIMING`: victims were chosen; the job starts once they have stopped.
- `PREEMPTING`: running jobs of a lower priority class were chosen as victims (`+preempt`); likewise.
- `IMPOSSIBLE`: no node or limit could ever satisfy it; the server refuses it at submit.
- `NODE_DOWN`: every node that could run it is down or draining.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from nanum.core.model import JobId, Placement


class Code(enum.Enum):
    RESOURCES = "resources"
    QUEUED = "queued"
    RESERVED = "reserved"
    BACKFILL = "backfill"
    LAB_LIMIT = "lab_limit"
    USER_LIMIT = "user_limit"
    BUDGET = "budget"
    RECLAIMING = "reclaiming"
    PREEMPTING = "preempting"
    IMPOSSIBLE = "impossible"
    NODE_DOWN = "node_down"


@dataclass(frozen=True, slots=True)
class Reason:
    code: Code
    message: str

    def __str__(self) -> str:
        return self.message


@dataclass(frozen=True, slots=True, kw_only=True)
class Start:
    """Start `job_id` on exactly these GPUs. `borrowing`: beyond its lab's guarantee, first to be reclaimed.
    `over_reservation`: on GPUs reserved for a blocked job, which takes them back when it can start (`Running`)."""

    job_id: JobId
    placements: tuple[Placement, ...]
    borrowing: bool = False
    expected_end: float | None = None
    over_reservation: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class Preempt:
    """Stop `job_id` and requeue it, so that `for_job` can start. The driver applies the grace period."""

    job_id: JobId
    for_job: JobId
    reason: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Pending:
    """`job_id` waits for `reason`. `ahead`: how many jobs of its partition the cycle considered before it that
    wait too (its place in line is `ahead + 1`), where it got that far; None when limits or an impossible request
    stop it first."""

    job_id: JobId
    reason: Reason
    estimated_start: float | None = None
    ahead: int | None = None


@dataclass(frozen=True, slots=True)
class Decisions:
    starts: tuple[Start, ...]
    preemptions: tuple[Preempt, ...]
    pending: tuple[Pending, ...]
    #: whether a step chose among running jobs as victims, whether or not it then preempted: the choice follows their
    #: checkpoints (`nanum.core.preempt`), so a driver that passed older ones decides again (`Incremental.cycle`).
    #: How the cycle went, not what it decided: equal decisions compare equal whatever it is.
    ranked: bool = field(default=False, compare=False)

    def pending_by_id(self) -> dict[JobId, Pending]:
        return {p.job_id: p for p in self.pending}


# -- writing many at once ----------------------------------------------------------------------------------------------
# A cycle writes one `Pending` and one `Reason` for every job it leaves waiting: 10,000 of each in a long queue. The
# generated `__init__` of a frozen dataclass parses keywords and calls `object.__setattr__` for every field, and
# so costs twice what setting the slots directly does. `pending` and `reason` give the same objects (equal, hashed
# and shown alike; the test beside them checks every field) at that lower cost.

_new = object.__new__
_set_code, _set_message = (vars(Reason)[name].__set__ for name in ("code", "message"))
_set_job, _set_reason, _set_start, _set_ahead = (
    vars(Pending)[name].__set__ for name in ("job_id", "reason", "estimated_start", "ahead"))


def reason(code: Code, message: str) -> Reason:
    """`Reason(code, message)`, written faster."""
    made = _new(Reason)
    _set_code(made, code)
    _set_message(made, message)
    return made


def pending(job_id: JobId, why: Reason, estimated_start: float | None, ahead: int | None) -> Pending:
    """`Pending(job_id=job_id, reason=why, estimated_start=estimated_start, ahead=ahead)`, written faster."""
    made = _new(Pending)
    _set_job(made, job_id)
    _set_reason(made, why)
    _set_start(made, estimated_start)
    _set_ahead(made, ahead)
    return made


def gpus(count: int) -> str:
    """'1 GPU', '8 GPUs': a count of GPUs as reasons word it."""
    return "1 GPU" if count == 1 else f"{count} GPUs"
