"""The connection under `nanum.client.Client`: where the server is, how each request goes and what its failure
means, and the retrying that rides out a server restart. The calls of the API are built on `Connection._call`
in the modules beside this one, one per part of the API.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Self, TypeVar
from urllib.parse import quote

from nanum._http import (
    GATEWAY_FAILURES,
    ConnectFailed,
    FailoverTransport,
    HttpTransport,
    Response,
    StdlibTransport,
    Timeout,
    error_detail,
    unexplained,
)
from nanum.client._errors import ApiError, NanumError, ServerUnreachable, _NoAnswer, _Refused
from nanum.servers import server_urls

if TYPE_CHECKING:
    import httpx

_T = TypeVar("_T")


def segment(name: str) -> str:
    """`name` (a node's, lab's, user's, environment's or dataset's) as one segment of an API path, percent-encoded.
    A name that would change which path is asked for (empty, `.`, `..`, or holding a `/`) is refused here: through
    a proxy that resolves `..`, it could reach another route with the caller's token."""
    if name in ("", ".", "..") or "/" in name:
        raise _Refused(f"{name!r} cannot be a name: names are never empty, '.' or '..', and have no '/'")
    return quote(name, safe="")


def resolve_settings(server: str | None = None, token: str | None = None) -> tuple[str | None, str | None]:
    """Server URL and token: the arguments, else NANUM_SERVER/NANUM_TOKEN, else the credentials file. A saved token
    goes with a server given otherwise only when every URL given is one it was saved for (`nanum login URL1,URL2`
    then `NANUM_SERVER=URL2` or `URL2,URL1`): it is never sent to a server it was not saved for."""
    server = server or os.environ.get("NANUM_SERVER") or None
    token = token or os.environ.get("NANUM_TOKEN") or None
    if server is None or token is None:
        from nanum.config import load_credentials

        saved = load_credentials()
        if server is None:
            server = saved.get("server")
            token = token or saved.get("token")
        elif token is None and server_urls(server) and set(server_urls(server)) <= set(
                server_urls(saved.get("server", ""))):
            token = saved.get("token")
    return server, token


#: Where the API lives under a server's URL.
API_PATH = "/api/v1"


def _transport(url: str, headers: dict[str, str], timeout: float,
               transport: httpx.BaseTransport | None) -> HttpTransport:
    base = f"{url}{API_PATH}"
    if transport is not None:
        from nanum._http import HttpxTransport

        return HttpxTransport(base, headers, timeout, transport)
    try:
        return StdlibTransport(base, headers, timeout)
    except ValueError:
        raise NanumError(f"{url!r} is not a server URL; give one like http://127.0.0.1:8765") from None


class Connection:
    """What every call of the API goes through: the servers given, the token, one kept-alive connection."""

    def __init__(
        self,
        server: str,
        token: str | None = None,
        *,
        transport: httpx.BaseTransport | None = None,
        timeout: float = 30.0,
    ) -> None:
        #: every server URL given (`URL1,URL2`: two servers on one database; the first that answers is used)
        self.servers = server_urls(server)
        if not self.servers:
            raise NanumError(f"{server!r} is not a server URL; give one like http://127.0.0.1:8765")
        if token and not (token.isascii() and token.isprintable()):
            raise NanumError("the API token (--token, NANUM_TOKEN or the one saved by `nanum login`) contains a "
                             "character no token has (a line break, a control character or a letter outside ASCII); "
                             "copy the token again")
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        each = [_transport(url, headers, timeout, transport) for url in self.servers]
        self._http: HttpTransport = each[0] if len(each) == 1 else FailoverTransport(each)

    @property
    def server(self) -> str:
        """The server URL in use: the one that answered last, when several were given."""
        return self.servers[self._http.current if isinstance(self._http, FailoverTransport) else 0]

    @classmethod
    def from_settings(cls, server: str | None = None, token: str | None = None) -> Self:
        """A client for the configured server (see `resolve_settings`)."""
        url, tok = resolve_settings(server, token)
        if url is None:
            raise NanumError(
                "no nanum server configured; start one with `nanum up`, or run "
                "`nanum login --server URL --token TOKEN`, or set NANUM_SERVER and NANUM_TOKEN"
            )
        return cls(url, tok)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    # -- plumbing -------------------------------------------------------------------------------------------

    def _call(
        self, method: str, path: str, *, json: Any = None, params: Any = None
    ) -> Response:
        try:
            response = self._http.request(method, path, json=json, params=params)
        except ConnectFailed as exc:
            raise ServerUnreachable(" or ".join(self.servers)) from exc
        except Timeout as exc:
            raise _NoAnswer(f"the nanum server at {self.server} did not answer in time") from exc
        if response.status >= 400:
            raise ApiError(response.status, error_detail(response.content)
                           or _unexplained(response, self.server, method, path))
        return response

    def _retrying(self, call: Callable[[], _T], deadline: float | None = None, outage_s: float = 60.0) -> _T:
        """Run `call`, retrying while the server is unreachable, or its proxy says so (`GATEWAY_FAILURES`), as
        during a restart, for up to `outage_s` seconds."""
        give_up = time.monotonic() + outage_s
        if deadline is not None:
            give_up = min(give_up, deadline)
        pause = 0.2
        while True:
            try:
                return call()
            except (ServerUnreachable, ApiError) as exc:
                if (isinstance(exc, ApiError) and exc.status not in GATEWAY_FAILURES) or time.monotonic() >= give_up:
                    raise
                time.sleep(pause)
                pause = min(pause * 2, 2.0)


def _unexplained(response: Response, server: str, method: str, path: str) -> str:
    said = f"the server at {server} answered {response.status} {response.reason} to {method} {API_PATH}{path}"
    return unexplained(said, response.status, response.text, server, "NANUM_SERVER, `nanum login`")
