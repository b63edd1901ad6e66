"""Routes for bringing people in and letting them in: bulk import (admin), API tokens (everyone's own), and
logging in with a directory password (no token needed)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Path, Query, Response

from nanum.server.auth import AdminDep, CallerDep, Context
from nanum.server.identity import (
    AuthMethods,
    ImportIn,
    ImportOut,
    LoginIn,
    LoginOut,
    OidcLoginIn,
    TokenIn,
    TokenInfo,
    TokenNew,
)
from nanum.server.inputs import WHOLE, KnownQuery
from nanum.server.limits import MAX_STORED_ID
from nanum.server.services import logins, onboarding, sso, tokens

OfUser = Annotated[str | None, Query(max_length=64, description="another user's (admins only)")]

router = APIRouter(tags=["accounts"], route_class=KnownQuery)


@router.post("/users/import")
def import_users(body: ImportIn, ctx: Context, admin: AdminDep) -> ImportOut:
    """Create or update many users at once (name, Unix account, labs, role, email): each listed user ends with
    exactly what is listed; the same list again changes nothing. New users' tokens are in the reply only."""
    return onboarding.import_users(ctx, admin.name, body)


@router.post("/users/{name}/disable")
def disable_user(name: Annotated[str, Path(max_length=64)], ctx: Context, admin: AdminDep) -> dict[str, Any]:
    """Disable a user (admin): their tokens and sessions are refused at once, their pending jobs stay queued
    but do not start ("owner's account is disabled"). Directory users are disabled in the directory."""
    return onboarding.set_disabled(ctx, admin.name, name, True)


@router.post("/users/{name}/enable")
def enable_user(name: Annotated[str, Path(max_length=64)], ctx: Context, admin: AdminDep) -> dict[str, Any]:
    """Enable a disabled user again (admin): their tokens work and their queued jobs may start."""
    return onboarding.set_disabled(ctx, admin.name, name, False)


@router.post("/tokens", status_code=201)
def create_token(body: TokenIn, ctx: Context, caller: CallerDep) -> TokenNew:
    """A new API token for yourself (shown only here), lasting `expires_in_s` seconds or until revoked."""
    return tokens.create(ctx, caller.id, body.name, body.expires_in_s)


@router.get("/tokens")
def list_tokens(ctx: Context, caller: CallerDep, user: OfUser = None) -> list[TokenInfo]:
    """Your API tokens (never their values); id 0 is your first token."""
    return tokens.list_tokens(ctx, caller, user)


@router.delete("/tokens/{token_id}", status_code=204)
def revoke_token(token_id: Annotated[int, WHOLE, Path(ge=0, le=MAX_STORED_ID)], ctx: Context, caller: CallerDep,
                 user: OfUser = None) -> Response:
    """Revoke one of your tokens at once (id 0: your first token)."""
    tokens.revoke(ctx, caller, token_id, user)
    return Response(status_code=204)


@router.get("/auth")
def auth_methods(ctx: Context) -> AuthMethods:
    """How people log in here: with an API token always; with their directory password where one is set."""
    return AuthMethods.model_validate(logins.methods(ctx))


@router.post("/login")
def login(body: LoginIn, ctx: Context) -> LoginOut:
    """Log in with a directory name and password (401 if wrong, disabled or unknown): the user is made or brought
    up to date from the directory, and gets an API token that expires (the server's --ldap-token-days)."""
    return logins.password_login(ctx, body.username, body.password, body.token_name)


@router.post("/login/oidc")
def oidc_login(body: OidcLoginIn, ctx: Context) -> LoginOut:
    """Trade an ID token from this server's single sign-on provider (`nanum login --oidc` gets one by the device
    flow) for an API token that expires (the server's --oidc-token-days). The token must be signed by the
    provider, for this server's client, and unexpired (401 with the reason if not); the user is made or brought
    up to date from its claims."""
    return sso.id_token_login(ctx, body.id_token, body.token_name)
