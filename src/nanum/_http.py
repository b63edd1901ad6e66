"""The SDK's HTTP transports: one kept-alive HTTP/1.1 connection through the standard library (quick to
import, which keeps `nanum` commands fast to start), or any httpx transport (mock transports in tests,
proxies, custom TLS).

Both turn failures into two exceptions: `ConnectFailed` (no server answered: refused, unknown host, the
connection dropped before an answer) and `Timeout` (connected, but no answer in time).
"""

from __future__ import annotations

import json as jsonlib
import re
import select
import socket
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

from nanum import __version__

if TYPE_CHECKING:
    import http.client

    import httpx

Params = Mapping[str, Any] | Sequence[tuple[str, Any]] | None


class ConnectFailed(Exception):
    """No server answered."""


class Timeout(Exception):
    """The server took the request but did not answer in time."""


class Response(NamedTuple):
    status: int
    reason: str
    headers: Mapping[str, str]  # names in lower case
    content: bytes

    def header(self, name: str) -> str | None:
        return self.headers.get(name.lower())

    @property
    def text(self) -> str:
        return self.content.decode("utf-8", errors="replace")

    def json(self) -> Any:
        return jsonlib.loads(self.content)


#: What a proxy in front of a server answers when the server behind it is down or does not answer (bad gateway,
#: unavailable, gateway timeout): for failing over, as good as no answer.
GATEWAY_FAILURES = frozenset({502, 503, 504})


def error_detail(body: bytes) -> str:
    """The `detail` of an error answer's JSON `body` as one line (FastAPI validation errors are lists of
    {loc, msg}); "" where it carries none (not JSON, or from something other than nanum)."""
    try:
        detail = jsonlib.loads(body).get("detail")
    except (ValueError, AttributeError):
        return ""
    if isinstance(detail, list):
        parts = []
        for item in detail:
            if not isinstance(item, dict):
                parts.append(str(item))
                continue
            loc = [str(p) for p in item.get("loc", ()) if p not in ("body", "query", "path")]
            parts.append(f"{'.'.join(loc)}: {item.get('msg', '')}" if loc else str(item.get("msg", item)))
        detail = "; ".join(parts)
    return _printable(f"{detail or ''}")


def _printable(text: str) -> str:
    """`text` on one line with nothing a terminal would act on: an answer may come from something that is not
    nanum, and ends up in a terminal or a log."""
    return "".join(c if c.isprintable() else " " for c in text)


def unexplained(said: str, status: int, text: str, server: str, option: str) -> str:
    """`said` ("the server at URL answered 404 Not Found to ...") completed for an error answer that carries no
    nanum message: from something other than nanum at `server` (another web server, a proxy in front of nanum)
    or from nanum failing. `text`, the answer's body, is shown only where it is one short line (a proxy's HTML
    error page is not); `option` is where the user gave the server's URL."""
    text = text.strip()
    if text and len(text) <= 200 and text.isprintable() and not text.startswith("<"):
        said += f" ({text})"
    if status >= 500:
        return f"{said}; its log, or that of a proxy in front of it, says why"
    return f"{said}, which is not how nanum answers; is {server} a nanum server? ({option})"


class HttpTransport(Protocol):
    """Sends one request to `path` under the base URL it was made for and returns the whole response."""

    def request(self, method: str, path: str, *, json: Any = None, params: Params = None) -> Response: ...

    def close(self) -> None: ...


class StdlibTransport:
    """HTTP/1.1 with `http.client` over one connection, reopened when the server has closed it.

    A request that fails on a reused connection is sent again on a fresh one only when it is a GET (a POST
    might have been acted on)."""

    def __init__(self, base_url: str, headers: Mapping[str, str], timeout: float) -> None:
        scheme, host, port, path = split_url(base_url)
        if scheme not in ("http", "https") or not host:
            raise ValueError(f"{base_url!r} is not an http:// or https:// URL")
        self._https = scheme == "https"
        self._host, self._port = host, port
        self._base = path.rstrip("/")
        self._headers = {"Accept": "application/json", "User-Agent": f"nanum/{__version__}", **headers}
        self._timeout = timeout
        self._conn: http.client.HTTPConnection | PlainConnection | None = None

    def request(self, method: str, path: str, *, json: Any = None, params: Params = None) -> Response:
        body = None if json is None else jsonlib.dumps(json).encode()
        headers = {**self._headers, **({"Content-Type": "application/json"} if body is not None else {})}
        target = self._base + path + (f"?{query(params)}" if params else "")
        for attempt in (1, 2):
            conn, reused = self._connection()
            try:
                conn.request(method, target, body=body, headers=headers)
                answer = conn.getresponse()
                content = answer.read()
            except TimeoutError as exc:
                self.close()
                raise Timeout(str(exc)) from exc
            except OSError as exc:  # RemoteDisconnected, ConnectionResetError, BrokenPipeError, ...
                self.close()
                if reused and attempt == 1 and method == "GET":
                    continue
                raise ConnectFailed(str(exc)) from exc
            if answer.will_close:
                self.close()
            headers_out = {k.lower(): v for k, v in answer.getheaders()}
            return Response(answer.status, answer.reason, headers_out, content)
        raise AssertionError("not reached")

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def _connection(self) -> tuple[http.client.HTTPConnection | PlainConnection, bool]:
        """The open connection (and True), or a new one (and False); an idle connection the server has
        closed reads as ready, so it is replaced before use."""
        if self._conn is not None and self._conn.sock is not None:
            readable, _, _ = select.select([self._conn.sock], [], [], 0)
            if not readable:
                return self._conn, True
            self.close()
        conn = self._new_connection()
        try:
            conn.connect()
        except OSError as exc:
            raise ConnectFailed(str(exc)) from exc
        self._conn = conn
        return conn, False

    def _new_connection(self) -> http.client.HTTPConnection | PlainConnection:
        if self._https:
            import http.client
            import ssl

            return http.client.HTTPSConnection(self._host, self._port, timeout=self._timeout,
                                               context=ssl.create_default_context())
        return PlainConnection(self._host, self._port or 80, self._timeout)


_URL = re.compile(r"^(https?)://([A-Za-z0-9.-]+|\[[0-9A-Fa-f:.]+\])(?::(\d{1,5}))?(/[^?#]*)?$")
_SAFE = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.-~")


def split_url(url: str) -> tuple[str, str | None, int | None, str]:
    """(scheme, host, port, path) of a server URL, as `urllib.parse.urlsplit` reads it; that module (which
    imports `ipaddress`) loads only for URLs beyond `http[s]://host[:port][/path]`. Raises ValueError for a bad
    port."""
    if found := _URL.match(url):
        scheme, host, port, path = found.groups()
        if port is not None and int(port) > 65535:
            raise ValueError(f"port out of range in {url!r}")
        return scheme, host.strip("[]").lower(), None if port is None else int(port), path or ""
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    return parts.scheme, parts.hostname, parts.port, parts.path


def query(params: Params) -> str:
    """`urllib.parse.urlencode(params, doseq=True)`: a list or tuple value gives one pair per item."""
    pairs = params.items() if isinstance(params, Mapping) else params or ()
    out = []
    for key, value in pairs:
        for item in value if isinstance(value, list | tuple) else (value,):
            out.append(f"{_quote(key)}={_quote(item)}")
    return "&".join(out)


def _quote(value: Any) -> str:
    return "".join(chr(c) if c in _SAFE else "+" if c == 32 else f"%{c:02X}" for c in str(value).encode())


class PlainConnection:
    """HTTP/1.1 over a plain socket, with the part of `http.client.HTTPConnection`'s interface the transport
    uses: `http.client` imports the `email` package, which alone costs a `nanum` command a third of its start.

    It reads what a server may send: a body of `Content-Length` bytes, a chunked body, or one that ends when the
    server closes the connection; none for HEAD, 1xx, 204 and 304."""

    def __init__(self, host: str, port: int, timeout: float) -> None:
        self.host, self.port, self.timeout = host, port, timeout
        self.sock: socket.socket | None = None
        self._method = "GET"
        #: what was read and not yet taken: a bytearray, which grows in place (a large answer arrives in
        #: thousands of reads; `bytes` copied all read so far at each, 30 s for a 90 MB listing)
        self._buffer = bytearray()

    def connect(self) -> None:
        self.sock = socket.create_connection((self.host, self.port), self.timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def close(self) -> None:
        if self.sock is not None:
            self.sock.close()
            self.sock = None
        self._buffer.clear()

    def request(self, method: str, target: str, body: bytes | None = None,
                headers: Mapping[str, str] | None = None) -> None:
        if self.sock is None:
            self.connect()
        host = f"[{self.host}]" if ":" in self.host else self.host
        host = host if self.port == 80 else f"{host}:{self.port}"
        lines = [f"{method} {target} HTTP/1.1", f"Host: {host}", f"Content-Length: {len(body or b'')}"]
        lines += [f"{k}: {v}" for k, v in (headers or {}).items()]
        self._method = method
        assert self.sock is not None
        self.sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + (body or b""))

    def getresponse(self) -> PlainResponse:
        while True:
            head = self._head()
            status_line, *header_lines = head.split("\r\n")
            version, _, rest = status_line.partition(" ")
            code, _, reason = rest.partition(" ")
            if not code.isdigit():
                raise ConnectionError(f"not an HTTP response: {status_line[:80]!r}")
            status = int(code)
            if status != 100:  # a 100 Continue is followed by the real answer
                break
        headers = [(k.strip(), v.strip()) for k, _, v in (line.partition(":") for line in header_lines) if k]
        found = {k.lower(): v for k, v in headers}
        will_close = found.get("connection", "").lower() == "close" or version == "HTTP/1.0"
        if self._method == "HEAD" or status in (204, 304) or 100 <= status < 200:
            content = b""
        elif "chunked" in found.get("transfer-encoding", "").lower():
            content = self._chunked()
        elif "content-length" in found:
            content = self._exactly(int(found["content-length"]))
        else:
            content, will_close = self._until_close(), True
        return PlainResponse(status, reason, headers, content, will_close)

    def _fill(self) -> None:
        assert self.sock is not None
        data = self.sock.recv(65536)
        if not data:
            raise ConnectionResetError("the server closed the connection")
        self._buffer += data

    def _head(self) -> str:
        while (end := self._buffer.find(b"\r\n\r\n")) < 0:
            self._fill()
        return self._take(end, 4).decode("latin-1")

    def _exactly(self, n: int) -> bytes:
        while len(self._buffer) < n:
            self._fill()
        return self._take(n)

    def _line(self) -> bytes:
        while (end := self._buffer.find(b"\r\n")) < 0:
            self._fill()
        return self._take(end, 2)

    def _take(self, n: int, skip: int = 0) -> bytes:
        """The buffer's first `n` bytes, dropping `skip` more after them."""
        data = bytes(self._buffer[:n])
        del self._buffer[:n + skip]  # from the front of a bytearray: no copy of the rest
        return data

    def _chunked(self) -> bytes:
        parts = []
        while (size := int(self._line().split(b";")[0].strip() or b"0", 16)) > 0:
            parts.append(self._exactly(size))
            self._line()
        while self._line():  # trailers, then the empty line
            pass
        return b"".join(parts)

    def _until_close(self) -> bytes:
        try:
            while True:
                self._fill()
        except ConnectionResetError:
            pass
        return self._take(len(self._buffer))


class PlainResponse(NamedTuple):
    status: int
    reason: str
    headers: list[tuple[str, str]]
    content: bytes
    will_close: bool

    def read(self) -> bytes:
        return self.content

    def getheaders(self) -> list[tuple[str, str]]:
        return self.headers


class FailoverTransport:
    """Several servers, in turn (`--server URL1,URL2`, two servers on one database): requests go to the one that
    answered last; when no server answers there (`ConnectFailed`, or a proxy in front of it answers that it cannot
    reach it: `GATEWAY_FAILURES`), the others are tried in order and the first that answers is kept. A `Timeout` is
    not failed over: that server took the request. (A request a proxy dropped may have reached its server, as one
    whose connection dropped may have: a submission is sent again with its request id, which makes it once.)"""

    def __init__(self, transports: Sequence[HttpTransport]) -> None:
        self._transports = list(transports)
        #: the index of the server that answered last
        self.current = 0

    def request(self, method: str, path: str, *, json: Any = None, params: Params = None) -> Response:
        count = len(self._transports)
        for step in range(count):
            index = (self.current + step) % count
            try:
                response = self._transports[index].request(method, path, json=json, params=params)
            except ConnectFailed:
                if step == count - 1:
                    raise
                continue
            if response.status in GATEWAY_FAILURES and step < count - 1:
                continue
            self.current = index
            return response
        raise ConnectFailed("no server to try")

    def close(self) -> None:
        for transport in self._transports:
            transport.close()


class HttpxTransport:
    """The same requests through an httpx transport."""

    def __init__(self, base_url: str, headers: Mapping[str, str], timeout: float,
                 transport: httpx.BaseTransport) -> None:
        import httpx

        self._httpx = httpx
        self._client = httpx.Client(base_url=base_url, headers=dict(headers), timeout=timeout, transport=transport)

    def request(self, method: str, path: str, *, json: Any = None, params: Params = None) -> Response:
        httpx = self._httpx
        try:
            r = self._client.request(method, path, json=json, params=params)  # type: ignore[arg-type]
        except (httpx.ConnectError, httpx.ConnectTimeout, httpx.RemoteProtocolError, httpx.ReadError,
                httpx.WriteError) as exc:
            raise ConnectFailed(str(exc)) from exc
        except httpx.TimeoutException as exc:
            raise Timeout(str(exc)) from exc
        return Response(r.status_code, r.reason_phrase, {k.lower(): v for k, v in r.headers.items()}, r.content)

    def close(self) -> None:
        self._client.close()
