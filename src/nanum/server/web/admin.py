"""The admin page: labs and their quotas and idle policies, users and their contacts, the server's idle policy and
notification settings. Every form posts back here with its CSRF token; errors come back as one line on the page."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any
from urllib.parse import quote

from fastapi import APIRouter, Depends, Request
from fastapi.responses import RedirectResponse, Response
from pydantic import ValidationError
from starlette.concurrency import run_in_threadpool

from nanum.server.callers import Caller
from nanum.server.errors import ApiError, validation_message
from nanum.server.schemas import LabIn, LabPatch, UserIn
from nanum.server.services import accounts, monitor_settings
from nanum.server.web import session
from nanum.server.web.render import page

router = APIRouter(include_in_schema=False)
WebCaller = Annotated[Caller, Depends(session.caller)]

LAB_FIELDS = ("guaranteed_gpus", "max_gpus", "max_running_jobs", "monthly_gpu_hours", "weight")
IDLE_WINDOWS = ("batch_flag_s", "batch_release_s", "notebook_flag_s", "notebook_release_s")
IDLE_THRESHOLDS = ("util_percent", "cpu_percent", "memory_delta_mb")
LABELS = {
    "batch_flag_s": "Batch: flag after (min)",
    "batch_release_s": "Batch: release after (min)",
    "notebook_flag_s": "Notebook: flag after (min)",
    "notebook_release_s": "Notebook: release after (min)",
    "util_percent": "Idle at GPU use up to (%)",
    "cpu_percent": "Idle at CPU use up to (% of a core)",
    "memory_delta_mb": "Active when memory moves by (MiB)",
}
NOTIFY_FIELDS = ("webhook_url", "public_url", "smtp_host", "smtp_port", "smtp_from", "smtp_user", "smtp_password")


def _admin_data(ctx: Any) -> dict[str, Any]:
    labs = accounts.list_labs(ctx)
    with ctx.db.read() as s:
        notify = monitor_settings.notify_settings(s).public()
        contacts = monitor_settings.contacts(s)
    return {
        "contacts": contacts,
        "labs": [(lab, monitor_settings.idle_settings(ctx, lab.name)) for lab in labs],
        "users": accounts.list_users(ctx),
        "idle": monitor_settings.idle_settings(ctx),
        "notify": notify,
    }


async def _page(request: Request, who: Caller, message: str | None = None, error: str | None = None,
                status: int = 200, token: dict[str, str] | None = None) -> Response:  # fmt: skip
    if not who.admin:
        return page(request, "error.html", who, status_code=403, title="Admins only",
                    message="Only an admin may see this page.")  # fmt: skip
    found = await run_in_threadpool(_admin_data, request.app.state.ctx)
    return page(request, "admin.html", who, status_code=status, title="Admin", message=message, error=error,
                new_token=token, windows=IDLE_WINDOWS, thresholds=IDLE_THRESHOLDS, labels=LABELS, **found)  # fmt: skip


@router.get("/admin")
async def admin_page(request: Request, who: WebCaller, done: str | None = None) -> Response:
    return await _page(request, who, message=done)


async def _form(request: Request, who: Caller) -> dict[str, str]:
    form = await request.form()
    session.check_csrf(request, str(form.get("csrf", "")))
    return {k: str(v).strip() for k, v in form.items() if k != "csrf"}


async def _act(request: Request, who: Caller, action: Callable[[dict[str, str]], str]) -> Response:
    """Run one admin action on the posted form; back to the page with its outcome."""
    form = await _form(request, who)
    if not who.admin:
        return await _page(request, who)
    try:
        done = await run_in_threadpool(action, form)
    except ApiError as exc:
        return await _page(request, who, error=exc.detail, status=exc.status)
    except ValidationError as exc:
        return await _page(request, who, error=validation_message(exc.errors()), status=422)
    except ValueError as exc:
        return await _page(request, who, error=str(exc), status=400)
    if done.startswith("token:"):
        name, token = done[6:].split(":", 1)
        return await _page(request, who, message=f"Created user {name}.", token={"name": name, "token": token})
    return RedirectResponse(f"/admin?done={quote(done)}", status_code=303)


def _number(value: str) -> float | None:
    """A form field as a number; empty means none (no limit, never)."""
    if value == "":
        return None
    try:
        return float(value)
    except ValueError:
        raise ValueError(f"{value!r} is not a number") from None


def _limits(form: dict[str, str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name in LAB_FIELDS:
        if name in form:
            value = _number(form[name])
            out[name] = int(value) if value is not None and name in ("guaranteed_gpus", "max_gpus",
                                                                     "max_running_jobs") else value  # fmt: skip
    if out.get("weight") is None:
        out.pop("weight", None)
    return out


@router.post("/admin/labs")
async def add_lab(request: Request, who: WebCaller) -> Response:
    ctx = request.app.state.ctx

    def action(form: dict[str, str]) -> str:
        lab = accounts.create_lab(ctx, LabIn(name=form.get("name", ""), **_limits(form)), actor=who.name)
        return f"Created lab {lab.name}."

    return await _act(request, who, action)


@router.post("/admin/labs/{name}")
async def edit_lab(request: Request, name: str, who: WebCaller) -> Response:
    ctx = request.app.state.ctx

    def action(form: dict[str, str]) -> str:
        accounts.patch_lab(ctx, name, LabPatch(**_limits(form)), actor=who.name)
        idle = {k: _window(form[k]) for k in IDLE_WINDOWS if k in form}
        if idle:
            monitor_settings.set_idle(ctx, idle, name)
        return f"Saved lab {name}."

    return await _act(request, who, action)


def _window(value: str) -> float | str | None:
    """An idle window in minutes on the form: empty follows the server, `never` turns it off."""
    if value == "":
        return "inherit"
    if value.lower() == "never":
        return None
    minutes = _number(value)
    return None if minutes is None else minutes * 60


@router.post("/admin/users")
async def add_user(request: Request, who: WebCaller) -> Response:
    ctx = request.app.state.ctx

    def action(form: dict[str, str]) -> str:
        labs = [x.strip() for x in form.get("labs", "").split(",") if x.strip()]
        spec = UserIn(name=form.get("name", ""), labs=labs, admin=form.get("admin") == "on",
                      unix_user=form.get("unix_user") or None)  # fmt: skip
        token = accounts.create_user(ctx, spec)
        if form.get("email"):
            monitor_settings.set_contact(ctx, spec.name, form["email"], None)
        return f"token:{spec.name}:{token}"

    return await _act(request, who, action)


@router.post("/admin/users/{name}")
async def edit_user(request: Request, name: str, who: WebCaller) -> Response:
    ctx = request.app.state.ctx

    def action(form: dict[str, str]) -> str:
        if form.get("lab"):
            accounts.add_membership(ctx, name, form["lab"])
        monitor_settings.set_contact(ctx, name, form.get("email") or None, form.get("webhook") or None)
        return f"Saved user {name}."

    return await _act(request, who, action)


@router.post("/admin/idle")
async def edit_idle(request: Request, who: WebCaller) -> Response:
    ctx = request.app.state.ctx

    def action(form: dict[str, str]) -> str:
        changes: dict[str, Any] = {k: _window(form[k]) for k in IDLE_WINDOWS if k in form}
        changes |= {k: _number(form[k]) for k in IDLE_THRESHOLDS if k in form}
        monitor_settings.set_idle(ctx, changes)
        return "Saved the idle policy."

    return await _act(request, who, action)


@router.post("/admin/notify")
async def edit_notify(request: Request, who: WebCaller) -> Response:
    ctx = request.app.state.ctx

    def action(form: dict[str, str]) -> str:
        changes: dict[str, Any] = {k: form[k] or None for k in NOTIFY_FIELDS if k in form}
        if changes.get("smtp_password") is None:
            changes.pop("smtp_password", None)  # left empty: keep the one set
        if "smtp_port" in changes:
            changes["smtp_port"] = int(_number(changes["smtp_port"] or "25") or 25)
        changes["smtp_starttls"] = form.get("smtp_starttls") == "on"
        monitor_settings.set_notify(ctx, changes)
        return "Saved the notification settings."

    return await _act(request, who, action)
