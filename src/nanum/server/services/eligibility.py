"""Which pending jobs the scheduler may consider: those not waiting on a dependency or their array's running limit,
and whose owner's account is not disabled.

The core schedules what it is given; it never sees a job that waits for another job (`--after-ok 12`) or an array
task beyond its array's limit (`--array 0-99%8`: the ninth task while eight run). `blocked` names those jobs for
the snapshot (`nanum.server.snapshot`), and this module writes their reasons itself, naming the job waited for.
Held jobs are not pending at all (state `held`). A disabled user's pending jobs stay in the queue, visible to
admins with the reason DISABLED, and start only once the account is enabled again (`nanum user enable`).

A dependency is `[kind, target]`: target `"12"` (job 12, or every task of array 12) or `"12_3"` (task 3 of array
12). It is met when every targeted job has

- `started`: started (it may still run, or have ended after a start);
- `ok`: completed;
- `failed`: ended failed, cancelled or timed out;
- `any`: ended, however.

It can no longer be met when a targeted job ended the other way (or, for `started`, ended without ever starting,
or a targeted job does not exist). `settle` runs whenever a job ends: each job waiting on it is then cancelled with
the reason (or, with `keep_if_unmet`, kept pending with it), or shown what it still waits for.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable, Sequence, Set
from dataclasses import dataclass
from typing import Any

from sqlalchemy import bindparam, func, or_, select, update
from sqlalchemy.orm import Session

from nanum.store import JobRow, UserRow

KINDS = ("started", "ok", "failed", "any")
#: The option each kind is written with, for messages.
OPTION = {"started": "--after", "ok": "--after-ok", "failed": "--after-failed", "any": "--after-any"}
ENDED = frozenset({"completed", "failed", "cancelled", "timeout"})
_UNSUCCESSFUL = frozenset({"failed", "cancelled", "timeout"})
WAITING, MET, UNMET = "waiting", "met", "unmet"
DISABLED = "owner's account is disabled; an admin can enable it again (nanum user enable NAME)"


@dataclass(frozen=True, slots=True)
class Target:
    """One job a dependency names: a plain job, a whole array, or one task of an array."""

    job: int
    task: int | None = None

    @classmethod
    def parse(cls, text: str) -> Target:
        head, _, task = text.partition("_")
        return cls(int(head), int(task) if task else None)

    def __str__(self) -> str:
        return f"{self.job}" if self.task is None else f"{self.job}_{self.task}"


@dataclass(frozen=True, slots=True)
class Verdict:
    state: str  # WAITING, MET or UNMET
    message: str = ""


def judge(kind: str, states: list[tuple[str, float | None]]) -> str:
    """WAITING, MET or UNMET for one dependency whose targets are in `states` ((state, start_time) each)."""
    if not states:
        return UNMET
    verdicts = [_one(kind, state, started) for state, started in states]
    if UNMET in verdicts:
        return UNMET
    return MET if all(v == MET for v in verdicts) else WAITING


def _one(kind: str, state: str, started: float | None) -> str:
    if kind == "started":
        if started is not None or state == "running":
            return MET
        return UNMET if state in ENDED else WAITING
    if state not in ENDED:
        return WAITING
    if kind == "any":
        return MET
    good = state == "completed" if kind == "ok" else state in _UNSUCCESSFUL
    return MET if good else UNMET


def evaluate(s: Session, after: Iterable[list[str]]) -> Verdict:
    """Whether the dependencies `after` of one job are met, can no longer be, or are awaited (and why)."""
    deps = [(kind, Target.parse(target)) for kind, target in after]
    found = _targets(s, [t for _, t in deps])
    waiting: list[str] = []
    for kind, target in deps:
        states = found.get(target, [])
        verdict = judge(kind, [(st, started) for st, started, _ in states])
        if verdict == UNMET:
            return Verdict(UNMET, _unmet(kind, target, states))
        if verdict == WAITING:
            waiting.append(_awaited(kind, target, states))
    if waiting:
        return Verdict(WAITING, "waiting for " + " and ".join(waiting))
    return Verdict(MET)


def _targets(s: Session, targets: list[Target]) -> dict[Target, list[tuple[str, float | None, int]]]:
    """(state, start time, job id) of every job each target names."""
    ids = {t.job for t in targets}
    if not ids:
        return {}
    rows = s.execute(
        select(JobRow.id, JobRow.array_id, JobRow.array_task, JobRow.state, JobRow.start_time)
        .where(or_(JobRow.id.in_(ids), JobRow.array_id.in_(ids)))
        .order_by(JobRow.id)
    ).all()
    out: dict[Target, list[tuple[str, float | None, int]]] = defaultdict(list)
    for target in targets:
        for r in rows:
            in_array = r.array_id == target.job
            if target.task is None:
                named = in_array or (r.id == target.job and r.array_id is None)
            else:
                named = in_array and r.array_task == target.task
            if named:
                out[target].append((r.state, r.start_time, r.id))
    return out


def _what(target: Target, states: list[tuple[str, float | None, int]]) -> str:
    if target.task is not None:
        return f"task {target} of array {target.job}"
    return f"array {target.job}" if len(states) > 1 else f"job {target.job}"


def _awaited(kind: str, target: Target, states: list[tuple[str, float | None, int]]) -> str:
    verb = {"started": "start", "ok": "complete", "failed": "fail", "any": "end"}[kind]
    return f"{_what(target, states)} to {verb} ({OPTION[kind]} {target})"


def _unmet(kind: str, target: Target, states: list[tuple[str, float | None, int]]) -> str:
    if not states:
        return f"dependency can never be met: there is no job {target} ({OPTION[kind]} {target})"
    bad = next((st for st, started, _ in states if _one(kind, st, started) == UNMET), "ended")
    return f"dependency can never be met: {_what(target, states)} {bad} ({OPTION[kind]} {target})"


# -- what the scheduler may see --------------------------------------------------------------------------------


def blocked(s: Session, pending: Sequence[Any], disabled: Set[int]) -> set[int]:
    """Pending jobs the scheduler must not consider now: dependencies not met, beyond their array's limit, or of
    a disabled account. `pending` are the pending rows as the snapshot read them (id, user_id, has_after,
    array_id, array_task, array_limit) and `disabled` the ids of disabled users: a tick with no dependency and
    no limited array asks the database nothing more."""
    out = {r.id for r in pending if r.user_id in disabled}
    awaiting = [r.id for r in pending if r.has_after]
    if awaiting:
        for job_id, after in s.execute(select(JobRow.id, JobRow.after).where(JobRow.id.in_(awaiting))):
            if after and evaluate(s, after).state != MET:
                out.add(job_id)
    return out | _throttled(s, [r for r in pending if r.array_limit is not None], out)


def _throttled(s: Session, limited: Sequence[Any], waiting: set[int]) -> set[int]:
    """Pending tasks beyond their array's running limit: for each array, those after the first limit-minus-running
    (by task index) of its pending tasks whose dependencies are met. `limited`: the pending tasks of limited
    arrays."""
    if not limited:
        return set()
    tasks: dict[int, list[Any]] = defaultdict(list)
    for r in limited:
        tasks[r.array_id].append(r)
    running = dict(s.execute(
        select(JobRow.array_id, func.count())
        .where(JobRow.state == "running", JobRow.array_id.in_(list(tasks)))
        .group_by(JobRow.array_id)
    ).all())
    out: set[int] = set()
    for array, rows in tasks.items():
        room = max((rows[0].array_limit or 0) - running.get(array, 0), 0)
        eligible = [r.id for r in sorted(rows, key=lambda r: r.array_task) if r.id not in waiting]
        out.update(eligible[room:])
    return out


def _limited_pending(s: Session) -> Sequence[Any]:
    """The pending tasks of arrays with a running limit."""
    return s.execute(
        select(JobRow.id, JobRow.array_id, JobRow.array_task, JobRow.array_limit)
        .where(JobRow.state == "pending", JobRow.array_limit.is_not(None))
    ).all()


def mark_owner(s: Session, user_id: int, disabled: bool) -> None:
    """Write on a user's pending jobs that they wait for their owner's account (or, enabled again, for the
    scheduler, which gives them its own reason at its next cycle), for pages that read the stored reason."""
    reason, code = (DISABLED, "disabled") if disabled else ("waiting for the scheduler", "queued")
    s.execute(update(JobRow).where(JobRow.user_id == user_id, JobRow.state == "pending")
              .values(reason=reason, reason_code=code, estimated_start=None))


def throttle_reason(array_id: int, limit: int) -> str:
    return f"waiting for a slot: array {array_id} runs at most {limit} tasks at once (--array ...%{limit})"


def annotate(s: Session, jobs: list[dict[str, Any]]) -> None:
    """Give each pending job in `jobs` (API bodies) that waits on a dependency, on its array's limit or on its
    owner's disabled account that reason, naming what it waits for; the others keep the scheduler's."""
    waiting: set[int] = set()
    for job in jobs:
        if job["state"] == "pending" and job.get("after"):
            verdict = evaluate(s, job["after"])
            if verdict.state != MET:
                job["reason"], job["reason_code"], job["estimated_start"] = verdict.message, "dependency", None
                job["hint"] = None
                waiting.add(job["id"])
    if any(j["state"] == "pending" and j.get("array_limit") for j in jobs):
        throttled = _throttled(s, _limited_pending(s), waiting)
        for job in jobs:
            if job["id"] in throttled:
                job["reason"] = throttle_reason(job["array_id"], job["array_limit"])
                job["reason_code"], job["estimated_start"], job["hint"] = "array_limit", None, None
    if any(j["state"] == "pending" for j in jobs):
        disabled = set(s.scalars(select(UserRow.name).where(UserRow.disabled.is_(True))))
        for job in jobs:
            if job["state"] == "pending" and job.get("user") in disabled:
                job["reason"], job["reason_code"] = DISABLED, "disabled"
                job["estimated_start"], job["hint"] = None, None
    _cap_ahead(s, jobs)


_AHEAD = re.compile(r"^(\d+) jobs? ahead")


def _cap_ahead(s: Session, jobs: list[dict[str, Any]]) -> None:
    """A reason's "N jobs ahead" counts at most the jobs pending now: the scheduler rewrites a reason whose only
    change is its wording now and then, so between two writes the count may be of jobs that have since started."""
    found = [(job, m) for job in jobs if job["state"] == "pending" and (m := _AHEAD.match(job.get("reason") or ""))]
    if not found:
        return
    most = max(int(s.scalar(select(func.count()).where(JobRow.state == "pending")) or 0) - 1, 0)
    for job, match in found:
        if int(match.group(1)) > most:
            place = "next in line" if most == 0 else "1 job ahead" if most == 1 else f"{most} jobs ahead"
            job["reason"] = place + job["reason"][match.end():]


# -- settling dependents when a job ends -----------------------------------------------------------------------


def dependents(s: Session, jobs: list[JobRow]) -> list[JobRow]:
    """Pending and held jobs that name any of `jobs` (or their arrays) among their dependencies, in id order,
    locked."""
    names = {str(job.id) for job in jobs}
    for job in jobs:
        if job.array_id is not None:
            names |= {str(job.array_id), f"{job.array_id}_{job.array_task}"}
    # Most jobs have no dependents: a plain read finds that (or which) without loading or locking any row.
    after_id = min(min(job.id, job.array_id or job.id) for job in jobs)
    found = [r.id for r in s.connection().execute(_WAITING_ON, {"after_id": after_id}) if _names(r.after, names)]
    if not found:
        return []
    rows = s.scalars(_DEPENDENTS, {"ids": found}).all()
    # as locked: one may have started (or changed) meanwhile
    return [r for r in rows if r.state in ("pending", "held") and _names(r.after, names)]


def _names(after: list[list[str]] | None, names: set[str]) -> bool:
    """Whether dependencies `after` name any of `names`."""
    return any(target in names for _, target in after or ())


#: Built once (building one costs about as much as running it): every job that ends looks for its dependents.
_WAITING_ON = (
    select(JobRow.id, JobRow.after)
    .where(JobRow.state.in_(("pending", "held")), JobRow.after.is_not(None), JobRow.id > bindparam("after_id"))
    .order_by(JobRow.id)
)
_DEPENDENTS = (
    select(JobRow).where(JobRow.id.in_(bindparam("ids", expanding=True))).order_by(JobRow.id).with_for_update()
)


def settle(s: Session, jobs: list[JobRow], now: float, cancel: Any) -> None:
    """`jobs` ended: cancel (through `cancel(s, dependent, message, now)`) each job whose dependencies can no
    longer be met, unless it keeps them; show the others what they still wait for."""
    if not jobs:
        return
    for dep in dependents(s, jobs):
        if dep.state not in ("pending", "held"):  # cancelled meanwhile, as a dependent of an earlier one
            continue
        verdict = evaluate(s, dep.after or ())
        if verdict.state == UNMET and not dep.keep_if_unmet:
            cancel(s, dep, f"cancelled: {verdict.message}", now)
        elif verdict.state != MET and dep.state == "pending":
            dep.reason, dep.reason_code = verdict.message, "dependency"
        elif dep.state == "pending":
            dep.reason, dep.reason_code = "dependencies met; waiting for the scheduler", "queued"
