"""Bulk onboarding without a directory: bring a list of people (name, Unix account, labs, role, email) into the
store in one transaction, idempotently.

Each listed user ends with exactly the listed labs (memberships added and removed), the role (`member`,
`manager` of every listed lab, or `admin`), Unix account and email; users not listed are left as they are, and
their jobs stay wherever memberships change. Running the same list again changes nothing and says so. Every
change is audited with the admin who made it.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from nanum.server.callers import hash_token, new_token
from nanum.server.context import ServerContext
from nanum.server.errors import BadRequest
from nanum.server.identity import ImportedChange, ImportedUser, ImportIn, ImportOut
from nanum.server.services import audit
from nanum.server.services.accounts import MANAGER, MEMBER, ensure_lab
from nanum.store import LabRow, MembershipRow, UserRow


def import_users(ctx: ServerContext, actor: str, spec: ImportIn) -> ImportOut:
    """Create or update every listed user; a dry run reports the same and rolls back."""
    names = [u.name for u in spec.users]
    if len(names) != len(set(names)):
        twice = sorted({n for n in names if names.count(n) > 1})
        raise BadRequest(f"user {twice[0]} is listed more than once; keep one line per user")
    report = ImportOut(created=[], changed=[], unchanged=[], dry_run=spec.dry_run)
    with ctx.db.write() as s:
        for wanted in spec.users:
            _bring(s, ctx.clock(), actor, wanted, report)
        if spec.dry_run:
            s.rollback()
    if not spec.dry_run and (report.created or report.changed):
        ctx.caches.callers.clear()
        ctx.caches.forget_labs()
        ctx.signals.poke()
    return report


def _bring(s: Session, now: float, actor: str, wanted: ImportedUser, report: ImportOut) -> None:
    user = s.scalars(select(UserRow).where(UserRow.name == wanted.name)).first()
    token = None
    if user is None:
        token = new_token()
        user = UserRow(name=wanted.name, token_hash=hash_token(token), admin=False, decayed_usage=0.0,
                       decayed_at=now, created=now)
        s.add(user)
        s.flush()
    changes = _apply(s, user, wanted, now)
    if token is not None:
        report.created.append(ImportedChange(name=wanted.name, changes=changes, token=token))
    elif changes:
        report.changed.append(ImportedChange(name=wanted.name, changes=changes))
    else:
        report.unchanged.append(wanted.name)
    if changes:
        audit.record(s, now, actor, "user", wanted.name, "import", changes,
                     f"{actor} imported {wanted.name}: {audit.describe(changes)}")


def _apply(s: Session, user: UserRow, wanted: ImportedUser, now: float) -> dict[str, list[Any]]:
    """Make `user` as `wanted`; the changes as field -> [before, after]."""
    changes: dict[str, list[Any]] = {}
    for field, value in (("unix_user", wanted.unix_user), ("email", wanted.email), ("admin", wanted.role == "admin")):
        if getattr(user, field) != value:
            changes[field] = [getattr(user, field), value]
            setattr(user, field, value)
    role = MANAGER if wanted.role == MANAGER else MEMBER
    rows = {lab: row for row, lab in s.execute(
        select(MembershipRow, LabRow.name).join(LabRow, LabRow.id == MembershipRow.lab_id)
        .where(MembershipRow.user_id == user.id))}
    before = {lab: row.role for lab, row in rows.items()}
    after = dict.fromkeys(dict.fromkeys(wanted.labs), role)
    for lab, row in rows.items():
        if lab not in after:
            s.delete(row)
        elif row.role != role:
            row.role = role
    for lab in after:
        if lab not in rows:
            s.add(MembershipRow(user_id=user.id, lab_id=ensure_lab(s, lab, now).id, role=role))
    if before != after:
        changes["labs"] = [_labs_text(before), _labs_text(after)]
    _default_lab(s, user, list(after))
    return changes


def _labs_text(roles: dict[str, str]) -> list[str]:
    return sorted(f"{lab} (manager)" if role == MANAGER else lab for lab, role in roles.items())


def _default_lab(s: Session, user: UserRow, labs: list[str]) -> None:
    """The first listed lab becomes the default when the current one is no longer the user's."""
    s.flush()
    current = s.scalar(select(LabRow.name).where(LabRow.id == user.default_lab_id)) if user.default_lab_id else None
    if labs and current not in labs:
        user.default_lab_id = s.scalar(select(LabRow.id).where(LabRow.name == labs[0]))
    elif not labs:
        user.default_lab_id = None


def set_disabled(ctx: ServerContext, actor: str, name: str, disabled: bool) -> dict[str, Any]:
    """Disable a user (their tokens and sessions are refused at once; their queued jobs wait, visible to admins)
    or enable them again. Directory users are disabled in the directory, which nanum follows."""
    from nanum.server.errors import Conflict, NotFound
    from nanum.server.services import eligibility

    verb = "disable" if disabled else "enable"
    with ctx.db.write() as s:
        user = s.scalars(select(UserRow).where(UserRow.name == name).with_for_update()).first()
        if user is None:
            raise NotFound(f"no user named {name}; `nanum user list` shows who there is")
        if user.source == "ldap":
            raise Conflict(f"{name} comes from the directory, which decides whether they may log in; {verb} the "
                           "account there")
        if name == actor and disabled:
            raise Conflict("you cannot disable yourself; ask another admin")
        if user.disabled != disabled:
            user.disabled = disabled
            eligibility.mark_owner(s, user.id, disabled)
            audit.record(s, ctx.clock(), actor, "user", name, verb, {"disabled": [not disabled, disabled]},
                         f"{actor} {verb}d {name}")
    ctx.caches.callers.clear()
    ctx.signals.poke()
    return {"name": name, "disabled": disabled}
