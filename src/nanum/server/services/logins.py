"""Logging in with a directory password (`nanum login`, the web form): who the directory says a person is
becomes a nanum user, and a token that lasts `token_lifetime_s` is handed out.

The user is made at the first login: name and Unix account from the entry's `uid` (jobs run as that account, so
as its uidNumber wherever the nodes read the same directory), `uidNumber` and `mail` kept, labs from the groups
(`nanum.server.directory`). Each login brings these up to date: labs the directory adds are joined, labs it no
longer gives are left (a lab the user manages stays). A directory user's tokens and web sessions are checked
against the directory again every `recheck_s`: an entry removed or disabled there disables the user here, and
every request of theirs is refused from then on; their jobs stay, visible to admins. When the directory cannot
be reached, people already in keep working and new logins are refused with 503.
"""

from __future__ import annotations

import logging
import threading
import time

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from nanum.server.callers import Caller, hash_token, new_token
from nanum.server.context import ServerContext
from nanum.server.errors import ApiError, BadRequest, Unauthorized
from nanum.server.identity import LoginOut
from nanum.server.services import accounts, eligibility, tokens
from nanum.server.services.accounts import MANAGER, MEMBER, ensure_lab
from nanum.store import LabRow, MembershipRow, UserRow

log = logging.getLogger(__name__)

_checked: dict[tuple[str, str], float] = {}
_lock = threading.Lock()


class DirectoryDown(ApiError):
    status = 503


class TooManyFailures(ApiError):
    status = 429


#: Failed logins a name may have within FAILURE_WINDOW_S before its logins are refused without asking the
#: directory (password guessing through nanum; the directory's own lockout policy still applies).
MAX_FAILURES, FAILURE_WINDOW_S = 5, 300.0
_failures: dict[tuple[str, str], list[float]] = {}


def methods(ctx: ServerContext) -> dict[str, object]:
    """How people log in to this server: always with an API token; with a password where a directory is set;
    with single sign-on where a provider is set."""
    ldap, oidc = ctx.settings.ldap, ctx.settings.oidc
    sso = None if oidc is None else {"issuer": oidc.issuer, "client_id": oidc.client_id, "name": oidc.name}
    return {"token": True, "password": ldap is not None, "directory": "ldap" if ldap is not None else None,
            "oidc": sso}


def password_login(ctx: ServerContext, username: str, password: str, token_name: str) -> LoginOut:
    """Check the name and password with the directory, bring the user up to date, hand out a token."""
    ldap = ctx.settings.ldap
    user_id, name, unix_user, labs = _authenticate(ctx, username, password)
    assert ldap is not None
    token = tokens.create(ctx, user_id, token_name, ldap.token_lifetime_s)
    return LoginOut(name=name, unix_user=unix_user, labs=labs, token=token.token, expires=token.expires)


def session_user(ctx: ServerContext, username: str, password: str) -> tuple[int, str]:
    """(user id, the hash a web session is signed with) after a password login; raises as `password_login`.
    A web session needs no API token, so none is made."""
    user_id = _authenticate(ctx, username, password)[0]
    with ctx.db.read() as s:
        user = s.get(UserRow, user_id)
        assert user is not None
        return user.id, user.token_hash


def _authenticate(ctx: ServerContext, username: str, password: str) -> tuple[int, str, str, list[str]]:
    from nanum.server.directory import DirectoryUnavailable, LoginRefused, directory_for

    ldap = ctx.settings.ldap
    if ldap is None:
        raise BadRequest("this server takes no passwords; log in with an API token: nanum login URL --token TOKEN")
    name = username.strip()
    key = (ldap.url, name.lower())
    _refuse_guessing(key, name)
    try:
        person = directory_for(ldap).authenticate(name, password)
    except LoginRefused as exc:
        with _lock:
            _failures.setdefault(key, []).append(time.monotonic())
        raise Unauthorized(str(exc)) from None
    except DirectoryUnavailable as exc:
        log.warning("%s", exc)
        raise DirectoryDown("the directory cannot be reached just now; try again in a minute, or use an API "
                            "token (nanum login URL --token TOKEN)") from None
    found = _bring_in(ctx, person)
    with _lock:
        _checked[(ldap.url, found[1])] = time.monotonic()
        _failures.pop(key, None)
    return found


def _refuse_guessing(key: tuple[str, str], name: str) -> None:
    now = time.monotonic()
    with _lock:
        recent = [t for t in _failures.get(key, []) if t > now - FAILURE_WINDOW_S]
        _failures[key] = recent
        if len(_failures) > 100_000:  # names nobody has: keep the table bounded
            _failures.clear()
    if len(recent) >= MAX_FAILURES:
        wait = int(recent[0] + FAILURE_WINDOW_S - now) // 60 + 1
        raise TooManyFailures(f"too many failed logins for {name}; wait {wait} minute{'s' if wait != 1 else ''} "
                              "and try again")


def due(ctx: ServerContext, name: str) -> bool:
    """Whether directory user `name` is to be checked again (no I/O: cheap on every request)."""
    ldap = ctx.settings.ldap
    if ldap is None:
        return False
    with _lock:
        return time.monotonic() - _checked.get((ldap.url, name), float("-inf")) >= ldap.recheck_s


def recheck(ctx: ServerContext, user_id: int, name: str, source: str | None) -> None:
    """For a directory user: ask the directory again (at most every `recheck_s`) whether they may still come in;
    disable them here and raise Unauthorized when not."""
    from nanum.server.directory import DirectoryUnavailable, directory_for

    ldap = ctx.settings.ldap
    if source != "ldap" or ldap is None:
        return
    key, now = (ldap.url, name), time.monotonic()
    with _lock:
        if now - _checked.get(key, float("-inf")) < ldap.recheck_s:
            return
    try:
        why = directory_for(ldap).standing(name)
    except DirectoryUnavailable as exc:
        log.warning("%s; %s keeps working until it answers", exc, name)
        return
    if why is None:
        with _lock:
            _checked[key] = now
        return
    with ctx.db.write() as s:
        s.execute(update(UserRow).where(UserRow.id == user_id).values(disabled=True))
        eligibility.mark_owner(s, user_id, True)
    ctx.caches.callers.clear()
    log.warning("directory user %s is %s: disabled", name, why)
    raise Unauthorized(f"user {name} is disabled: the directory account is {why}; ask an admin if that is a "
                       "mistake")


def _bring_in(ctx: ServerContext, person: object) -> tuple[int, str, str, list[str]]:
    """Create or update the user for a directory `person`; (id, name, unix account, labs)."""
    from nanum.server.directory import DirectoryUser

    assert isinstance(person, DirectoryUser)
    now = ctx.clock()
    with ctx.db.write() as s:
        user = s.scalars(select(UserRow).where(UserRow.name == person.uid)).first()
        if user is None:
            user = UserRow(name=person.uid, token_hash=hash_token(new_token()), admin=False, decayed_usage=0.0,
                           decayed_at=now, created=now)
            s.add(user)
            s.flush()
        if user.disabled:  # the directory lets them in again: so do their queued jobs
            eligibility.mark_owner(s, user.id, False)
        user.source, user.unix_user, user.uid_number, user.disabled = "ldap", person.uid, person.uid_number, False
        user.email = person.email or user.email
        labs = sync_labs(s, user, person.labs, now)
        out = (user.id, user.name, person.uid, labs)
    ctx.caches.callers.clear()
    ctx.caches.forget_labs()
    return out


def sync_labs(s: Session, user: UserRow, given: tuple[str, ...], now: float,
              managed: tuple[str, ...] | None = None) -> list[str]:
    """Bring a user's labs to what an identity provider gives: join `given` (made if missing), leave labs no
    longer given (a lab they manage stays, unless `managed` is given: then exactly those are managed, and the
    rest of their labs are plain memberships). Returns the user's labs, sorted; keeps a default lab among them."""
    wanted = set(given) | set(managed or ())
    rows = {lab: row for lab, row in s.execute(select(LabRow.name, MembershipRow).join(
        MembershipRow, MembershipRow.lab_id == LabRow.id).where(MembershipRow.user_id == user.id))}
    for lab, row in rows.items():
        if lab not in wanted and (managed is not None or row.role != MANAGER):
            s.delete(row)
        elif managed is not None:
            row.role = MANAGER if lab in managed else MEMBER
    for lab in sorted(wanted - set(rows)):
        role = MANAGER if managed is not None and lab in managed else MEMBER
        s.add(MembershipRow(user_id=user.id, lab_id=ensure_lab(s, lab, now).id, role=role))
    s.flush()
    labs = sorted(s.scalars(select(LabRow.name).join(MembershipRow, MembershipRow.lab_id == LabRow.id)
                            .where(MembershipRow.user_id == user.id)))
    current = s.scalar(select(LabRow.name).where(LabRow.id == user.default_lab_id)) if user.default_lab_id else None
    if current not in labs:
        first = given[0] if given else (labs[0] if labs else None)
        user.default_lab_id = s.scalar(select(LabRow.id).where(LabRow.name == first)) if first else None
    return labs


def caller_by_token_hash(ctx: ServerContext, digest: str) -> Caller | None:
    """The user holding this token (their first, or one of `tokens`); None: nobody. Raises Unauthorized for an
    expired token or a disabled user."""
    with ctx.db.read() as s:
        user = s.scalars(select(UserRow).where(UserRow.token_hash == digest)).first()
        if user is None:
            user = tokens.user_for(ctx, s, digest)
        if user is None:
            return None
        accounts.refuse_disabled(user)
        caller = accounts.caller_for(s, user)
    if caller.directory:
        recheck(ctx, caller.id, caller.name, "ldap")
    return caller
