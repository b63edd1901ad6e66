"""A synchronous test client over `httpx.ASGITransport`: the real app, its lifespan, and real HTTP semantics.

The app runs on an event loop in a background thread (an anyio blocking portal), so tests stay synchronous and
several threads may call at once (a held heartbeat in one thread, a submit in another).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import anyio.from_thread
import httpx
from fastapi import FastAPI


class AsgiClient:
    def __init__(self, app: FastAPI, portal: anyio.from_thread.BlockingPortal, client: httpx.AsyncClient) -> None:
        self.app, self._portal, self._client = app, portal, client

    def request(self, method: str, url: str, **kw: Any) -> httpx.Response:
        return self._portal.call(lambda: self._client.request(method, url, **kw))

    @property
    def cookies(self) -> httpx.Cookies:
        """The cookie jar (responses' cookies are kept and sent back, as a browser would)."""
        return self._client.cookies

    def get(self, url: str, **kw: Any) -> httpx.Response:
        return self.request("GET", url, **kw)

    def post(self, url: str, **kw: Any) -> httpx.Response:
        return self.request("POST", url, **kw)

    def patch(self, url: str, **kw: Any) -> httpx.Response:
        return self.request("PATCH", url, **kw)


@contextlib.contextmanager
def serve(app: FastAPI) -> Iterator[AsgiClient]:
    """Start the app's lifespan on a background loop, yield a client, then shut the app down."""
    with anyio.from_thread.start_blocking_portal() as portal:
        lifespan = app.router.lifespan_context(app)
        portal.call(lifespan.__aenter__)
        client = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://nanum.test")
        try:
            yield AsgiClient(app, portal, client)
        finally:
            portal.call(client.aclose)
            portal.call(lifespan.__aexit__, None, None, None)
