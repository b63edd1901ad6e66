"""Routes for notebooks and shells: the notebook proxy at `/notebooks/{job_id}/...` (HTTP and websockets, for
the owner logged in to the dashboard or holding an API token), the owner's shell websocket
`/api/v1/jobs/{job_id}/shell`, and the relay's `/api/v1/agent/shells/{job_id}`."""

from __future__ import annotations

from urllib.parse import urlsplit

from fastapi import APIRouter, Request, WebSocket
from fastapi.responses import Response
from starlette.concurrency import run_in_threadpool

from nanum.server import notebookproxy
from nanum.server.auth import current_caller
from nanum.server.callers import Caller
from nanum.server.context import TtlCache
from nanum.server.errors import ApiError, Unauthorized
from nanum.server.inputs import JobIdPath
from nanum.server.services import sessions
from nanum.server.shellbroker import ShellBroker
from nanum.server.web import jobpage
from nanum.server.web.session import COOKIE, LoginRequired
from nanum.server.web.session import caller as session_caller

router = APIRouter(tags=["sessions"])
proxy_router = APIRouter(include_in_schema=False)
METHODS = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"]
#: How long where a notebook listens is kept (a stopped one is gone from it within this).
TARGET_TTL_S = 2.0


async def _caller(conn: Request | WebSocket) -> Caller:
    """The owner's API token (`Authorization: Bearer`) or, in a browser, their dashboard session. Another
    scheme is JupyterLab's own (its page sends `Authorization: token ...`) and is not nanum's to check.

    A websocket that logs in by the session cookie must come from a page of this server (its `Origin` names
    this host): browsers send cookies with websockets that other sites open, and the cookie's SameSite rule is
    the only other guard."""
    if conn.headers.get("authorization", "").lower().startswith("bearer "):
        return await current_caller(conn, conn.app.state.ctx)  # type: ignore[arg-type]
    if conn.cookies.get(COOKIE):
        if isinstance(conn, WebSocket) and not _same_origin(conn):
            raise LoginRequired()
        return await session_caller(conn)  # type: ignore[arg-type]
    raise LoginRequired()


def _same_origin(websocket: WebSocket) -> bool:
    origin = websocket.headers.get("origin")
    return origin is None or urlsplit(origin).netloc.lower() == websocket.headers.get("host", "").lower()


async def _target(conn: Request | WebSocket, caller: Caller, job_id: int) -> sessions.Target:
    """Where the owner's notebook listens; kept a moment, as one page of JupyterLab makes dozens of requests."""
    cache: TtlCache[tuple[int, int], sessions.Target] | None = getattr(conn.app.state, "notebooks", None)
    if cache is None:
        cache = conn.app.state.notebooks = TtlCache(TARGET_TTL_S)
    found = cache.get((job_id, caller.id))
    if found is None:
        found = await run_in_threadpool(sessions.notebook, conn.app.state.ctx, caller, job_id)
        cache.put((job_id, caller.id), found)
    return found


@proxy_router.api_route("/notebooks/{job_id}/{path:path}", methods=METHODS)
async def notebook_http(job_id: JobIdPath, path: str, request: Request) -> Response:
    """The owner's notebook: JupyterLab of running notebook job `job_id` (owner only: others 403). A browser
    that opens it before JupyterLab answers (from the job page's Open notebook) gets a page that tries again."""
    caller = await _caller(request)
    try:
        return await notebookproxy.forward_http(request, await _target(request, caller, job_id))
    except sessions.NotReady as exc:
        if not (exc.starting and request.method == "GET" and "text/html" in request.headers.get("accept", "")):
            raise
        return jobpage.notebook_starting(request, caller, job_id, exc.detail)


@proxy_router.websocket("/notebooks/{job_id}/{path:path}")
async def notebook_websocket(websocket: WebSocket, job_id: JobIdPath, path: str) -> None:
    """The notebook's websockets (kernels, terminals), for its owner; refused (403) to anyone else."""
    try:
        target = await _target(websocket, await _caller(websocket), job_id)
    except (ApiError, LoginRequired):
        await websocket.close(code=1008)
        return
    await notebookproxy.forward_websocket(websocket, target)


def _broker(websocket: WebSocket) -> ShellBroker:
    found: ShellBroker | None = getattr(websocket.app.state, "shells", None)
    if found is None:
        found = websocket.app.state.shells = ShellBroker()
    return found


@router.websocket("/jobs/{job_id}/shell")
async def shell_websocket(websocket: WebSocket, job_id: JobIdPath) -> None:
    """The owner's terminal on running shell job `job_id` (`nanum shell`, or the dashboard's terminal page,
    logged in by its session): binary frames are terminal bytes, text frames JSON (`{"resize": [ROWS, COLS]}`
    in, `{"exit": CODE}` out, last)."""
    try:
        caller = await _caller(websocket)
        await run_in_threadpool(sessions.shell_job, websocket.app.state.ctx, caller, job_id)
    except (ApiError, LoginRequired):
        await websocket.close(code=1008)
        return
    await websocket.accept()
    await _broker(websocket).join(job_id, "user", websocket)


@router.websocket("/agent/shells/{job_id}")
async def relay_websocket(websocket: WebSocket, job_id: JobIdPath) -> None:
    """A shell job's relay, dialling out from its node; authenticated with the job's secret."""
    scheme, _, secret = websocket.headers.get("authorization", "").partition(" ")
    try:
        if scheme.lower() != "bearer":
            raise Unauthorized("the relay must show its job's secret")
        await run_in_threadpool(sessions.relay_job, websocket.app.state.ctx, job_id, secret.strip())
    except ApiError:
        await websocket.close(code=1008)
        return
    await websocket.accept()
    await _broker(websocket).join(job_id, "relay", websocket)
