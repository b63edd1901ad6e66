"""Notebooks and shells as their owners reach them: who may, and where the job's end of the link is.

Only a job's owner may open its notebook or its shell (not even an admin: a notebook holds its owner's files and
credentials, and acting in it acts as them). A shell's relay proves it is the job's own with the job's secret.
"""

from __future__ import annotations

import hmac
from dataclasses import dataclass

from nanum.server.callers import Caller
from nanum.server.context import ServerContext
from nanum.server.errors import ApiError, Conflict, Forbidden, NotFound, Unauthorized
from nanum.store import JobRow

__all__ = ["NotReady", "Target", "notebook", "relay_job", "shell_job"]


class NotReady(ApiError):
    """The notebook is not listening yet (`starting`: it runs, and JupyterLab should answer soon) or any more."""

    status = 503

    def __init__(self, detail: str, starting: bool = False) -> None:
        super().__init__(detail)
        self.starting = starting


@dataclass(frozen=True, slots=True)
class Target:
    """Where the proxy sends a notebook's traffic, and the token it adds."""

    address: str
    secret: str


def notebook(ctx: ServerContext, caller: Caller, job_id: int) -> Target:
    """The running notebook `job_id` of `caller`, or NotFound / Forbidden / NotReady."""
    job = _owned(ctx, caller, job_id, "notebook")
    if job.state != "running" or not job.session_address or not job.session_secret:
        what = "has not started its JupyterLab yet; try again in a few seconds" if job.state == "running" else (
            f"is {job.state}, not running")
        raise NotReady(f"notebook {job_id} {what}", starting=job.state == "running")
    return Target(job.session_address, job.session_secret)


def shell_job(ctx: ServerContext, caller: Caller, job_id: int) -> None:
    """Check that `caller` may open the shell of job `job_id`, which must be running."""
    job = _owned(ctx, caller, job_id, "shell")
    if job.state != "running":
        raise Conflict(f"shell {job_id} is {job.state}; `nanum shell` waits for its allocation before connecting")


def owned_shell(ctx: ServerContext, caller: Caller, job_id: int) -> None:
    """Check that shell job `job_id` (in any state) is `caller`'s, or NotFound/Forbidden."""
    _owned(ctx, caller, job_id, "shell")


def relay_job(ctx: ServerContext, job_id: int, secret: str) -> None:
    """Check that `secret` is the running shell job `job_id`'s own (what its relay shows), or Unauthorized."""
    with ctx.db.read() as s:
        job = s.get(JobRow, job_id)
        known = job.session_secret if job is not None and job.kind == "shell" and job.state == "running" else None
    if not known or not hmac.compare_digest(known.encode(), secret.encode()):
        raise Unauthorized(f"this is not the relay of running shell {job_id}")


def _owned(ctx: ServerContext, caller: Caller, job_id: int, kind: str) -> JobRow:
    with ctx.db.read() as s:
        job = s.get(JobRow, job_id)
        if job is not None:
            s.expunge(job)
    if job is None or job.kind != kind:
        raise NotFound(f"there is no {kind} {job_id}; `nanum {kind} list` shows yours" if kind == "notebook"
                       else f"there is no {kind} {job_id}")
    if job.user_id != caller.id:
        raise Forbidden(f"{kind} {job_id} is another user's; only its owner may open it")
    return job
