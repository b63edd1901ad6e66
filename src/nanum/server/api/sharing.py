"""Routes for fair sharing: one lab in detail, a user's limits, usage accounting, and queue priorities."""

from __future__ import annotations

import time
from typing import Annotated

from fastapi import APIRouter, Query

from nanum.server.auth import AdminDep, CallerDep, Context
from nanum.server.inputs import KnownQuery
from nanum.server.schemas import LabDetail, PriorityOut, UsageOut, UserOut, UserPatch
from nanum.server.services import accounts, labs, priority, usage

router = APIRouter(tags=["sharing"], route_class=KnownQuery)

#: A name or a date in a query.
Short = Annotated[str | None, Query(max_length=64)]


@router.get("/labs/{name}", response_model=LabDetail)
def get_lab(name: str, ctx: Context, _: CallerDep) -> dict[str, object]:
    """The lab's quota, members, jobs and GPUs now, this month's usage, budget and lost work, and its history."""
    return labs.lab_detail(ctx, name)


@router.patch("/users/{name}")
def patch_user(name: str, body: UserPatch, ctx: Context, admin: AdminDep) -> UserOut:
    """Set a user's own limits (admin); null removes one. Applies at the next scheduling cycle."""
    return accounts.patch_user(ctx, admin.name, name, body)


@router.get("/usage", response_model=UsageOut)
def get_usage(
    ctx: Context,
    _: CallerDep,
    month: Short = None,
    since: Short = None,
    until: Short = None,
    by: Short = None,
    lab: Short = None,
    user: Short = None,
) -> dict[str, object]:
    """GPU-hours, jobs, average wait and budget use in a window (`month=YYYY-MM`, or `since`/`until`, dates or
    times in UTC; default this month), grouped `by` day, user or lab (default: lab; user when `lab` is given;
    day when `user` is)."""
    win = usage.window(month, since, until, time.time())
    group = by or ("day" if user else "user" if lab else "lab")
    return usage.report(ctx, win, by=group, lab=lab, user=user)


@router.get("/priority", response_model=PriorityOut)
def get_priority(ctx: Context, _: CallerDep, user: Short = None, lab: Short = None) -> dict[str, object]:
    """Each pending job's multifactor priority and its factors, with its place in the server's queue order."""
    return priority.report(ctx, user=user, lab=lab)
