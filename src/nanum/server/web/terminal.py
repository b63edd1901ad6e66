"""The terminal page: a shell job's terminal in the browser, for its owner (`/jobs/ID/terminal`).

The page waits for the job to run, then runs xterm.js (`nanum.server.web.xterm`) on the owner's shell websocket
(`/api/v1/jobs/ID/shell`, the one `nanum shell` uses), logged in by the dashboard's session cookie. Closing the
page closes the websocket, which hangs up the shell and ends the job, as closing a terminal does. xterm.js sets
its own styles from script, so this page alone allows inline styles; scripts stay the server's own.
"""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import Response
from starlette.concurrency import run_in_threadpool

from nanum.server.errors import ApiError
from nanum.server.inputs import JobIdPath
from nanum.server.services import sessions
from nanum.server.web.render import SECURITY_HEADERS, page
from nanum.server.web.submit import WebCaller

router = APIRouter(include_in_schema=False)

CSP = SECURITY_HEADERS["Content-Security-Policy"].replace("style-src 'self'", "style-src 'self' 'unsafe-inline'")


@router.get("/jobs/{job_id}/terminal")
async def terminal_page(request: Request, job_id: JobIdPath, who: WebCaller) -> Response:
    try:
        await run_in_threadpool(sessions.owned_shell, request.app.state.ctx, who, job_id)
    except ApiError as exc:
        return page(request, "error.html", who, status_code=exc.status, title=f"Shell {job_id}", message=exc.detail)
    from nanum.server.web import xterm  # not at import: `python -m nanum.server.web.xterm` runs it as a script

    answer = page(request, "terminal.html", who, title=f"Shell {job_id}", job_id=job_id, xterm=xterm.available())
    answer.headers["Content-Security-Policy"] = CSP
    return answer
