"""Dashboard sessions: log in with an API token, stay logged in with a signed cookie, and CSRF-safe forms.

The session cookie is `USER.EXPIRES.SIGNATURE`, HttpOnly, SameSite=Strict (Secure over HTTPS), where the
signature is an HMAC (the server's `web.secret`) over the user, the expiry and the user's token hash: replacing
a user's token ends their sessions. Every form carries a CSRF token, an HMAC of the session cookie, checked on
POST; the login form, before there is a session, uses a random cookie it must echo (double submit).
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
from urllib.parse import quote

from fastapi import Request
from fastapi.responses import Response
from sqlalchemy import select
from starlette.concurrency import run_in_threadpool

from nanum.server.callers import Caller, hash_token
from nanum.server.context import ServerContext
from nanum.server.errors import Unauthorized
from nanum.server.services import accounts, logins, monitor_settings
from nanum.store import UserRow

COOKIE = "nanum_session"
LOGIN_COOKIE = "nanum_login"
LIFETIME_S = 12 * 3600


class LoginRequired(Exception):
    """The page needs a session; the handler sends the browser to the login page (or answers 401 to JSON)."""


class CsrfFailed(Exception):
    """A form arrived without the right CSRF token."""


def secret(request: Request) -> bytes:
    found: bytes | None = getattr(request.app.state, "web_secret", None)
    if found is None:
        found = monitor_settings.web_secret(request.app.state.ctx)
        request.app.state.web_secret = found
    return found


def _sign(key: bytes, message: str) -> str:
    return hmac.new(key, message.encode(), hashlib.sha256).hexdigest()[:40]


# -- logging in and out ----------------------------------------------------------------------------------------


def user_for_token(ctx: ServerContext, token: str) -> tuple[int, str] | None:
    """(user id, the hash a session is signed with) of the user holding this API token (their first or another
    one that has not expired); None for no such token or a disabled user."""
    from nanum.server.services import tokens

    digest = hash_token(token.strip())
    try:
        with ctx.db.read() as s:
            user = s.scalars(select(UserRow).where(UserRow.token_hash == digest)).first() or tokens.user_for(
                ctx, s, digest)
            return None if user is None or user.disabled else (user.id, user.token_hash)
    except Unauthorized:
        return None


def start(request: Request, response: Response, user_id: int, token_hash: str) -> None:
    expires = int(time.time() + LIFETIME_S)
    value = f"{user_id}.{expires}.{_sign(secret(request), f'{user_id}.{expires}.{token_hash}')}"
    _set(request, response, COOKIE, value, LIFETIME_S)
    response.delete_cookie(LOGIN_COOKIE, path="/")


def end(response: Response) -> None:
    response.delete_cookie(COOKIE, path="/")


def login_nonce(request: Request) -> str:
    """The login form's CSRF token: the random value of a short-lived cookie (`keep_login_nonce` sets it)."""
    return request.cookies.get(LOGIN_COOKIE) or secrets.token_urlsafe(24)


def keep_login_nonce(request: Request, response: Response, nonce: str) -> None:
    _set(request, response, LOGIN_COOKIE, nonce, 3600)


def check_login_nonce(request: Request, sent: str) -> None:
    cookie = request.cookies.get(LOGIN_COOKIE, "")
    if not cookie or not hmac.compare_digest(cookie, sent):
        raise CsrfFailed()


def _set(request: Request, response: Response, name: str, value: str, max_age: int) -> None:
    response.set_cookie(
        name,
        value,
        max_age=max_age,
        path="/",
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
    )


# -- on every page ---------------------------------------------------------------------------------------------


async def caller(request: Request) -> Caller:
    """The logged-in user, or LoginRequired."""
    found = getattr(request.state, "caller", None)
    if isinstance(found, Caller):
        return found
    cookie = request.cookies.get(COOKIE, "")
    parts = cookie.split(".")
    if len(parts) != 3 or not parts[0].isdigit() or not parts[1].isdigit() or int(parts[1]) < time.time():
        raise LoginRequired()
    ctx: ServerContext = request.app.state.ctx
    key = "w:" + cookie
    found = ctx.caches.callers.get(key)
    if found is None:
        found = await run_in_threadpool(_verify, ctx, secret(request), parts)
        if found is None:
            raise LoginRequired()
        ctx.caches.callers.put(key, found)
    assert isinstance(found, Caller)
    if found.directory and logins.due(ctx, found.name):
        try:
            await run_in_threadpool(logins.recheck, ctx, found.id, found.name, "ldap")
        except Unauthorized:
            raise LoginRequired() from None
    request.state.caller = found
    return found


def _verify(ctx: ServerContext, key: bytes, parts: list[str]) -> Caller | None:
    with ctx.db.read() as s:
        user = s.get(UserRow, int(parts[0]))
        if user is None or user.disabled:
            return None
        if not hmac.compare_digest(_sign(key, f"{parts[0]}.{parts[1]}.{user.token_hash}"), parts[2]):
            return None
        caller = accounts.caller_for(s, user)
    try:
        logins.recheck(ctx, caller.id, caller.name, "ldap" if caller.directory else None)
    except Unauthorized:
        return None
    return caller


def csrf_token(request: Request) -> str:
    return _sign(secret(request), "csrf." + request.cookies.get(COOKIE, ""))


def check_csrf(request: Request, sent: str) -> None:
    if not request.cookies.get(COOKIE) or not hmac.compare_digest(csrf_token(request), sent or ""):
        raise CsrfFailed()


def login_url(request: Request) -> str:
    target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
    return "/login" if target == "/" else f"/login?next={quote(target, safe='')}"


def safe_next(target: str | None) -> str:
    """Only local paths: never send the browser elsewhere after logging in."""
    if not target or not target.startswith("/") or target.startswith("//") or "\\" in target:
        return "/"
    return target
