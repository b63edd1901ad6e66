"""Logging in with single sign-on (the dashboard's "Log in with ..." button, `nanum login --oidc`): who the
OpenID Connect provider says a person is becomes a nanum user.

A person is found by the provider's issuer and their `sub` there, never by name alone: the first login makes the
user (`source` oidc) with the name and Unix account the claims give, and refuses when that name is already taken
by someone who does not log in with this provider (an admin renames or removes that user first). Each login
brings the labs up to date from the groups (`services.logins.sync_labs`), and with a manager-group rule, who
manages which lab. A disabled user is refused; the provider cannot enable them again (`nanum user enable` does).
A command-line login hands out an API token that lasts `token_lifetime_s`; a web login starts a session.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from nanum.server.callers import hash_token, new_token
from nanum.server.context import ServerContext
from nanum.server.errors import ApiError, BadRequest, Conflict, Unauthorized
from nanum.server.identity import LoginOut
from nanum.server.services import tokens
from nanum.server.services.logins import sync_labs
from nanum.store import UserRow

if TYPE_CHECKING:
    from nanum.server.oidc import OidcPerson, Provider

log = logging.getLogger(__name__)

NO_SSO = "this server has no single sign-on; log in with an API token: nanum login URL --token TOKEN"


class ProviderDown(ApiError):
    status = 503


def id_token_login(ctx: ServerContext, id_token: str, token_name: str) -> LoginOut:
    """Check an ID token from the provider, bring its person in, hand out an API token that expires."""
    oidc = ctx.settings.oidc
    if oidc is None:
        raise BadRequest(NO_SSO)
    user_id, name, unix_user, labs = _bring_in(ctx, _verified(ctx, lambda p: p.verify(id_token)))
    token = tokens.create(ctx, user_id, token_name, oidc.token_lifetime_s)
    return LoginOut(name=name, unix_user=unix_user, labs=labs, token=token.token, expires=token.expires)


def code_login(ctx: ServerContext, code: str, redirect_uri: str, verifier: str, nonce: str) -> tuple[int, str]:
    """(user id, the hash a web session is signed with) for the code the provider sent the browser back with."""
    if ctx.settings.oidc is None:
        raise BadRequest(NO_SSO)
    claims = _verified(ctx, lambda p: p.verify(p.exchange_code(code, redirect_uri, verifier), nonce=nonce))
    user_id = _bring_in(ctx, claims)[0]
    with ctx.db.read() as s:
        user = s.get(UserRow, user_id)
        assert user is not None
        return user.id, user.token_hash


def _verified(ctx: ServerContext, check: Callable[[Provider], dict[str, Any]]) -> OidcPerson:
    """The person of the claims `check(provider)` returns; Unauthorized / ProviderDown in one sentence."""
    from nanum.server.oidc import ProviderUnavailable, TokenRefused, provider_for

    assert ctx.settings.oidc is not None
    provider = provider_for(ctx.settings.oidc)
    try:
        return provider.person(check(provider))
    except TokenRefused as exc:
        raise Unauthorized(str(exc)) from None
    except ProviderUnavailable as exc:
        log.warning("%s", exc)
        raise ProviderDown("the single sign-on provider cannot be reached just now; try again in a minute, or "
                           "use an API token (nanum login URL --token TOKEN)") from None


def _bring_in(ctx: ServerContext, person: OidcPerson) -> tuple[int, str, str, list[str]]:
    """Create or update the user for `person`; (id, name, unix account, labs)."""
    assert ctx.settings.oidc is not None
    managed = person.managed if ctx.settings.oidc.manager_group else None
    with ctx.db.write() as s:
        user = s.scalars(select(UserRow).where(UserRow.oidc_issuer == person.issuer,
                                               UserRow.oidc_subject == person.subject)).first()
        if user is None:
            user = _new_user(s, person, ctx.clock())
        if user.disabled:
            raise Unauthorized(f"user {user.name} is disabled; ask an admin if that is a mistake")
        user.unix_user, user.email = person.unix_user, person.email or user.email
        labs = sync_labs(s, user, person.labs, ctx.clock(), managed)
        out = (user.id, user.name, person.unix_user, labs)
    ctx.caches.callers.clear()
    ctx.caches.forget_labs()
    log.info("single sign-on: %s (%s at %s) in labs %s", out[1], person.subject, person.issuer, labs)
    return out


def _new_user(s: Session, person: OidcPerson, now: float) -> UserRow:
    if s.scalars(select(UserRow.id).where(UserRow.name == person.name)).first() is not None:
        raise Conflict(f"the user name {person.name} is taken by someone who does not log in with single sign-on; "
                       "an admin must rename or remove that user first")
    user = UserRow(name=person.name, token_hash=hash_token(new_token()), admin=False, decayed_usage=0.0,
                   decayed_at=now, created=now, source="oidc", oidc_issuer=person.issuer,
                   oidc_subject=person.subject)
    s.add(user)
    s.flush()
    return user
