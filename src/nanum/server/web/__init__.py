"""The web dashboard at `/`: server-rendered pages (Jinja2), a small hand-written script that polls JSON for live
updates, SVG charts, one stylesheet. No build step and nothing from other sites: everything it needs is served
from `nanum/server/web/static`.

Pages: Cluster `/` (every GPU, live), Queue `/queue`, Job `/jobs/{id}`, Labs `/labs`, Nodes `/nodes`, Reports
`/reports`, Submit `/submit` (a batch job or a notebook), Admin `/admin`; log in at `/login` with an API token, a
directory password or single sign-on. Live data: `/ui/cluster.json`, `/ui/queue.json`, `/ui/jobs/{id}.json`.
"""

from __future__ import annotations

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, RedirectResponse, Response
from fastapi.staticfiles import StaticFiles

from nanum.server.web import admin, jobpage, login, pages, reports, sso, submit, terminal
from nanum.server.web.render import WEB, page
from nanum.server.web.session import CsrfFailed, LoginRequired, login_url

__all__ = ["install"]


def install(app: FastAPI) -> None:
    for module in (login, sso, pages, jobpage, reports, submit, terminal, admin):
        app.include_router(module.router)
    app.mount("/static", StaticFiles(directory=WEB / "static"), name="static")
    app.add_exception_handler(LoginRequired, _login_required)
    app.add_exception_handler(CsrfFailed, _csrf_failed)


async def _login_required(request: Request, _: Exception) -> Response:
    if request.url.path.startswith("/ui/"):
        return JSONResponse({"detail": "log in again"}, status_code=401)
    return RedirectResponse(login_url(request), status_code=303)


async def _csrf_failed(request: Request, _: Exception) -> Response:
    message = "This form expired or did not come from this dashboard. Go back, reload the page and try again."
    return page(request, "error.html", None, status_code=403, title="Form refused", message=message)
