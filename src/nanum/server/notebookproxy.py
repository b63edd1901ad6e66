"""Forwarding a notebook owner's traffic to the job's JupyterLab: HTTP with httpx (streamed back), websockets
with the `websockets` client, each request carrying `Authorization: token SECRET` (the job's secret, which
JupyterLab was started with). The browser never sees the secret; nanum's own session cookie and the owner's
API token never reach JupyterLab. Being token-authenticated, JupyterLab skips its XSRF and origin checks for
these requests; the proxy itself accepts only the owner (nanum.server.services.sessions), and nanum's session
cookie is SameSite=Strict, so another site cannot make a browser send one."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterable

import httpx
from fastapi import Request, WebSocket
from fastapi.responses import Response, StreamingResponse
from starlette.background import BackgroundTask
from starlette.websockets import WebSocketDisconnect

from nanum.server.services.sessions import NotReady, Target

__all__ = ["forward_http", "forward_websocket"]

#: Request headers not passed on: the connection's own, and the caller's nanum credentials.
DROPPED = frozenset({"host", "authorization", "connection", "keep-alive", "upgrade", "te", "trailer",
                     "transfer-encoding", "proxy-authorization", "origin", "referer"})
#: Response headers not passed back (the response is re-framed).
HOP = frozenset({"connection", "keep-alive", "transfer-encoding", "te", "trailer", "upgrade"})
NANUM_COOKIES = ("nanum_session", "nanum_login")


def _client(request: Request) -> httpx.AsyncClient:
    found: httpx.AsyncClient | None = getattr(request.app.state, "notebook_http", None)
    if found is None:
        found = httpx.AsyncClient(timeout=httpx.Timeout(30.0, read=None), follow_redirects=False, trust_env=False)
        request.app.state.notebook_http = found
    return found


def _cookie(header: str) -> str:
    """A Cookie header without nanum's own cookies."""
    kept = [c for c in header.split(";") if c.strip().split("=", 1)[0] not in NANUM_COOKIES]
    return ";".join(kept).strip()


def _headers(pairs: Iterable[tuple[str, str]], secret: str) -> list[tuple[str, str]]:
    out = []
    for name, value in pairs:
        lower = name.lower()
        if lower in DROPPED or lower.startswith("sec-websocket"):
            continue
        if lower == "cookie":
            value = _cookie(value)
            if not value:
                continue
        out.append((name, value))
    out.append(("Authorization", f"token {secret}"))
    return out


async def forward_http(request: Request, target: Target) -> Response:
    """Send `request` on to the notebook, its body as it arrives, and stream the answer back."""
    url = f"http://{target.address}{request.url.path}"
    has_body = "content-length" in request.headers or "transfer-encoding" in request.headers
    upstream = _client(request).build_request(
        request.method, url, params=request.url.query or None, content=request.stream() if has_body else None,
        headers=_headers(request.headers.items(), target.secret),
    )
    try:
        answer = await _client(request).send(upstream, stream=True)
    except httpx.HTTPError as exc:
        raise NotReady(f"the notebook does not answer ({type(exc).__name__}); it may be starting or ending",
                       starting=True) from None
    headers = [(k, v) for k, v in answer.headers.multi_items() if k.lower() not in HOP]
    response = StreamingResponse(answer.aiter_raw(), status_code=answer.status_code,
                                 background=BackgroundTask(answer.aclose))
    response.raw_headers = [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in headers]
    return response


async def forward_websocket(websocket: WebSocket, target: Target) -> None:
    """Join the owner's (not yet accepted) websocket to the notebook's at the same path, both ways."""
    from websockets.asyncio.client import connect
    from websockets.exceptions import WebSocketException

    query = websocket.url.query
    url = f"ws://{target.address}{websocket.url.path}" + (f"?{query}" if query else "")
    offered = [p.strip() for p in websocket.headers.get("sec-websocket-protocol", "").split(",") if p.strip()]
    headers = _headers(websocket.headers.items(), target.secret)
    try:
        upstream = await connect(url, additional_headers=headers, subprotocols=offered or None,  # type: ignore[arg-type]
                                 max_size=None, open_timeout=15, compression=None)
    except (TimeoutError, OSError, WebSocketException):
        await websocket.close(code=1011, reason="the notebook does not answer")
        return
    async with upstream:
        await websocket.accept(subprotocol=upstream.subprotocol)
        await _pump(websocket, upstream)


async def _pump(websocket: WebSocket, upstream: object) -> None:
    from websockets.asyncio.client import ClientConnection
    from websockets.exceptions import WebSocketException

    assert isinstance(upstream, ClientConnection)

    async def to_notebook() -> None:
        while True:
            message = await websocket.receive()
            if message["type"] == "websocket.disconnect":
                return
            data = message.get("bytes")
            await upstream.send(data if data is not None else message.get("text") or "")

    async def to_owner() -> None:
        async for data in upstream:
            if isinstance(data, bytes):
                await websocket.send_bytes(data)
            else:
                await websocket.send_text(data)

    tasks = [asyncio.create_task(to_notebook()), asyncio.create_task(to_owner())]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in tasks:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, WebSocketException, WebSocketDisconnect, RuntimeError):
                await task
        with contextlib.suppress(RuntimeError, WebSocketDisconnect):
            await websocket.close()
