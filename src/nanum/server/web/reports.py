"""The dashboard's Reports page: the usage report's charts and tables for the last 30 days (or `?since=&until=`,
`?by=`), the same as `nanum report usage --format html`."""

from __future__ import annotations

import time
from typing import Annotated

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import Response
from starlette.concurrency import run_in_threadpool

from nanum import usage_report as views
from nanum.server.callers import Caller
from nanum.server.services import reports, usage
from nanum.server.web.render import page
from nanum.server.web.session import caller

router = APIRouter(include_in_schema=False)
WebCaller = Annotated[Caller, Depends(caller)]
Short = Annotated[str | None, Query(max_length=64)]
DAYS = 30


@router.get("/reports")
async def reports_page(request: Request, who: WebCaller, since: Short = None, until: Short = None,
                       by: Short = None) -> Response:
    ctx = request.app.state.ctx
    now = time.time()
    start = since or time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(now - DAYS * 86400.0))
    win = usage.window(None, start, until, now)
    report = await run_in_threadpool(reports.usage_report, ctx, win, by or "lab", now)
    drawn = await run_in_threadpool(views.charts, report)
    return page(request, "reports.html", who, title="Reports", report=report, charts=drawn,
                heading=views.title(report), headline=views.headline(report),
                tables=[(f"By {report['by']}", views.headers(report["by"]), views.rows(report)),
                        ("Labs", views.headers("lab"), views.rows(report, "labs")),
                        ("Top users", views.headers("user"), views.rows(report, "top_users"))])
