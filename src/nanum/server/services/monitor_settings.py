"""Monitoring settings kept in the store (shared by every server on one database): idle policies for the server
and per lab, how to notify people (webhook, SMTP), users' contacts, and the key that signs dashboard sessions.

Idle policy layers: the defaults in `nanum.monitor.idle.IdlePolicy`, then the server's `idle` setting, then the
lab's `idle.lab.<id>`. Each layer holds only the fields it changes.
"""

from __future__ import annotations

import secrets
from dataclasses import asdict, dataclass, fields
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from nanum.monitor.idle import IdlePolicy, PolicyError
from nanum.server.context import ServerContext
from nanum.server.errors import BadRequest, NotFound
from nanum.server.services import webhooks
from nanum.store import ContactRow, LabRow, MonitorSettingRow, UserRow

IDLE = "idle"
NOTIFY = "notify"
WEB_SECRET = "web.secret"


@dataclass(frozen=True, slots=True, kw_only=True)
class NotifySettings:
    """Where notifications go. `webhook_url` gets every notice as JSON (Slack-compatible `text`); email needs
    `smtp_host` and the owner's address. `public_url` is the dashboard's address, for links."""

    webhook_url: str | None = None
    smtp_host: str | None = None
    smtp_port: int = 25
    smtp_from: str = "nanum@localhost"
    smtp_user: str | None = None
    smtp_password: str | None = None
    smtp_starttls: bool = False
    public_url: str | None = None

    def public(self) -> dict[str, Any]:
        """The settings as shown to admins: the SMTP password only as whether one is set."""
        out = asdict(self)
        out["smtp_password"] = "set" if self.smtp_password else None
        return out


def get(s: Session, key: str, default: Any = None) -> Any:
    row = s.get(MonitorSettingRow, key)
    return default if row is None else row.value


def put(s: Session, key: str, value: Any) -> None:
    row = s.get(MonitorSettingRow, key)
    if row is None:
        s.add(MonitorSettingRow(key=key, value=value))
    else:
        row.value = value


def lab_key(lab_id: int) -> str:
    return f"idle.lab.{lab_id}"


# -- idle policies ---------------------------------------------------------------------------------------------


def policies(s: Session) -> tuple[IdlePolicy, dict[int, IdlePolicy]]:
    """The server's idle policy and each lab's that differs from it."""
    rows = s.execute(select(MonitorSettingRow.key, MonitorSettingRow.value).where(MonitorSettingRow.key.like("idle%")))
    layers: dict[str, Any] = {key: value for key, value in rows}
    server = _merge(IdlePolicy(), layers.get(IDLE))
    labs = {int(k.rsplit(".", 1)[1]): _merge(server, v) for k, v in layers.items() if k.startswith("idle.lab.")}
    return server, labs


def _merge(base: IdlePolicy, layer: Any) -> IdlePolicy:
    try:
        return base.merged(layer or {})
    except PolicyError:
        return base  # a setting written by a newer server: keep the rest working


def idle_settings(ctx: ServerContext, lab: str | None = None) -> dict[str, Any]:
    """The effective policy, and the fields this layer sets itself."""
    with ctx.db.read() as s:
        server, labs = policies(s)
        if lab is None:
            return {"policy": server.as_dict(), "overrides": get(s, IDLE, {})}
        lab_id = _lab_id(s, lab)
        return {"lab": lab, "policy": labs.get(lab_id, server).as_dict(), "overrides": get(s, lab_key(lab_id), {})}


def set_idle(ctx: ServerContext, changes: dict[str, Any], lab: str | None = None) -> dict[str, Any]:
    """Change fields of the server's (or a lab's) idle policy; a field set to None there goes back to the layer
    below, except windows, where None means "never" (send `"inherit"` to go back)."""
    with ctx.db.write() as s:
        key = IDLE if lab is None else lab_key(_lab_id(s, lab))
        layer = dict(get(s, key, {}) or {})
        for name, value in changes.items():
            if value == "inherit" or (value is None and not name.endswith("_s")):
                layer.pop(name, None)
            else:
                layer[name] = value
        try:
            IdlePolicy().merged(layer)
        except PolicyError as exc:
            raise BadRequest(str(exc)) from None
        put(s, key, layer)
    return idle_settings(ctx, lab)


def _lab_id(s: Session, name: str) -> int:
    found = s.scalar(select(LabRow.id).where(LabRow.name == name))
    if found is None:
        raise NotFound(f"no lab named {name}")
    return int(found)


# -- notifications and contacts --------------------------------------------------------------------------------


def notify_settings(s: Session) -> NotifySettings:
    known = {f.name for f in fields(NotifySettings)}
    stored = get(s, NOTIFY, {}) or {}
    return NotifySettings(**{k: v for k, v in stored.items() if k in known})


def set_notify(ctx: ServerContext, changes: dict[str, Any]) -> NotifySettings:
    known = {f.name for f in fields(NotifySettings)}
    unknown = sorted(set(changes) - known)
    if unknown:
        raise BadRequest(f"unknown notification setting {unknown[0]!r}; known: {', '.join(sorted(known))}")
    if changes.get("webhook_url"):
        webhooks.check_url(str(changes["webhook_url"]), ctx.settings.webhook_allow_hosts)
    with ctx.db.write() as s:
        merged = {**(get(s, NOTIFY, {}) or {}), **changes}
        try:
            result = NotifySettings(**merged)
            int(result.smtp_port)
        except (TypeError, ValueError) as exc:
            raise BadRequest(f"invalid notification settings: {exc}") from None
        put(s, NOTIFY, {k: v for k, v in asdict(result).items() if v is not None})
    return result


def contact(s: Session, user_id: int) -> tuple[str | None, str | None]:
    """(email, webhook) of a user."""
    row = s.get(ContactRow, user_id)
    return (None, None) if row is None else (row.email, row.webhook)


def contacts(s: Session) -> dict[str, tuple[str | None, str | None]]:
    """User name → (email, webhook), for users who set either."""
    rows = s.execute(
        select(UserRow.name, ContactRow.email, ContactRow.webhook).join(UserRow, UserRow.id == ContactRow.user_id)
    )
    return {name: (email, webhook) for name, email, webhook in rows}


def set_contact(ctx: ServerContext, user: str, email: str | None, webhook: str | None) -> None:
    """Raises Invalid (422) for a webhook to a loopback, private or link-local address no admin allowed."""
    if webhook:
        webhooks.check_url(webhook, ctx.settings.webhook_allow_hosts)
    with ctx.db.write() as s:
        user_id = s.scalar(select(UserRow.id).where(UserRow.name == user))
        if user_id is None:
            raise NotFound(f"no user named {user}")
        row = s.get(ContactRow, user_id)
        if row is None:
            s.add(ContactRow(user_id=user_id, email=email or None, webhook=webhook or None))
        else:
            row.email, row.webhook = email or None, webhook or None


# -- the dashboard's signing key -------------------------------------------------------------------------------


def web_secret(ctx: ServerContext) -> bytes:
    """The key that signs dashboard sessions, made on first use and shared by servers on one database."""
    with ctx.db.read() as s:
        found = get(s, WEB_SECRET)
    if found is None:
        with ctx.db.write() as s:
            found = get(s, WEB_SECRET)
            if found is None:
                found = secrets.token_hex(32)
                put(s, WEB_SECRET, found)
    return bytes.fromhex(str(found))
