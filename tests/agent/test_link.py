"""What an agent's log says when a heartbeat gets no answer: a server that took it but did not answer in time
(overloaded, stuck) is told apart from one that cannot be reached, over real sockets."""

from __future__ import annotations

import asyncio
import socket

import httpx
import pytest

from nanum.agent import link
from nanum.agent.link import Retry, ServerLink
from nanum.protocol import Heartbeat, NodeInfo
from tests.agent.conftest import SilentServer


def closed_port() -> str:
    with socket.create_server(("127.0.0.1", 0)) as s:
        return f"http://127.0.0.1:{s.getsockname()[1]}"


def beat() -> Heartbeat:
    node = NodeInfo(name="n1", hostname="n1", gpus=[], cpus=1, memory_mb=1024, unix_user="nobody")
    return Heartbeat(node=node, wait_s=0.2)


def send(servers: tuple[str, ...]) -> tuple[str, str]:
    """(the Retry message of one heartbeat to `servers`, the server the next one goes to)."""
    server_link = ServerLink(servers, "n1", "token")

    async def one() -> str:
        async with httpx.AsyncClient(base_url=server_link.server, headers=server_link.headers()) as client:
            with pytest.raises(Retry) as failed:
                await server_link.post(client, beat())
            return str(failed.value)

    return asyncio.run(one()), server_link.server


def test_a_server_that_takes_a_heartbeat_and_never_answers_is_said_to_be_overloaded(
        silent_server: SilentServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(link, "ANSWER_S", 0.3)
    message, _ = send((silent_server.url,))
    assert message == (f"the server at {silent_server.url} took the heartbeat but did not answer within 0.5 s "
                       "(ReadTimeout): it is overloaded or stuck")


def test_a_server_that_cannot_be_reached_is_said_so_and_the_next_one_is_tried(silent_server: SilentServer) -> None:
    down = closed_port()
    message, next_server = send((down, silent_server.url))
    assert message == f"cannot reach the server at {down} (ConnectError); trying {silent_server.url} next"
    assert next_server == silent_server.url


class Answering:
    """A real HTTP server on a free port that answers every request with `status` and `body`: another web server
    at the agent's --server URL, or a proxy in front of nanum that cannot reach it."""

    def __init__(self, status: int, body: bytes, content_type: str = "text/plain") -> None:
        import http.server
        import threading

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length", "0")))
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.mark.parametrize(("status", "body", "content_type", "tail"), [
    (404, b"", "text/plain", "answered the heartbeat with 404 Not Found, which is not how nanum answers; is {url} "
                             "a nanum server? (--server)"),
    (502, b"<html><body><h1>502 Bad Gateway</h1>\n<hr>proxy</body></html>", "text/html",
     "answered the heartbeat with 502 Bad Gateway; its log, or that of a proxy in front of it, says why"),
    (409, b'{"detail": "node n1 is another node\'s name"}', "application/json",
     "answered the heartbeat with 409 Conflict: node n1 is another node's name"),
])
def test_an_error_answer_says_what_answered_and_never_shows_a_page_of_html(
        status: int, body: bytes, content_type: str, tail: str) -> None:
    server = Answering(status, body, content_type)
    try:
        message, _ = send((server.url,))
    finally:
        server.close()
    assert message == f"the server at {server.url} " + tail.format(url=server.url)


def test_a_proxy_whose_server_is_down_sends_the_next_heartbeat_to_the_next_server(
        silent_server: SilentServer) -> None:
    proxy = Answering(502, b"<html><body>502 Bad Gateway</body></html>", "text/html")
    try:
        message, next_server = send((proxy.url, silent_server.url))
    finally:
        proxy.close()
    assert message == (f"the server at {proxy.url} answered the heartbeat with 502 Bad Gateway; its log, or that of "
                       f"a proxy in front of it, says why; trying {silent_server.url} next")
    assert next_server == silent_server.url
