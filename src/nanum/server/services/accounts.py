"""Users, labs, memberships and node registration: who may use the cluster, and with which tokens."""

from __future__ import annotations

from typing import Any

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from nanum.server.callers import Caller, NodeCaller, hash_token, new_token
from nanum.server.context import ServerContext
from nanum.server.errors import BadRequest, Conflict, NotFound, Unauthorized
from nanum.server.schemas import LabIn, LabOut, LabPatch, UserIn, UserOut, UserPatch
from nanum.server.services import audit
from nanum.store import LabRow, MembershipRow, NodeRow, UserRow

MANAGER, MEMBER = "manager", "member"
LAB_FIELDS = ("guaranteed_gpus", "max_gpus", "max_running_jobs", "monthly_gpu_hours", "weight", "grace_s")
USER_FIELDS = ("max_gpus", "max_running_jobs", "monthly_gpu_hours")


# -- callers ---------------------------------------------------------------------------------------------------


def refuse_disabled(user: UserRow) -> None:
    if user.disabled:
        raise Unauthorized(f"user {user.name} is disabled; ask an admin if that is a mistake")


def caller_for(s: Session, user: UserRow) -> Caller:
    """Who `user` is to every route: their labs, default lab and the labs they manage."""
    rows = s.execute(
        select(LabRow.id, LabRow.name, MembershipRow.role)
        .join(MembershipRow, MembershipRow.lab_id == LabRow.id)
        .where(MembershipRow.user_id == user.id)
    ).all()
    labs = {lab_id: name for lab_id, name, _ in rows}
    managed = {lab_id: name for lab_id, name, role in rows if role == MANAGER}
    default = labs.get(user.default_lab_id) if user.default_lab_id is not None else None
    if default is None and user.default_lab_id is not None:
        default = s.scalar(select(LabRow.name).where(LabRow.id == user.default_lab_id))
    return Caller(user.id, user.name, user.admin, user.unix_user, default, frozenset(labs.values()), user.max_gpus,
                  managed=frozenset(managed.values()), managed_ids=frozenset(managed), directory=user.source == "ldap")


def refuse_root_jobs(ctx: ServerContext, caller: Caller) -> None:
    """Refuse, at submit, a job that would run as root where no agent may run one (`--allow-root-jobs` is off):
    otherwise it is queued, then fails at once on its node with nothing to show for it."""
    account = caller.unix_user or caller.name
    if account == "root" and not ctx.settings.allow_root_jobs:
        raise BadRequest(
            f"user {caller.name}'s jobs would run as root, which this server refuses; add yourself as a user "
            "with a normal Unix account (`nanum user add NAME --unix-user NAME --lab LAB`) and submit with the "
            "token it prints, or restart nanum with --allow-root-jobs"
        )


def node_by_token_hash(ctx: ServerContext, digest: str) -> NodeCaller | None:
    with ctx.db.read() as s:
        row = s.execute(select(NodeRow.id, NodeRow.name).where(NodeRow.token_hash == digest)).first()
        return None if row is None else NodeCaller(row.id, row.name)


def user_out(caller: Caller) -> UserOut:
    return UserOut(
        name=caller.name,
        admin=caller.admin,
        labs=sorted(caller.labs),
        default_lab=caller.default_lab,
        unix_user=caller.unix_user,
    )


# -- users -----------------------------------------------------------------------------------------------------


def create_user(ctx: ServerContext, spec: UserIn, token: str | None = None) -> str:
    """Create a user in `spec.labs` (creating missing labs; the first is the default). Returns the new token."""
    token = token or new_token()
    with ctx.db.write() as s:
        if s.scalar(select(UserRow.id).where(UserRow.name == spec.name)) is not None:
            raise Conflict(f"user {spec.name} already exists")
        labs = [ensure_lab(s, name, ctx.clock()) for name in dict.fromkeys(spec.labs)]
        user = UserRow(
            name=spec.name,
            token_hash=hash_token(token),
            admin=spec.admin,
            unix_user=spec.unix_user,
            default_lab_id=labs[0].id if labs else None,
            decayed_usage=0.0,
            decayed_at=ctx.clock(),
            created=ctx.clock(),
        )
        s.add(user)
        s.flush()
        s.add_all(MembershipRow(user_id=user.id, lab_id=lab.id) for lab in labs)
    return token


def list_users(ctx: ServerContext) -> list[UserOut]:
    with ctx.db.read() as s:
        return [_user_with_limits(s, u) for u in s.scalars(select(UserRow).order_by(UserRow.name))]


def _user_with_limits(s: Session, user: UserRow) -> UserOut:
    return user_out(caller_for(s, user)).model_copy(update={f: getattr(user, f) for f in USER_FIELDS})


def patch_user(ctx: ServerContext, actor: str, name: str, patch: UserPatch) -> UserOut:
    """Change a user's own limits (recorded in the audit trail); the next scheduling cycle applies them."""
    changes: dict[str, Any] = patch.model_dump(exclude_unset=True)
    now = ctx.clock()
    with ctx.db.write() as s:
        user = s.scalars(select(UserRow).where(UserRow.name == name).with_for_update()).first()
        if user is None:
            raise NotFound(f"no user named {name}; create one with `nanum user add {name}`")
        changed = audit.diff({f: getattr(user, f) for f in USER_FIELDS}, changes)
        for key, (_, value) in changed.items():
            setattr(user, key, value)
        if changed:
            audit.record(s, now, actor, "user", name, "set", changed, f"{actor} set {audit.describe(changed)}")
        out = _user_with_limits(s, user)
    ctx.caches.budgets.clear()
    ctx.caches.callers.clear()
    ctx.signals.poke()
    return out


def set_token(ctx: ServerContext, name: str, token: str) -> None:
    """Replace a user's token (used by `nanum up` to keep DIR/admin-token valid)."""
    with ctx.db.write() as s:
        user = s.scalars(select(UserRow).where(UserRow.name == name)).one()
        user.token_hash = hash_token(token)
    ctx.caches.callers.clear()


def add_membership(ctx: ServerContext, user: str, lab: str) -> None:
    with ctx.db.write() as s:
        row = s.scalars(select(UserRow).where(UserRow.name == user)).first()
        if row is None:
            raise NotFound(f"no user named {user}")
        lab_row = ensure_lab(s, lab, ctx.clock())
        if s.get(MembershipRow, (row.id, lab_row.id)) is None:
            s.add(MembershipRow(user_id=row.id, lab_id=lab_row.id))
        if row.default_lab_id is None:
            row.default_lab_id = lab_row.id
    ctx.caches.callers.clear()


# -- labs ------------------------------------------------------------------------------------------------------


def ensure_lab(s: Session, name: str, now: float) -> LabRow:
    lab = s.scalars(select(LabRow).where(LabRow.name == name)).first()
    if lab is None:
        lab = LabRow(name=name, weight=1.0, decayed_usage=0.0, decayed_at=now, created=now)
        s.add(lab)
        s.flush()
    return lab


def lab_out(lab: LabRow) -> LabOut:
    return LabOut(name=lab.name, **{f: getattr(lab, f) for f in LAB_FIELDS})


def create_lab(ctx: ServerContext, spec: LabIn, actor: str = audit.SYSTEM) -> LabOut:
    now = ctx.clock()
    quota = spec.model_dump(include=set(LAB_FIELDS))
    try:
        with ctx.db.write() as s:
            if s.scalar(select(LabRow.id).where(LabRow.name == spec.name)) is not None:
                raise Conflict(f"lab {spec.name} already exists; change it with `nanum lab set {spec.name}`")
            lab = LabRow(name=spec.name, decayed_usage=0.0, decayed_at=now, created=now, **quota)
            s.add(lab)
            s.flush()
            given = audit.diff({}, {k: v for k, v in quota.items() if v is not None})
            audit.record(
                s,
                now,
                actor,
                "lab",
                spec.name,
                "add",
                given,
                f"{actor} created the lab" + (f" with {audit.describe(given)}" if given else ""),
            )
    except IntegrityError as e:
        raise Conflict(f"lab {spec.name} already exists") from e
    ctx.caches.forget_labs()
    ctx.caches.budgets.clear()
    ctx.signals.poke()
    out = lab_out(lab)
    out.warning = guarantee_warning(ctx, spec.name, lab.guaranteed_gpus)
    return out


def list_labs(ctx: ServerContext) -> list[LabOut]:
    with ctx.db.read() as s:
        return [lab_out(lab) for lab in s.scalars(select(LabRow).order_by(LabRow.name))]


def patch_lab(ctx: ServerContext, name: str, patch: LabPatch, actor: str = audit.SYSTEM) -> LabOut:
    """Change a lab's quota (recorded in the audit trail); the next scheduling cycle applies it."""
    changes: dict[str, Any] = patch.model_dump(exclude_unset=True)
    if changes.get("weight", 1.0) is None:
        changes.pop("weight")
    now = ctx.clock()
    with ctx.db.write() as s:
        lab = s.scalars(select(LabRow).where(LabRow.name == name).with_for_update()).first()
        if lab is None:
            raise NotFound(f"no lab named {name}; create it with `nanum lab add {name}`")
        changed = audit.diff({f: getattr(lab, f) for f in LAB_FIELDS}, changes)
        for key, (_, value) in changed.items():
            setattr(lab, key, value)
        if changed:
            audit.record(s, now, actor, "lab", name, "set", changed, f"{actor} set {audit.describe(changed)}")
    ctx.caches.forget_labs()
    ctx.caches.budgets.clear()
    ctx.signals.poke()
    out = lab_out(lab)
    if "guaranteed_gpus" in changes:
        out.warning = guarantee_warning(ctx, name, lab.guaranteed_gpus)
    return out


def guarantee_warning(ctx: ServerContext, name: str, guaranteed: int | None) -> str | None:
    """Why a lab's guarantee cannot be met on today's cluster (more than its GPUs, alone or with the other
    labs'); None when it can. A warning, not a refusal: nodes may be on their way."""
    if not guaranteed:
        return None
    with ctx.db.read() as s:
        inventories = s.scalars(select(NodeRow.inventory)).all()
        promised = sum(g or 0 for g in s.scalars(select(LabRow.guaranteed_gpus)).all())
    total = sum(len(inv.get("gpus", ())) for inv in inventories if inv)
    if guaranteed > total:
        return (f"lab {name} is guaranteed {guaranteed} GPUs but the cluster has {total}; the guarantee cannot "
                "be met until more GPUs join (see `nanum nodes`)")
    if promised > total:
        return (f"the labs' guarantees add up to {promised} GPUs but the cluster has {total}; not every lab can "
                "get its guarantee at once (see `nanum lab list`)")
    return None


# -- nodes -----------------------------------------------------------------------------------------------------


def add_node(ctx: ServerContext, name: str, token: str | None = None, replace: bool = False) -> str:
    """Register node `name` and return its token. `replace`: give an existing node this new token instead."""
    token = token or new_token()
    with ctx.db.write() as s:
        node = s.scalars(select(NodeRow).where(NodeRow.name == name)).first()
        if node is not None and not replace:
            raise Conflict(f"node {name} already exists")
        if node is None:
            s.add(
                NodeRow(name=name, token_hash=hash_token(token), state="down", desired_version=0, created=ctx.clock())
            )
        else:
            node.token_hash = hash_token(token)
    ctx.caches.callers.clear()
    ctx.caches.node_tokens.clear()
    return token
