"""Lab memberships and lab managers: who is in a lab, as what, and with which limits of their own.

A lab's managers (`memberships.role = manager`) manage that lab and no other: they add and remove its members,
set a member's limits within the lab's own, and act on the lab's jobs and logs (`Caller.may_manage`). Only an
admin makes or unmakes a manager, and a member's limits are set by a manager only where every lab the member
belongs to is one that manager manages (a user's limits apply in all their labs).
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from nanum.server.callers import Caller
from nanum.server.context import ServerContext
from nanum.server.errors import BadRequest, Forbidden, NotFound
from nanum.server.identity import MemberLimits, MemberOut
from nanum.server.services import audit
from nanum.server.services.accounts import MANAGER, MEMBER, USER_FIELDS
from nanum.store import LabRow, MembershipRow, UserRow

#: member limit -> (the lab's limit it must stay within, the option that sets it)
_WITHIN = {"max_gpus": ("max_gpus", "--max-gpus"), "max_running_jobs": ("max_running_jobs", "--max-running-jobs"),
           "monthly_gpu_hours": ("monthly_gpu_hours", "--monthly-gpu-hours")}


def list_members(ctx: ServerContext, caller: Caller, lab: str) -> list[MemberOut]:
    """Every member of `lab` with their role and limits (its managers and admins)."""
    with ctx.db.read() as s:
        lab_row = _managed_lab(s, caller, lab)
        rows = s.execute(
            select(UserRow, MembershipRow.role)
            .join(MembershipRow, MembershipRow.user_id == UserRow.id)
            .where(MembershipRow.lab_id == lab_row.id)
            .order_by(UserRow.name)
        ).all()
        return [_out(lab, user, role) for user, role in rows]


def put_member(ctx: ServerContext, caller: Caller, lab: str, name: str, role: str) -> MemberOut:
    """Add `name` to `lab` as `role`, or change their role there."""
    if role == MANAGER and not caller.admin:
        raise Forbidden(f"only an admin may make someone a manager of lab {lab}")
    with ctx.db.write() as s:
        lab_row = _managed_lab(s, caller, lab)
        user = _user(s, name)
        row = s.get(MembershipRow, (user.id, lab_row.id))
        if row is not None and row.role == MANAGER and not caller.admin:
            raise Forbidden(f"{name} is a manager of lab {lab}; only an admin may change that")
        before = None if row is None else row.role
        if row is None:
            row = MembershipRow(user_id=user.id, lab_id=lab_row.id, role=role)
            s.add(row)
        row.role = role
        if user.default_lab_id is None:
            user.default_lab_id = lab_row.id
        if before != role:
            _record(s, ctx.clock(), caller, lab, name, "add" if before is None else "role",
                    {"member": [before, role]}, f"{caller.name} made {name} a {role} of lab {lab}")
        out = _out(lab, user, role)
    _changed(ctx)
    return out


def remove_member(ctx: ServerContext, caller: Caller, lab: str, name: str) -> None:
    """Take `name` out of `lab`; their jobs stay where they are. A user whose default lab it was gets another."""
    with ctx.db.write() as s:
        lab_row = _managed_lab(s, caller, lab)
        user = _user(s, name)
        row = s.get(MembershipRow, (user.id, lab_row.id))
        if row is None:
            raise NotFound(f"{name} is not a member of lab {lab}")
        if row.role == MANAGER and not caller.admin:
            raise Forbidden(f"{name} is a manager of lab {lab}; only an admin may remove a manager")
        s.delete(row)
        s.flush()
        if user.default_lab_id == lab_row.id:
            user.default_lab_id = s.scalar(select(MembershipRow.lab_id).where(MembershipRow.user_id == user.id)
                                           .order_by(MembershipRow.lab_id).limit(1))
        _record(s, ctx.clock(), caller, lab, name, "remove", {"member": [row.role, None]},
                f"{caller.name} removed {name} from lab {lab}")
    _changed(ctx)


def set_limits(ctx: ServerContext, caller: Caller, lab: str, name: str, limits: MemberLimits) -> MemberOut:
    """Set a member's own limits, each within the lab's (audited as `nanum user set` is)."""
    changes: dict[str, Any] = limits.model_dump(exclude_unset=True)
    with ctx.db.write() as s:
        lab_row = _managed_lab(s, caller, lab)
        user = _user(s, name)
        role = s.scalar(select(MembershipRow.role).where(MembershipRow.user_id == user.id,
                                                         MembershipRow.lab_id == lab_row.id))
        if role is None:
            raise NotFound(f"{name} is not a member of lab {lab}; add them first with `nanum lab member add {lab} "
                           f"{name}`")
        if not caller.admin:
            _only_managed_labs(s, caller, user)
        _within_lab(lab_row, changes)
        changed = audit.diff({f: getattr(user, f) for f in USER_FIELDS}, changes)
        for key, (_, value) in changed.items():
            setattr(user, key, value)
        if changed:
            audit.record(s, ctx.clock(), caller.name, "user", name, "set", changed,
                         f"{caller.name} set {audit.describe(changed)} (as manager of lab {lab})")
        out = _out(lab, user, role)
    _changed(ctx)
    return out


def _managed_lab(s: Session, caller: Caller, lab: str) -> LabRow:
    row = s.scalars(select(LabRow).where(LabRow.name == lab)).first()
    if row is None:
        raise NotFound(f"no lab named {lab}")
    if not caller.manages(lab):
        raise Forbidden(f"only a manager of lab {lab} or an admin may manage its members")
    return row


def _user(s: Session, name: str) -> UserRow:
    user = s.scalars(select(UserRow).where(UserRow.name == name)).first()
    if user is None:
        raise NotFound(f"no user named {name}; an admin creates one with `nanum user add {name}`")
    return user


def _only_managed_labs(s: Session, caller: Caller, user: UserRow) -> None:
    """A user's limits hold in every lab of theirs: a manager may set them only if they manage all of those."""
    labs = s.scalars(select(LabRow.name).join(MembershipRow, MembershipRow.lab_id == LabRow.id)
                     .where(MembershipRow.user_id == user.id).order_by(LabRow.name)).all()
    others = [lab for lab in labs if lab not in caller.managed]
    if others:
        raise Forbidden(f"{user.name} is also a member of lab {others[0]}, which you do not manage, and their "
                        "limits hold there too; ask an admin to set them")


def _within_lab(lab: LabRow, changes: dict[str, Any]) -> None:
    for key, value in changes.items():
        field, option = _WITHIN[key]
        cap = getattr(lab, field)
        if cap is not None and (value is None or value > cap):
            raise BadRequest(f"lab {lab.name} allows {key.replace('_', ' ')} of at most {cap:g}; give {option} "
                             f"{cap:g} or less")


def _record(s: Session, now: float, caller: Caller, lab: str, name: str, action: str, changes: dict[str, Any],
            message: str) -> None:
    audit.record(s, now, caller.name, "lab", lab, f"member-{action}", {name: changes["member"]}, message)


def _out(lab: str, user: UserRow, role: str) -> MemberOut:
    return MemberOut(lab=lab, user=user.name, role=role, unix_user=user.unix_user,
                     **{f: getattr(user, f) for f in USER_FIELDS})


def _changed(ctx: ServerContext) -> None:
    ctx.caches.callers.clear()
    ctx.caches.budgets.clear()
    ctx.caches.forget_labs()
    ctx.signals.poke()


__all__ = ["MANAGER", "MEMBER", "list_members", "put_member", "remove_member", "set_limits"]
