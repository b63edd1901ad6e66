"""Routes for jobs: submit, list, show, cancel, hold, release, modify, top, requeue, logs."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query
from fastapi.responses import Response

from nanum.server.api import rendering
from nanum.server.auth import CallerDep, Context
from nanum.server.inputs import WHOLE, JobIdPath, KnownQuery
from nanum.server.job_schemas import JobOut, JobPatch, JobSubmit
from nanum.server.limits import FINISHED_SHOWN, MAX_FINISHED_SHOWN, MAX_OFFSET, MAX_STORED_ID
from nanum.server.services import accounts, control, jobs

router = APIRouter(prefix="/jobs", tags=["jobs"], route_class=KnownQuery)


@router.post("", status_code=201, response_model=JobOut)
def submit_job(body: JobSubmit, ctx: Context, caller: CallerDep) -> Response:
    """Queue a job. It starts when the scheduler admits it; a request that could never run is refused (400).
    A `client_request_id` this user already sent returns the job it made (200) instead of a second one."""
    accounts.refuse_root_jobs(ctx, caller)
    job, created = jobs.submit(ctx, caller, body)
    return rendering.json(job, 201 if created else 200)


@router.get("", response_model=list[JobOut])
def list_jobs(
    ctx: Context,
    caller: CallerDep,
    all: bool = False,
    user: Annotated[str | None, Query(max_length=64)] = None,
    lab: Annotated[str | None, Query(max_length=64)] = None,
    state: Annotated[list[str] | None, Query(max_length=16)] = None,
    array: Annotated[int | None, WHOLE,
                     Query(ge=0, le=MAX_STORED_ID, description="only the tasks of this array")] = None,
    limit: Annotated[int, WHOLE, Query(ge=1, le=MAX_FINISHED_SHOWN, description=(
        "of the finished jobs asked for, the latest this many (an array's: all)"))] = FINISHED_SHOWN,
) -> Response:
    """Active jobs of every user (with `all=true`, the latest `limit` finished ones too), ordered by id. `env` is
    shown only on the caller's own jobs (every job's, to an admin)."""
    found = jobs.list_jobs(ctx, caller, all=all or array is not None, user=user, lab=lab, states=state or (),
                           array=array, limit=limit)
    return rendering.json(found)


@router.get("/{job_id}", response_model=JobOut)
def get_job(job_id: JobIdPath, ctx: Context, caller: CallerDep) -> Response:
    return rendering.json(jobs.get_job(ctx, caller, job_id))


OneQuery = Annotated[bool, Query(description="an array's id: act on the task with this job id alone, not the array")]


@router.post("/{job_id}/cancel", response_model=JobOut)
def cancel_job(job_id: JobIdPath, ctx: Context, caller: CallerDep, one: OneQuery = False) -> Response:
    """Owner or admin only. A running job is stopped first and becomes `cancelled` once its process is gone.
    An array's id cancels all its tasks that have not ended."""
    return rendering.json(jobs.cancel(ctx, caller, job_id, one=one))


@router.post("/{job_id}/hold", response_model=JobOut)
def hold_job(job_id: JobIdPath, ctx: Context, caller: CallerDep, one: OneQuery = False) -> Response:
    """Owner or admin only: a pending job (an array's pending tasks) is kept from starting until released."""
    return rendering.json(control.hold(ctx, caller, job_id, one=one))


@router.post("/{job_id}/release", response_model=JobOut)
def release_job(job_id: JobIdPath, ctx: Context, caller: CallerDep, one: OneQuery = False) -> Response:
    """Owner or admin only: a held job (an array's held tasks) may be scheduled again."""
    return rendering.json(control.release(ctx, caller, job_id, one=one))


@router.patch("/{job_id}", response_model=JobOut)
def modify_job(job_id: JobIdPath, body: JobPatch, ctx: Context, caller: CallerDep) -> Response:
    """Owner or admin only, while the job waits: change its time limit, GPUs, priority, lab or name, and (admins
    only: 403 for anyone else) its tier. An owner's change is checked as a submission is; an admin's is not."""
    return rendering.json(control.modify(ctx, caller, job_id, body))


@router.post("/{job_id}/top", response_model=JobOut)
def top_job(job_id: JobIdPath, ctx: Context, caller: CallerDep, one: OneQuery = False) -> Response:
    """Owner or admin only: a waiting job (an array's waiting tasks) moves before its owner's other waiting
    jobs."""
    return rendering.json(control.top(ctx, caller, job_id, one=one))


@router.post("/{job_id}/requeue", response_model=JobOut)
def requeue_job(job_id: JobIdPath, ctx: Context, caller: CallerDep, one: OneQuery = False) -> Response:
    """Owner or admin only: a running job is stopped and queued again; an ended one is queued again. An array's
    id requeues all its tasks that run or ended."""
    return rendering.json(control.requeue(ctx, caller, job_id, one=one))


@router.post("/{job_id}/checkpoint", response_model=JobOut)
def checkpoint_job(job_id: JobIdPath, ctx: Context, caller: CallerDep) -> Response:
    """The running job has just saved its state (owner or admin): a preemption then loses only later work.
    Touching `$NANUM_CHECKPOINT_DIR/.checkpoint` inside the job says the same through its agent."""
    return rendering.json(jobs.checkpoint(ctx, caller, job_id))


@router.get("/{job_id}/logs", response_class=Response)
def job_logs(
    job_id: JobIdPath,
    ctx: Context,
    caller: CallerDep,
    offset: Annotated[int, WHOLE, Query(ge=0, le=MAX_OFFSET)] = 0,
    node: Annotated[str | None, Query(max_length=128, description=(
        "one node's output of a multi-node job: the node's name or its rank"))] = None,
) -> Response:
    """stdout and stderr from byte `offset`; `X-Nanum-Log-Offset` says where the next read starts. A multi-node
    job's log has every node's lines, each led by `[node]`; `node` picks one node's output alone.
    `X-Nanum-Log-Missing`, when there is one, counts the bytes of an ended job's output still on its node (they
    follow with its next heartbeats). `X-Nanum-Job-Ref` names the job as `nanum ps` does (`12_0` for an array's
    first task, which the array's id reads)."""
    got = jobs.read_logs(ctx, caller, job_id, offset, node)
    headers = {"X-Nanum-Log-Offset": str(got.next_offset), "X-Nanum-Job-State": got.state,
               "X-Nanum-Job-Ref": got.ref}
    if got.missing:
        headers["X-Nanum-Log-Missing"] = str(got.missing)
    return Response(got.data, media_type="text/plain; charset=utf-8", headers=headers)
