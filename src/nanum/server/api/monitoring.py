"""Routes for monitoring: a job's GPU use and timeline, a GPU's history, idle policies, notification settings and
users' contacts. Everyone may read use and history (transparency); admins change settings."""

from __future__ import annotations

import time
from typing import Annotated, Any

from fastapi import APIRouter, Path, Query
from pydantic import Field, RootModel, StringConstraints, field_validator
from sqlalchemy import select

from nanum.server.auth import AdminDep, CallerDep, Context
from nanum.server.errors import Forbidden, NotFound
from nanum.server.inputs import DECIMAL, WHOLE, ApiIn, JobIdPath, KnownQuery, refuse_nul
from nanum.server.limits import MAX_GPUS, MAX_SETTING_VALUE, MAX_SETTINGS
from nanum.server.services import history, jobusage, monitor_settings
from nanum.store import NodeRow

router = APIRouter(tags=["monitoring"], route_class=KnownQuery)

SettingName = Annotated[str, StringConstraints(max_length=64)]
SettingValue = (
    Annotated[int, Field(ge=-MAX_SETTING_VALUE, le=MAX_SETTING_VALUE)]
    | Annotated[float, Field(allow_inf_nan=False, ge=-MAX_SETTING_VALUE, le=MAX_SETTING_VALUE)]
    | Annotated[str, StringConstraints(max_length=64)]
    | None
)


class IdleChanges(RootModel[dict[SettingName, SettingValue]]):
    """Idle policy fields to change: numbers (finite), `"inherit"`, or null."""

    @field_validator("root", mode="before")
    @classmethod
    def _bounded(cls, v: Any) -> Any:
        refuse_nul(v)
        if isinstance(v, dict) and len(v) > MAX_SETTINGS:
            raise ValueError(f"at most {MAX_SETTINGS} settings may change at once")
        return v


class NotifyIn(ApiIn):
    webhook_url: str | None = Field(default=None, max_length=1024)
    smtp_host: str | None = Field(default=None, max_length=255)
    smtp_port: int | None = Field(default=None, ge=1, le=65535)
    smtp_from: str | None = Field(default=None, max_length=255)
    smtp_user: str | None = Field(default=None, max_length=255)
    smtp_password: str | None = Field(default=None, max_length=255)
    smtp_starttls: bool | None = None
    public_url: str | None = Field(default=None, max_length=1024)


class ContactIn(ApiIn):
    email: str | None = Field(default=None, max_length=255, pattern=r"^[^@\s]+@[^@\s]+$")
    webhook: str | None = Field(default=None, max_length=1024, pattern=r"^https?://")


@router.get("/jobs/{job_id}/usage")
def job_usage(job_id: JobIdPath, ctx: Context, _: CallerDep) -> dict[str, Any]:
    """GPU utilisation now, on average and over time; the idle state; the efficiency summary once ended."""
    return jobusage.usage(ctx, job_id)


@router.get("/nodes/{name}/gpus/{index}/history")
def gpu_history(
    name: str,
    index: Annotated[int, WHOLE, Path(ge=0, le=MAX_GPUS)],
    ctx: Context,
    _: CallerDep,
    hours: Annotated[float, DECIMAL, Query(gt=0, le=24 * 365, allow_inf_nan=False)] = 1.0,
) -> dict[str, Any]:
    """`[[t, util, memory_mb], ...]`: full rate for the last hour, per minute for a week, per hour beyond."""
    since = time.time() - hours * 3600
    res = 0 if hours <= 1 else 60 if hours <= 24 * 7 else 3600
    with ctx.db.read() as s:
        node_id = s.scalar(select(NodeRow.id).where(NodeRow.name == name))
        if node_id is None:
            raise NotFound(f"no node named {name}")
        points = history.gpu_timeline(s, node_id, index, since, res)
    return {"node": name, "gpu": index, "resolution_s": res, "points": points}


@router.get("/monitoring/idle")
def get_idle(ctx: Context, _: CallerDep) -> dict[str, Any]:
    return monitor_settings.idle_settings(ctx)


@router.patch("/monitoring/idle")
def patch_idle(body: IdleChanges, ctx: Context, _: AdminDep) -> dict[str, Any]:
    """Change the server's idle policy: thresholds, and windows in seconds (null: never; "inherit": default)."""
    return monitor_settings.set_idle(ctx, body.root)


@router.get("/labs/{name}/idle")
def get_lab_idle(name: str, ctx: Context, _: CallerDep) -> dict[str, Any]:
    return monitor_settings.idle_settings(ctx, name)


@router.patch("/labs/{name}/idle")
def patch_lab_idle(name: str, body: IdleChanges, ctx: Context, _: AdminDep) -> dict[str, Any]:
    """Change a lab's idle policy; fields it does not set follow the server's."""
    return monitor_settings.set_idle(ctx, body.root, name)


@router.get("/monitoring/notify")
def get_notify(ctx: Context, _: AdminDep) -> dict[str, Any]:
    with ctx.db.read() as s:
        return monitor_settings.notify_settings(s).public()


@router.patch("/monitoring/notify")
def patch_notify(body: NotifyIn, ctx: Context, _: AdminDep) -> dict[str, Any]:
    return monitor_settings.set_notify(ctx, body.model_dump(exclude_unset=True)).public()


@router.put("/users/{name}/contact")
def put_contact(name: str, body: ContactIn, ctx: Context, caller: CallerDep) -> dict[str, Any]:
    """Where a user hears about idle jobs. Users set their own; admins anyone's."""
    if not caller.admin and caller.name != name:
        raise Forbidden("only an admin may set another user's contact")
    monitor_settings.set_contact(ctx, name, body.email, body.webhook)
    return {"user": name, "email": body.email, "webhook": body.webhook}
