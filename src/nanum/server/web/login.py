"""Logging in to the dashboard with a directory name and password (where the server has a directory) or an API
token, and out again; single sign-on's button leads to nanum.server.web.sso."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Form, Request
from fastapi.responses import RedirectResponse, Response
from starlette.concurrency import run_in_threadpool

from nanum.server.errors import ApiError
from nanum.server.services import logins
from nanum.server.web import session
from nanum.server.web.render import page
from nanum.server.web.sso import sso_name

router = APIRouter(include_in_schema=False)

UNKNOWN_TOKEN = (
    "That token is not known here: paste the token that nanum user add printed for you, or the admin's in "
    "$NANUM_HOME/admin-token."
)


@router.get("/login")
async def login_form(request: Request, next: str = "/") -> Response:
    return _form(request, next, None)


def _form(request: Request, next: str, error: str | None, username: str = "", status: int = 401) -> Response:
    nonce = session.login_nonce(request)
    passwords = request.app.state.ctx.settings.ldap is not None
    response = page(
        request, "login.html", None, status_code=status if error else 200, next=session.safe_next(next),
        error=error, nonce=nonce, passwords=passwords, username=username, sso=sso_name(request.app.state.ctx),
    )  # fmt: skip
    session.keep_login_nonce(request, response, nonce)
    return response


@router.post("/login")
async def login(
    request: Request,
    token: Annotated[str, Form()] = "",
    username: Annotated[str, Form(max_length=64)] = "",
    password: Annotated[str, Form(max_length=1024)] = "",
    nonce: Annotated[str, Form()] = "",
    next: Annotated[str, Form()] = "/",
) -> Response:
    session.check_login_nonce(request, nonce)
    found: tuple[int, str] | None
    if username.strip():
        try:
            found = await run_in_threadpool(logins.session_user, request.app.state.ctx, username, password)
        except ApiError as exc:
            return _form(request, next, exc.detail, username=username.strip(), status=exc.status)
    else:
        found = await run_in_threadpool(session.user_for_token, request.app.state.ctx, token) if token.strip() else None
    if found is None:
        return _form(request, next, UNKNOWN_TOKEN)
    response = RedirectResponse(session.safe_next(next), status_code=303)
    session.start(request, response, *found)
    return response


@router.post("/logout")
async def logout(request: Request, csrf: Annotated[str, Form()] = "") -> Response:
    session.check_csrf(request, csrf)
    response = RedirectResponse("/login", status_code=303)
    session.end(response)
    return response
