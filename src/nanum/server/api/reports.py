"""Routes for planning: the store's history as a simulator trace."""

from __future__ import annotations

import time
from typing import Annotated, Any

from fastapi import APIRouter, Query

from nanum.server.auth import CallerDep, Context
from nanum.server.inputs import KnownQuery
from nanum.server.services import reports, usage

router = APIRouter(tags=["reports"], route_class=KnownQuery)

Short = Annotated[str | None, Query(max_length=64)]


@router.get("/trace")
def get_trace(ctx: Context, _: CallerDep, since: Short = None, until: Short = None) -> dict[str, Any]:
    """Jobs that started and were submitted in [since, until) (dates or times in UTC; default: all) as rows of the
    simulator's normalised trace, with the cluster (node groups, lab quotas) and the server's policy."""
    now = time.time()
    win = usage.window(None, since, until, now) if since is not None or until is not None else None
    start, end = (win.since, win.until) if win is not None else (0.0, now + 1.0)
    return reports.export_trace(ctx, start, end, now)


@router.get("/reports/usage")
def get_usage_report(ctx: Context, _: CallerDep, since: Short = None, until: Short = None,
                     by: Short = None) -> dict[str, Any]:
    """GPU-hours used against available, allocation against measured GPU utilisation, idle-but-held GPU-hours,
    waits p50/p95, lost work and budget use in [since, until) (default: this month), grouped `by` lab (default),
    user, gpu-model, day or week; with each lab's figures and the top users."""
    now = time.time()
    return reports.usage_report(ctx, usage.window(None, since, until, now), by or "lab", now)
