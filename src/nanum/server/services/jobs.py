"""Jobs as users see them: submit (refusing what could never run), list, show, cancel, and read logs."""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import PurePath
from typing import Any

from sqlalchemy import Select, bindparam, func, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from nanum.core import JobId, Limits, User, impossible
from nanum.core.bursts import BURST_GAP, joins
from nanum.jobfields import JobRequest
from nanum.jobref import ref_of
from nanum.server.arrays import parse_array
from nanum.server.callers import Caller
from nanum.server.context import ServerContext
from nanum.server.errors import ApiError, BadRequest, Conflict, Forbidden, NotFound
from nanum.server.job_schemas import ACTIVE_STATES, JOB_STATES, JobSubmit
from nanum.server.limits import FINISHED_SHOWN
from nanum.server.schemas import iso
from nanum.server.services import budgets, catalog, eligibility, environments, joblogs, jobusage, lifecycle, nodelogs
from nanum.server.views import core_job, job_out
from nanum.store import JobRow, LabRow, SegmentRow, UserRow, table

INSERT_JOB = table(JobRow).insert().returning(table(JobRow).c.id)
#: Statements of every submission, built once (building one costs about as much as running it).
_REQUESTED = select(JobRow.id).where(JobRow.user_id == bindparam("user"),
                                     JobRow.client_request_id == bindparam("request"))
_LATEST_ALIKE = (
    select(JobRow.id, JobRow.burst, JobRow.submit_time)
    .where(JobRow.user_id == bindparam("user"), JobRow.gpus == bindparam("gpus"), JobRow.nodes == bindparam("nodes"),
           JobRow.gpu_model.is_not_distinct_from(bindparam("model")), JobRow.name == bindparam("name"),
           JobRow.submit_time >= bindparam("since"))
    # By time alone, as the index (user, time) lists them, so that the scan stops at the first match: ordered by id
    # too, PostgreSQL sorted every job of the window (0.6 ms against 0.1 at 100 submissions a second). Of two alike
    # jobs submitted at the same instant, either is as good: the later one joined the earlier's burst.
    .order_by(JobRow.submit_time.desc())
    .limit(1)
)

#: The most log bytes one read returns; the reply's offset says where to continue.
LOG_CHUNK = 1 << 20


#: Submitted fields the service turns into other columns itself (`_row_values`); every other one is stored as
#: sent, in the JobRow column of its name.
_NOT_AS_SENT = frozenset({"lab", "array", "after", "after_ok", "after_failed", "after_any", "environment",
                          "datasets"})
_AS_SENT = frozenset(k for k in JobRequest.__annotations__ if k in table(JobRow).columns and k not in _NOT_AS_SENT)


def submit(ctx: ServerContext, caller: Caller, spec: JobSubmit) -> tuple[dict[str, Any], bool]:
    """Queue a job for `caller`; returns it and whether it is new. Raises BadRequest when no node or limit could
    ever satisfy it. A `client_request_id` the caller already used returns that job, not new: the UNIQUE
    (user_id, client_request_id) refuses the second insert (also of two such requests at once), and the loser
    returns the winner's. A retry is looked up only once refused, so a first submission reads nothing more; a
    retry refused by a check the first one passed (its dependency has failed since, say) returns the job too."""
    request_id = spec.request["client_request_id"]
    try:
        return _submit(ctx, caller, spec), True
    except (IntegrityError, ApiError):
        first = _requested(ctx, caller, request_id) if request_id is not None else None
        if first is None:
            raise
        return first, False


def _submit(ctx: ServerContext, caller: Caller, spec: JobSubmit) -> dict[str, Any]:
    request = spec.request
    refuse_tier(caller, request["tier"], 0)
    lab = lab_for(ctx, caller, request["lab"])
    now = ctx.clock()
    tasks, limit = parse_array(request["array"]) if request["array"] is not None else ([], None)
    values = _row_values(request, caller, lab.id, now) | {"after": spec.dependencies() or None, "array_limit": limit}
    row = JobRow(**values)
    refuse_impossible(ctx, row, caller, lab.lab.name)
    values.update(environments.for_job(ctx, caller, lab.id, request["environment"], request["datasets"]))
    row.environment, row.environment_spec, row.datasets = (
        values["environment"], values["environment_spec"], values["datasets"])
    with ctx.db.write() as s:
        _refuse_over_cap(ctx, s, caller, max(len(tasks), 1))
        if row.after:
            _wait_reason(s, values, row.after)
        if request["hold"]:  # after the dependencies' reason: held says what the job waits for first
            values["state"], values["reason_code"] = row.state, row.reason_code = "held", "held"
        values["burst"] = row.burst = _burst(s, row)
        environments.count_uses(s, values, max(len(tasks), 1))
        if tasks:
            _insert_array(s, row, values, tasks, limit)
        else:
            row.id = s.connection().execute(INSERT_JOB, values).scalar_one()
        if request["hold"]:
            _held_reason(s, row, caller)
        lifecycle.event(s, row.id, now, "submitted", f"by {caller.name}" + (
            f" as array {row.id} of {len(tasks)} tasks ({request['array']})" if tasks else "")
            + (" (held)" if request["hold"] else ""))
    ctx.signals.poke(new_gpu_job=request["gpus"] > 0)
    return job_out(row, caller.name, lab.lab.name)


def held_reason(by: str, job_id: int, when: str = "") -> str:
    """Why a held job waits, and how to let it run: `held by alice; nanum release 12 lets it run`."""
    return f"held by {by}{when}; `nanum release {job_id}` lets it run"


def _held_reason(s: Session, row: JobRow, caller: Caller) -> None:
    """The reason of a job (an array's tasks) submitted held, naming its id now that it has one."""
    row.reason = held_reason(caller.name, row.id, " at submission")
    jobs_table = table(JobRow)
    which = jobs_table.c.array_id == row.id if row.array_id is not None else jobs_table.c.id == row.id
    s.connection().execute(jobs_table.update().where(which).values(reason=row.reason))


#: The caller's jobs waiting, held or running, counted through (user_id, state).
_ACTIVE_OF_USER = select(func.count()).where(JobRow.user_id == bindparam("user"), JobRow.state.in_(ACTIVE_STATES))
#: A count of a user's jobs lets this many more submissions through uncounted (fewer where the cap is nearer):
#: counting at every one cost a submission a twentieth more CPU. Servers sharing a database each let as many
#: through, so a user may pass the cap by that many per server process.
ROOM_UNCOUNTED = 1_000


def _refuse_over_cap(ctx: ServerContext, s: Session, caller: Caller, adding: int) -> None:
    """Refuse `adding` more jobs where the caller would then have more than the server's `max_jobs_per_user`
    waiting, held or running (Slurm's MaxSubmitJobs): one person's flood of jobs makes every scheduling cycle and
    listing slower for everyone (100,000 waiting jobs took the scheduler 0.7 s a cycle)."""
    cap, room = ctx.settings.max_jobs_per_user, ctx.caches.room
    if adding > cap:
        raise Conflict(f"an array of {adding:,} tasks is more than the {cap:,} jobs one user may have waiting or "
                       "running (the server's --max-jobs-per-user); submit it in parts")
    left = room.get(caller.id, 0)
    if left >= adding:
        room[caller.id] = left - adding
        return
    active = s.connection().execute(_ACTIVE_OF_USER, {"user": caller.id}).scalar_one()
    free = cap - active
    if adding > free:
        room.pop(caller.id, None)
        raise Conflict(f"user {caller.name} has {active:,} jobs waiting or running; {adding:,} more would pass the "
                       f"{cap:,} one user may have (the server's --max-jobs-per-user): "
                       + (f"submit at most {free:,} now, or " if free > 0 else "")
                       + "wait for some to end, or cancel some (nanum cancel)")
    room[caller.id] = min(free - adding, ROOM_UNCOUNTED)


def _row_values(request: JobRequest, caller: Caller, lab_id: int, now: float) -> dict[str, Any]:
    """A new job's columns: the fields submitted as sent, the defaults that depend on others, and its first
    state (pending, queued)."""
    values: dict[str, Any] = {key: value for key, value in request.items() if key in _AS_SENT}
    kind = request["kind"]
    values.update(
        name=request["name"] or PurePath(request["command"][0]).name,
        workdir=request["workdir"] or "~",
        constraints=sorted(set(request["constraints"])) or None,
        preemptible=request["preemptible"] if request["preemptible"] is not None else kind == "batch",
        session_secret=secrets.token_urlsafe(32) if kind in ("notebook", "shell") else None,
        user_id=caller.id, lab_id=lab_id, state="pending", reason="waiting for the scheduler", reason_code="queued",
        borrowing=False, allocation=[], submit_time=now, runs=0, attained_gpu_seconds=0.0,
    )
    return values


def _wait_reason(s: Session, values: dict[str, Any], after: list[list[str]]) -> None:
    """A new job's dependencies: refused when one can never be met (unless kept), else its first reason."""
    verdict = eligibility.evaluate(s, after)
    if verdict.state == eligibility.UNMET and not values["keep_if_unmet"]:
        raise BadRequest(f"this job's {verdict.message}; name another job, or add --keep-if-unmet to queue it anyway")
    if verdict.state != eligibility.MET:
        values["reason"], values["reason_code"] = verdict.message, "dependency"


def _insert_array(s: Session, row: JobRow, values: dict[str, Any], tasks: list[int], limit: int | None) -> None:
    """Insert every task of an array in one statement after the first, whose job id becomes the array's id."""
    conn = s.connection()
    first = {**values, "array_task": tasks[0], "name": values["name"]}
    row.id = conn.execute(INSERT_JOB, first).scalar_one()
    jobs_table = table(JobRow)
    conn.execute(jobs_table.update().where(jobs_table.c.id == row.id).values(array_id=row.id))
    row.array_id, row.array_task = row.id, tasks[0]
    burst = row.burst if row.burst is not None else row.id
    throttled = eligibility.throttle_reason(row.id, limit) if limit is not None else None
    rest = []
    for n, task in enumerate(tasks[1:], start=1):
        task_values = {**values, "array_id": row.id, "array_task": task, "burst": burst, "client_request_id": None}
        if throttled is not None and n >= limit and values["reason_code"] == "queued":  # type: ignore[operator]
            task_values["reason"], task_values["reason_code"] = throttled, "array_limit"
        rest.append(task_values)
    if rest:
        conn.execute(jobs_table.insert(), rest)


def _requested(ctx: ServerContext, caller: Caller, request_id: str) -> dict[str, Any] | None:
    """The caller's job submitted with `request_id`, as `get_job` shows it; None when there is none."""
    with ctx.db.read() as s:
        found = s.connection().execute(_REQUESTED, {"user": caller.id, "request": request_id}).scalar()
    return None if found is None else get_job(ctx, caller, found)


def _burst(s: Session, row: JobRow) -> int | None:
    """The burst `row` joins, by the core's rule (`nanum.core.bursts.joins`) applied to its user's latest job with
    the same request (`nanum.core.bursts.request`: GPUs, nodes, GPU model, name); only jobs within BURST_GAP are
    read, since no older one can be joined."""
    last = s.connection().execute(_LATEST_ALIKE, {
        "user": row.user_id, "gpus": row.gpus, "nodes": row.nodes, "model": row.gpu_model, "name": row.name,
        "since": row.submit_time - BURST_GAP}).first()
    found = None if last is None else (JobId(last.id), None if last.burst is None else JobId(last.burst),
                                       float(last.submit_time))
    burst = joins(found, row.submit_time)
    return None if burst is None else int(burst)


def lab_for(ctx: ServerContext, caller: Caller, name: str | None) -> catalog.LabEntry:
    name = name or caller.default_lab
    if name is None:
        raise BadRequest(f"user {caller.name} belongs to no lab; pass --lab or ask an admin to add you to one")
    labs = catalog.labs(ctx)
    entry = labs.get(name)
    if entry is None:
        ctx.caches.forget_labs()
        entry = catalog.labs(ctx).get(name)
    if entry is None:
        raise NotFound(f"no lab named {name}")
    if not caller.admin and name not in caller.labs:
        raise Forbidden(f"user {caller.name} is not a member of lab {name}")
    return entry


def refuse_tier(caller: Caller, tier: int, current: int) -> None:
    """Only admins put a job in a tier other than the one it has (0 for a new job): the tier outranks every
    user's priority in every queue order."""
    if tier != current and not caller.admin:
        raise Forbidden(f"only an admin may set a job's tier; ask an admin to run `nanum modify ID --tier {tier}` "
                        "once the job is queued, or leave the tier out")


def refuse_impossible(ctx: ServerContext, row: JobRow, caller: Caller, lab: str) -> None:
    nodes = catalog.nodes(ctx)
    if not nodes:
        return  # no node has reported yet: accept, the job waits for one
    labs = {name: entry.lab for name, entry in catalog.labs(ctx).items()}
    users = {caller.name: User(name=caller.name, limits=Limits(max_gpus=caller.max_gpus))}
    reason = impossible(core_job(row, caller.name, lab), nodes, labs, ctx.policy.lend, users)
    if reason is not None:
        raise BadRequest(f"this job can never run: {reason.message}")


# -- reading ---------------------------------------------------------------------------------------------------


def _select() -> Select[Any]:
    """Jobs as plain rows (every column, then the user's and the lab's names): cheaper than ORM objects."""
    return (
        select(JobRow.__table__, UserRow.name.label("user_name"), LabRow.name.label("lab_name"))
        .join(UserRow, UserRow.id == JobRow.user_id)
        .join(LabRow, LabRow.id == JobRow.lab_id)
    )


def list_jobs(
    ctx: ServerContext,
    caller: Caller,
    *,
    all: bool = False,
    user: str | None = None,
    lab: str | None = None,
    states: Sequence[str] = (),
    array: int | None = None,
    limit: int = FINISHED_SHOWN,
) -> list[dict[str, Any]]:
    """Jobs by id: every active one asked for, and of the finished ones asked for (`all`, or finished `states`)
    the latest `limit` (an array's tasks, at most `MAX_ARRAY_TASKS`, all of them)."""
    unknown = sorted(set(states) - set(JOB_STATES))
    if unknown:
        raise BadRequest(f"unknown job state {unknown[0]}; choose from {', '.join(JOB_STATES)}")
    wanted = list(states) if states else list(JOB_STATES) if all else list(ACTIVE_STATES)
    active = [state for state in wanted if state in ACTIVE_STATES]
    finished = [state for state in wanted if state not in ACTIVE_STATES]
    query = _select()
    if user:
        query = query.where(UserRow.name == user)
    if lab:
        query = query.where(LabRow.name == lab)
    if array is not None:
        query = query.where(JobRow.array_id == array)
    parts = [query.where(JobRow.state.in_(active)).order_by(JobRow.id)] if active else []
    if finished:
        last = query.where(JobRow.state.in_(finished)).order_by(JobRow.id.desc())
        parts.append(last if array is not None else last.limit(limit))
    # Both parts of one moment: a job that ends between them is in one, never both or neither.
    with ctx.db.read(one_moment=len(parts) > 1) as s:
        rows = sorted((row for part in parts for row in s.connection().execute(part)), key=lambda row: row.id)
        out = [_shown(job_out(row, row.user_name, row.lab_name), row, caller) for row in rows]
        eligibility.annotate(s, out)
    return jobusage.attach(ctx, with_predictions(ctx, _with_budget_warnings(ctx, out)))


def _shown(out: dict[str, Any], row: Any, caller: Caller) -> dict[str, Any]:
    """`out` as `caller` may see it: a job's environment (where people keep API keys) is its owner's and admins'
    alone; others get null."""
    if not caller.may_manage(row.user_id, row.lab_id):
        out["env"] = None
    return out


def get_job(ctx: ServerContext, caller: Caller, job_id: int) -> dict[str, Any]:
    """One job, with its allocations so far (`segments`), as `caller` may see it."""
    with ctx.db.read() as s:
        found = s.connection().execute(_select().where(JobRow.id == job_id)).first()
        if found is None:
            raise NotFound(f"no job {job_id}")
        segments = (
            s.execute(select(SegmentRow).where(SegmentRow.job_id == job_id).order_by(SegmentRow.start)).scalars().all()
        )
        out = _shown(job_out(found, found.user_name, found.lab_name), found, caller)
        eligibility.annotate(s, [out])
    out["segments"] = [segment_out(seg) for seg in segments]
    if found.state == "running" and found.start_time is not None:
        since = found.charged_until or found.start_time
        out["segments"].append(_running_segment(found, since, ctx.clock()))
    return jobusage.attach(ctx, with_predictions(ctx, _with_budget_warnings(ctx, [out])))[0]


def segment_out(seg: SegmentRow) -> dict[str, Any]:
    return {
        "start": iso(seg.start),
        "end": iso(seg.end),
        "gpus": seg.gpus,
        "gpu_hours": round(seg.gpus * (seg.end - seg.start) / 3600.0, 6),
        "outcome": seg.outcome,
        "wait_s": None if seg.wait_s is None else round(seg.wait_s, 3),
        "lost_gpu_hours": round(seg.lost_gpu_seconds / 3600.0, 6),
    }


def _running_segment(row: Any, since: float, now: float) -> dict[str, Any]:
    gpus = row.gpus * row.nodes
    fresh = since == row.start_time
    return {
        "start": iso(since),
        "end": None,
        "gpus": gpus,
        "gpu_hours": round(gpus * max(now - since, 0.0) / 3600.0, 6),
        "outcome": "running",
        "wait_s": round(row.start_time - (row.queued_at or row.submit_time), 3) if fresh else None,
        "lost_gpu_hours": 0.0,
    }


def _with_budget_warnings(ctx: ServerContext, jobs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    found = budgets.status(ctx)
    if found:
        for job in jobs:
            job["budget_warning"] = budgets.warning_for(found, job["user"], job["lab"], ctx.clock())
    return jobs


def with_predictions(ctx: ServerContext, jobs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Pending and running jobs' run-time predictions as the last scheduling tick made them."""
    predictions = ctx.predictions
    for job in jobs:
        found = predictions.get(job["id"]) if job["state"] in ("pending", "running") else None
        if found is not None:
            job["predicted_runtime_s"] = None if found.seconds is None else round(found.seconds, 3)
            job["prediction_basis"] = found.basis
    return jobs


# -- cancel ----------------------------------------------------------------------------------------------------


def cancel(ctx: ServerContext, caller: Caller, job_id: int, *, one: bool = False) -> dict[str, Any]:
    """Pending: cancelled at once. Running: stopped on its nodes, cancelled when they report it gone.
    An array's id cancels every task of it that has not ended (`one`: only the task with that job id)."""
    now = ctx.clock()
    woken: set[str] = set()
    with ctx.db.write() as s:
        for job in owned_jobs(s, caller, job_id, one=one, active=True):
            woken |= _cancel(s, job, caller, now)
    ctx.signals.wake(woken)
    ctx.signals.poke()
    return get_job(ctx, caller, job_id)


def owned_jobs(s: Session, caller: Caller, job_id: int, *, one: bool = False, active: bool = False) -> list[JobRow]:
    """Job `job_id`, locked; when it is an array's id (and not `one`), every task of the array instead (those not
    ended, when `active`). Raises NotFound or Forbidden as `_owned` does."""
    job = _owned(s, caller, job_id, lock=True)
    if one or job.array_id != job.id:
        return [job]
    query = select(JobRow).where(JobRow.array_id == job.id).order_by(JobRow.id).with_for_update()
    if active:
        query = query.where(JobRow.state.in_(ACTIVE_STATES))
    tasks = list(s.scalars(query))
    return tasks or [job]


def ref(job: JobRow) -> str:
    """The job as its owner names it, `12_7` for an array's task (`nanum.jobref.ref_of`)."""
    return ref_of(job.id, job.array_id, job.array_task)


def _owned(s: Session, caller: Caller, job_id: int, *, lock: bool = False) -> JobRow:
    query = select(JobRow).where(JobRow.id == job_id)
    job = s.scalars(query.with_for_update() if lock else query).first()
    if job is None:
        raise NotFound(f"no job {job_id}")
    if not caller.may_manage(job.user_id, job.lab_id):
        raise Forbidden(f"job {job_id} belongs to another user; only its owner, a manager of its lab or an admin "
                        "may do that")
    return job


def _cancel(s: Session, job: JobRow, caller: Caller, now: float) -> set[str]:
    if job.state in lifecycle.FINISHED:
        raise Conflict(f"job {ref(job)} already ended ({job.state})")
    message = f"cancelled by {caller.name}"
    if job.state != "running":
        lifecycle.cancel_waiting(s, job, message, now)
        return set()
    job.reason = message
    return lifecycle.request_stop(s, job, "cancel", now, message)


# -- checkpoints -----------------------------------------------------------------------------------------------


def checkpoint(ctx: ServerContext, caller: Caller, job_id: int) -> dict[str, Any]:
    """The job (owner or admin) says it has just saved its state: a later preemption loses only what follows."""
    now = ctx.clock()
    with ctx.db.write() as s:
        job = _owned(s, caller, job_id, lock=True)
        if job.state != "running":
            raise Conflict(f"job {ref(job)} is {job.state}, not running; only a running job can checkpoint")
        job.last_checkpoint = now
    return get_job(ctx, caller, job_id)


# -- logs ------------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class LogSlice:
    data: bytes
    next_offset: int
    state: str
    missing: int  # bytes of the ended job's output still on its node(s) (`joblogs.missing_bytes`)
    ref: str  # the job as its owner names it (`ref`)


def read_logs(ctx: ServerContext, caller: Caller, job_id: int, offset: int, node: str | None = None) -> LogSlice:
    with ctx.db.read() as s:
        job = _owned(s, caller, job_id)
        state, gang, named = job.state, job.nodes > 1, ref(job)
        nodes = [str(a["node"]) for a in job.allocation or ()]
        if node is not None:
            nodes = [nodelogs.node_of(job.allocation, node)]
    logs = ctx.settings.logs_dir
    # Looked at before the read: what arrives between is read too.
    missing = joblogs.missing_bytes(logs, [nodelogs.stem(job_id, n, gang) for n in nodes] or [str(job_id)])
    stem = str(job_id) if node is None else nodelogs.stem(job_id, nodes[0], gang)
    try:
        with open(logs / f"{stem}.log", "rb") as f:
            f.seek(max(offset, 0))
            data = f.read(LOG_CHUNK)
    except FileNotFoundError:
        data = b""
    return LogSlice(data, max(offset, 0) + len(data), state, missing, named)
