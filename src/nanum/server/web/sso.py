"""Logging in to the dashboard with single sign-on: "Log in with <provider>" sends the browser to the provider
(authorization code flow with PKCE S256, a state and a nonce), and the provider sends it back to
`/login/oidc/callback` with a code that the server trades for an ID token, checks, and turns into a session.

The state, nonce, PKCE verifier and where to go afterwards travel in a short-lived cookie signed with the web
secret (SameSite=Lax, so that it comes back with the provider's redirect, and only to /login/oidc). The callback
answers with a page that moves on by itself: a session cookie is SameSite=Strict, and a browser would not send it
on a redirect that began at the provider's site.
"""

from __future__ import annotations

import base64
import hmac
import json
import secrets
import time
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from markupsafe import escape
from starlette.concurrency import run_in_threadpool

from nanum.server.errors import ApiError
from nanum.server.services import sso
from nanum.server.web import session
from nanum.server.web.render import SECURITY_HEADERS, page

router = APIRouter(include_in_schema=False)

FLOW_COOKIE = "nanum_oidc"
FLOW_PATH = "/login/oidc"
FLOW_LIFETIME_S = 600


@router.get("/login/oidc")
async def start(request: Request, next: str = "/") -> Response:
    """Send the browser to the provider's login."""
    from nanum.server.oidc import ProviderUnavailable, provider_for

    oidc = request.app.state.ctx.settings.oidc
    if oidc is None:
        return _failed(request, sso.NO_SSO, 404)
    flow: dict[str, Any] = {"state": secrets.token_urlsafe(24), "nonce": secrets.token_urlsafe(24),
            "verifier": secrets.token_urlsafe(48), "next": session.safe_next(next),
            "expires": int(time.time()) + FLOW_LIFETIME_S}
    try:
        url = await run_in_threadpool(provider_for(oidc).authorization_url, _callback_url(request), flow["state"],
                                      flow["nonce"], flow["verifier"])
    except ProviderUnavailable:
        return _failed(request, "the single sign-on provider cannot be reached just now; try again in a minute, "
                                "or log in with an API token", 503)
    response = RedirectResponse(url, status_code=303)
    response.set_cookie(FLOW_COOKIE, _seal(request, flow), max_age=FLOW_LIFETIME_S, path=FLOW_PATH, httponly=True,
                        samesite="lax", secure=request.url.scheme == "https")
    return response


@router.get("/login/oidc/callback")
async def callback(request: Request, code: str = "", state: str = "", error: str = "",
                   error_description: str = "") -> Response:
    """Where the provider sends the browser back: check the state, trade the code, start a session."""
    flow = _unseal(request, request.cookies.get(FLOW_COOKIE, ""))
    if flow is None or not state or not hmac.compare_digest(str(flow["state"]), state):
        return _failed(request, "This single sign-on answer does not belong to a login started here (or it took "
                                "longer than 10 minutes); log in again.", 400)
    if error:
        return _failed(request, f"The provider did not log you in: {error_description or error}.", 401)
    try:
        found = await run_in_threadpool(sso.code_login, request.app.state.ctx, code, _callback_url(request),
                                        str(flow["verifier"]), str(flow["nonce"]))
    except ApiError as exc:
        return _failed(request, exc.detail, exc.status)
    target = session.safe_next(str(flow["next"]))
    html = (f'<!doctype html><meta http-equiv="refresh" content="0;url={escape(target)}"><title>nanum</title>'
            f'<p>Logged in. <a href="{escape(target)}">Continue</a></p>')
    response = HTMLResponse(html, headers=SECURITY_HEADERS)
    session.start(request, response, *found)
    response.delete_cookie(FLOW_COOKIE, path=FLOW_PATH)
    return response


def _callback_url(request: Request) -> str:
    return str(request.base_url).rstrip("/") + "/login/oidc/callback"


def _failed(request: Request, message: str, status: int) -> Response:
    nonce = session.login_nonce(request)
    ctx = request.app.state.ctx
    response = page(request, "login.html", None, status_code=status, next="/", error=message, nonce=nonce,
                    passwords=ctx.settings.ldap is not None, username="", sso=sso_name(ctx))
    session.keep_login_nonce(request, response, nonce)
    response.delete_cookie(FLOW_COOKIE, path=FLOW_PATH)
    return response


def sso_name(ctx: Any) -> str | None:
    """The provider's name for the login page's button; None without single sign-on."""
    return ctx.settings.oidc.name if ctx.settings.oidc is not None else None


def _seal(request: Request, flow: dict[str, Any]) -> str:
    body = base64.urlsafe_b64encode(json.dumps(flow, separators=(",", ":")).encode()).decode().rstrip("=")
    mac = hmac.new(session.secret(request), f"oidc.{body}".encode(), "sha256").hexdigest()
    return f"{body}.{mac}"


def _unseal(request: Request, value: str) -> dict[str, Any] | None:
    body, _, mac = value.partition(".")
    expected = hmac.new(session.secret(request), f"oidc.{body}".encode(), "sha256").hexdigest()
    if not body or not hmac.compare_digest(mac, expected):
        return None
    try:
        flow = json.loads(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))
    except ValueError:
        return None
    if not isinstance(flow, dict) or int(flow.get("expires", 0)) < time.time():
        return None
    return flow
