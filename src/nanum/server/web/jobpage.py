"""The job page: state history, allocation, GPU utilisation chart, live log tail, cancel (and release, while it is
held) for its owner or an admin, and "Open notebook" for the owner of a running notebook; its JSON for live
updates."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Form, Query, Request
from fastapi.responses import JSONResponse, RedirectResponse, Response
from starlette.concurrency import run_in_threadpool

from nanum.predicted import prediction_text
from nanum.server.callers import Caller
from nanum.server.context import ServerContext
from nanum.server.errors import ApiError, NotFound
from nanum.server.inputs import JobIdPath
from nanum.server.limits import MAX_OFFSET
from nanum.server.services import control, jobs
from nanum.server.web import charts, data, session
from nanum.server.web.render import clock, clock_s, duration, page

router = APIRouter(include_in_schema=False)
WebCaller = Annotated[Caller, Depends(session.caller)]

LogOffset = Annotated[int, Query(ge=0, le=MAX_OFFSET)]
FINISHED = ("completed", "failed", "cancelled", "timeout")
#: States in which a job holds no GPU: what it held and when it started belong to an earlier run, if any.
WAITING = ("pending", "held")


def chart(found: data.JobPage) -> charts.Timeline:
    points, start, end = data.timeline_points(found, time.time())
    return charts.timeline(points, start, end, found.usage.get("gpu_memory_mb"))


def job_json(found: data.JobPage, who: Caller) -> dict[str, Any]:
    job, now, usage = found.job, time.time(), found.usage
    line = chart(found)
    return {
        "id": job["id"],
        "state": job["state"],
        "finished": job["state"] in FINISHED,
        "reason": job["reason"] or "",
        "runtime": duration((job["end_time"] or now) - job["start_time"])
        if job["start_time"] and job["state"] not in WAITING else "",
        "ended": clock(job["end_time"]) or "–",
        "util": "–" if usage.get("gpu_util") is None else f"{usage['gpu_util']:.0f}%",
        "util_avg": "–" if usage.get("gpu_util_avg") is None else f"{usage['gpu_util_avg']:.0f}%",
        "idle": usage.get("idle"),
        "events": [{"time": clock_s(e["time"]), "kind": e["kind"], "message": e["message"]} for e in found.events],
        "chart": {"util": line.util, "memory": line.memory, "empty": line.empty},
        "log": found.log,
        "log_offset": found.log_offset,
        "may_cancel": found.may_manage and job["state"] not in FINISHED,
        "waiting": _waiting_note(job),
        "allocation": [{"node": a["node"], "gpus": ", ".join(map(str, a["gpus"]))} for a in job["allocation"] or ()],
        "started": clock(job["start_time"]) or "–",
        "prediction": prediction_text(job, duration) or "",
        "notebook": notebook_url(job, who),
    }


def notebook_url(job: dict[str, Any], who: Caller) -> str:
    """Where the owner opens a running notebook (the proxy, `nanum.server.api.sessions`); empty otherwise: the
    proxy lets no one else in, and has nothing to show before the job runs."""
    if job["kind"] != "notebook" or job["state"] != "running" or job["user_id"] != who.id:
        return ""
    return f"/notebooks/{job['id']}/lab"


def _waiting_note(job: dict[str, Any]) -> dict[str, str] | None:
    """For a job back in the queue (preempted, lost, held): its allocation and start are those of its last run."""
    if job["state"] not in WAITING:
        return None
    where = "; ".join(f"{a['node']} GPU {', '.join(map(str, a['gpus']))}" for a in job["allocation"])
    return {
        "allocation": f"– (waiting; last ran on {where})" if where else "–",
        "started": f"– (last run started {clock(job['start_time'])})" if job["start_time"] else "–",
    }


#: How often the page shown while a notebook starts asks for it again, in seconds.
NOTEBOOK_RETRY_S = 3


def notebook_starting(request: Request, who: Caller, job_id: int, detail: str) -> Response:
    """What a browser sees at `/notebooks/ID/` while the notebook runs but JupyterLab does not answer yet: the
    reason, and a `Refresh` that loads the notebook by itself once it does (503 until then)."""
    message = f"{detail[:1].upper()}{detail[1:]}. This page tries again every {NOTEBOOK_RETRY_S} seconds."
    response = page(request, "error.html", who, status_code=503, title="Notebook starting", message=message,
                    back=(f"/jobs/{job_id}", f"Back to job {job_id}"))  # fmt: skip
    response.headers["Refresh"] = str(NOTEBOOK_RETRY_S)
    return response


@router.get("/jobs/{job_id}")
async def job_page(request: Request, job_id: JobIdPath, who: WebCaller) -> Response:
    return await _render(request, who, job_id)


async def _render(request: Request, who: Caller, job_id: int, error: str | None = None, status: int = 200) -> Response:
    try:
        found = await run_in_threadpool(data.job_page, request.app.state.ctx, who, job_id)
    except NotFound as exc:
        return page(request, "error.html", who, status_code=404, title="No such job", message=exc.detail)
    return page(
        request, "job.html", who, status_code=status, title=f"Job {job_id}", p=found, j=job_json(found, who),
        chart=chart(found), error=error,
    )  # fmt: skip


@router.get("/ui/jobs/{job_id}.json")
async def job_live(request: Request, job_id: JobIdPath, who: WebCaller, log: LogOffset = 0) -> Response:
    try:
        found = await run_in_threadpool(data.job_page, request.app.state.ctx, who, job_id, log)
    except NotFound as exc:
        return JSONResponse({"detail": exc.detail}, status_code=404)
    return JSONResponse(job_json(found, who), headers={"Cache-Control": "no-store"})


@router.post("/jobs/{job_id}/cancel")
async def cancel(request: Request, job_id: JobIdPath, who: WebCaller, csrf: Annotated[str, Form()] = "") -> Response:
    """Owner or admin: stop the job. Anyone else gets the job page back with the refusal (403)."""
    return await _act(request, who, job_id, csrf, jobs.cancel)


@router.post("/jobs/{job_id}/release")
async def release(request: Request, job_id: JobIdPath, who: WebCaller, csrf: Annotated[str, Form()] = "") -> Response:
    """Owner or admin: let a held job be scheduled. Anyone else, or a job not held, gets the page back with the
    refusal."""
    return await _act(request, who, job_id, csrf, control.release)


async def _act(request: Request, who: Caller, job_id: int, csrf: str,
               action: Callable[[ServerContext, Caller, int], object]) -> Response:
    """Do what the job page's button asks, then show the page again (with the refusal, where refused)."""
    session.check_csrf(request, csrf)
    try:
        await run_in_threadpool(action, request.app.state.ctx, who, job_id)
    except ApiError as exc:
        return await _render(request, who, job_id, error=exc.detail, status=exc.status)
    return RedirectResponse(f"/jobs/{job_id}", status_code=303)
