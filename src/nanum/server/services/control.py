"""Changing a job after it was submitted: hold and release, modify while it waits, move it to the top of its
owner's jobs, and requeue it.

Owners act on their own jobs, admins on anyone's (`jobs.owned_jobs`); an array's id acts on every task of the
array, `one=True` on the single job with that id. A modified request is checked as a submitted one is: an owner
gets only what they could have submitted (a lab they belong to, a request some node could ever run, the tier it
has); an admin may set anything.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from nanum.jobfields import CLEARED_BY_NULL, JobChanges, change_text
from nanum.server.callers import Caller
from nanum.server.context import ServerContext
from nanum.server.errors import Conflict
from nanum.server.job_schemas import JobPatch
from nanum.server.services import jobs, lifecycle
from nanum.store import JobRow

WAITING = ("pending", "held")


def hold(ctx: ServerContext, caller: Caller, job_id: int, *, one: bool = False) -> dict[str, Any]:
    """Keep pending jobs from starting until released; running and ended ones are refused."""
    now = ctx.clock()
    with ctx.db.write() as s:
        targets = jobs.owned_jobs(s, caller, job_id, one=one, active=True)
        _refuse_unless(targets, ("pending", "held"), job_id, "held", "cancel it, or requeue it once it ends")
        for job in targets:
            if job.state == "pending":
                job.state, job.reason_code, job.estimated_start = "held", "held", None
                job.reason = jobs.held_reason(caller.name, job.id)
                lifecycle.event(s, job.id, now, "held", f"by {caller.name}")
    return jobs.get_job(ctx, caller, job_id)


def release(ctx: ServerContext, caller: Caller, job_id: int, *, one: bool = False) -> dict[str, Any]:
    """Let held jobs be scheduled again (in their original place in the queue)."""
    now = ctx.clock()
    with ctx.db.write() as s:
        targets = jobs.owned_jobs(s, caller, job_id, one=one, active=True)
        _refuse_unless(targets, ("held",), job_id, "released", "only a held job can be released")
        for job in targets:
            if job.state == "held":
                job.state, job.reason, job.reason_code = "pending", "released; waiting for the scheduler", "queued"
                lifecycle.event(s, job.id, now, "released", f"by {caller.name}")
    ctx.signals.poke()
    return jobs.get_job(ctx, caller, job_id)


def _refuse_unless(targets: list[JobRow], states: tuple[str, ...], job_id: int, verb: str, fix: str) -> None:
    if not any(job.state in states for job in targets):
        raise Conflict(f"{_is(targets, job_id)} and cannot be {verb}; {fix}")


def _is(targets: list[JobRow], job_id: int) -> str:
    """What the jobs an action found are, named as their owner names them: `job 12_7 is running`, or for an
    array's tasks `array 12's tasks are running, completed`."""
    if len(targets) > 1:
        return f"array {job_id}'s tasks are {', '.join(dict.fromkeys(t.state for t in targets))}"
    return f"job {jobs.ref(targets[0])} is {targets[0].state}"


def modify(ctx: ServerContext, caller: Caller, job_id: int, patch: JobPatch) -> dict[str, Any]:
    """Change a waiting (pending or held) job's time limit, request (GPUs, nodes, GPU model and memory, node
    labels, CPUs, memory), priority, lab or name, and as an admin its tier (`jobs.refuse_tier`)."""
    changes = patch.changes
    lab = jobs.lab_for(ctx, caller, changes["lab"]) if changes.get("lab") is not None else None
    now = ctx.clock()
    with ctx.db.write() as s:
        targets = jobs.owned_jobs(s, caller, job_id, active=True)
        waiting = [job for job in targets if job.state in WAITING]  # an array's running tasks stay as they are
        if not waiting:
            raise Conflict(f"{_is(targets, job_id)}; only a pending or held job can be modified")
        for job in waiting:
            if (tier := changes.get("tier")) is not None:
                jobs.refuse_tier(caller, tier, job.tier)
            _apply(job, changes, lab.id if lab is not None else None)
            if not caller.admin:
                jobs.refuse_impossible(ctx, job, caller, lab.lab.name if lab is not None else _lab_name(ctx, job))
            lifecycle.event(s, job.id, now, "modified", f"by {caller.name}: {_said(changes)}")
    ctx.signals.poke()
    return jobs.get_job(ctx, caller, job_id)


def _apply(job: JobRow, changes: JobChanges, lab_id: int | None) -> None:
    for key, value in changes.items():
        if key == "constraints":
            job.constraints = sorted(set(changes["constraints"] or ())) or None  # as a submission stores them
        elif key != "lab" and (value is not None or key in CLEARED_BY_NULL):
            setattr(job, key, value)
    if lab_id is not None:
        job.lab_id = lab_id


def _said(changes: JobChanges) -> str:
    """The changes as the job's event says them: `gpus 2, gpu_model any, constraints net=ib`."""
    return ", ".join(f"{k} {change_text(k, v)}" for k, v in changes.items())


def _lab_name(ctx: ServerContext, job: JobRow) -> str:
    from nanum.server.services import catalog

    return next((name for name, e in catalog.labs(ctx).items() if e.id == job.lab_id), "")


def top(ctx: ServerContext, caller: Caller, job_id: int, *, one: bool = False) -> dict[str, Any]:
    """Move waiting jobs (an array's waiting tasks, in their order) before their owner's other waiting jobs of
    their tier: their earliest queue time and highest priority. A job an admin put in a higher tier stays ahead
    (tiers come first in every order)."""
    now = ctx.clock()
    with ctx.db.write() as s:
        targets = jobs.owned_jobs(s, caller, job_id, one=one, active=True)
        waiting = [job for job in targets if job.state in WAITING]
        if not waiting:
            raise Conflict(f"{_is(targets, job_id)}; only a pending or held job can be moved to the top")
        # The jobs moved are left out of those they move before: one array's tasks by their array, however many.
        whole = not one and (len(targets) > 1 or targets[0].array_id == job_id)
        others = JobRow.array_id.is_distinct_from(job_id) if whole else JobRow.id != waiting[0].id
        ahead = _owner_queue(s, waiting[0].user_id, others)
        for job in waiting:  # in id order: ties in every order go to the lower id, so the tasks keep theirs
            if job.tier in ahead:
                first, highest = ahead[job.tier]
                job.submit_time = min(job.submit_time, first - 0.001)
                job.priority = max(job.priority, highest)
        lifecycle.events(s, [(job.id, now, "top", f"moved before {caller.name}'s other waiting jobs of tier {job.tier}")
                             for job in waiting])
    ctx.signals.poke()
    return jobs.get_job(ctx, caller, job_id)


def _owner_queue(s: Session, user_id: int, others: Any) -> dict[int, tuple[float, int]]:
    """By tier, the earliest submit time and the highest priority among the owner's other waiting jobs (those
    `others` picks); a tier with none is left out."""
    query = (select(JobRow.tier, func.min(JobRow.submit_time), func.max(JobRow.priority))
             .where(JobRow.user_id == user_id, JobRow.state.in_(WAITING), others).group_by(JobRow.tier))
    return {tier: (first, highest) for tier, first, highest in s.execute(query)}


def requeue(ctx: ServerContext, caller: Caller, job_id: int, *, one: bool = False) -> dict[str, Any]:
    """Running jobs are stopped and queued again; ended ones are queued again as they were submitted. For an
    array's id, every task that runs or ended; those still waiting stay as they are."""
    now = ctx.clock()
    woken: set[str] = set()
    with ctx.db.write() as s:
        targets = jobs.owned_jobs(s, caller, job_id, one=one)
        again = [job for job in targets if job.state == "running" or job.state in lifecycle.FINISHED]
        if not again:
            raise Conflict(f"{_is(targets, job_id)}, not running or ended; "
                           f"{'they are' if len(targets) > 1 else 'it is'} already waiting to run")
        ended = []
        for job in again:
            if job.state == "running":
                job.reason = f"by {caller.name}"
                woken |= lifecycle.request_stop(s, job, "requeue", now, f"requeue requested by {caller.name}")
            else:
                job.state, job.end_time, job.exit_code, job.queued_at = "pending", None, None, now
                job.reason, job.reason_code = f"requeued by {caller.name}; waiting to run again", "queued"
                ended.append((job.id, now, "requeued", f"by {caller.name}"))
        lifecycle.events(s, ended)
    ctx.signals.wake(woken)
    ctx.signals.poke()
    return jobs.get_job(ctx, caller, job_id)
