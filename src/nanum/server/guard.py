"""The ASGI wrapper in front of every route: caps request bodies and refuses NUL bytes in URLs.

A body larger than its cap is refused with 413 before a route sees it: at once when `Content-Length` says so,
else as soon as the bytes received pass the cap (a chunked upload). A NUL byte in the path, the query string
or a form body is refused with 422: the store cannot hold one (PostgreSQL refuses it in text) and a job could
not use one. It is part of the app, so it holds under uvicorn as in tests.
"""

from __future__ import annotations

import contextlib
import json
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from nanum.server.limits import MAX_AGENT_BODY, MAX_BODY, MAX_NOTEBOOK_BODY

AGENT_PREFIX = "/api/v1/agent/"
NOTEBOOK_PREFIX = "/notebooks/"


class _Refused(Exception):
    pass


class RequestGuard:
    def __init__(self, app: ASGIApp, max_body: int = MAX_BODY, max_agent_body: int = MAX_AGENT_BODY) -> None:
        self.app, self.max_body, self.max_agent_body = app, max_body, max_agent_body

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if "\0" in scope["path"] or b"%00" in scope["query_string"].lower() or b"\0" in scope["query_string"]:
            await _refuse(send, 422, "the URL contains a NUL byte; remove it")
            return
        cap = self.max_agent_body if scope["path"].startswith(AGENT_PREFIX) else self.max_body
        if scope["path"].startswith(NOTEBOOK_PREFIX):
            cap = MAX_NOTEBOOK_BODY
        headers = dict(scope["headers"])
        length = headers.get(b"content-length", b"").strip()
        if length.isdigit() and int(length) > cap:
            await _refuse(send, 413, _too_large(cap))
            return
        form = headers.get(b"content-type", b"").startswith(b"application/x-www-form-urlencoded")
        await _Guarded(self.app, cap, form).run(scope, receive, send)


class _Guarded:
    """One request: counts the body as the route reads it; past the cap, the route's answer is replaced."""

    def __init__(self, app: ASGIApp, cap: int, form: bool) -> None:
        self.app, self.cap, self.form = app, cap, form
        self.received, self.tail = 0, b""
        self.refusal: tuple[int, str] | None = None
        self.started = False

    async def run(self, scope: Scope, receive: Receive, send: Send) -> None:
        async def guarded_receive() -> Message:
            message = await receive()
            if message["type"] == "http.request":
                self._check(message.get("body", b""))
            return message

        async def guarded_send(message: Message) -> None:
            if self.refusal is None:
                self.started = self.started or message["type"] == "http.response.start"
                await send(message)

        with contextlib.suppress(_Refused):
            await self.app(scope, guarded_receive, guarded_send)
        if self.refusal is not None and not self.started:
            await _refuse(send, *self.refusal)

    def _check(self, chunk: bytes) -> None:
        self.received += len(chunk)
        if self.received > self.cap:
            self.refusal = (413, _too_large(self.cap))
        elif self.form and b"%00" in (self.tail + chunk).lower():
            self.refusal = (422, "the form contains a NUL byte; remove it")
        self.tail = chunk[-2:]
        if self.refusal is not None:
            raise _Refused


def _too_large(cap: int) -> str:
    return f"the request body is larger than {cap >> 20} MiB; send less (docs/api.md lists the limits)"


async def _refuse(send: Send, status: int, detail: str) -> None:
    body = json.dumps({"detail": detail}).encode()
    headers: list[Any] = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
