"""A tiny real HTTP control plane for agent tests: it serves the heartbeat endpoint the way the server does.

It keeps a desired list the test edits, acknowledges exited jobs at once (taking them off the desired list),
stores log chunks (skipping bytes it holds already, as the server does), and holds a heartbeat that asks to wait
until the desired list changes or `wait_s` passes.
Every status it receives is timestamped, so tests can measure start and exit latency.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from nanum.protocol import Heartbeat, HeartbeatReply, JobLaunch, JobStatus

TOKEN = "node-token"


class FakeServer:
    def __init__(self, port: int = 0, *, allow_root: bool = True, grace_s: float = 5.0) -> None:
        self.cond = threading.Condition()
        self.desired: dict[int, JobLaunch] = {}
        self.seen: dict[tuple[int, str], tuple[float, JobStatus]] = {}  # (job, state) → first (time, status)
        self.logs: dict[int, bytearray] = {}
        self.log_when_seen: dict[tuple[int, str], bytes] = {}  # (job, state) → its log as that status arrived
        self.beats: list[Heartbeat] = []
        self.version = 0
        #: How many of the next replies that acknowledge ends list the desired jobs as they were before those ends
        #: were recorded (a list read before them, as a busy server's tick may hand a heartbeat).
        self.stale_replies = 0
        self.allow_root, self.grace_s = allow_root, grace_s
        #: The node token heartbeats must bear (a test changes it to see the agent refused, as a removed node is).
        self.token = TOKEN
        self._closing = False
        self.connections: set[socket.socket] = set()
        self.httpd = ThreadingHTTPServer(("127.0.0.1", port), _handler(self))
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self._thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self._thread.start()

    def close(self) -> None:
        with self.cond:
            self._closing = True
            self.cond.notify_all()
        self.httpd.shutdown()
        self.httpd.server_close()
        for conn in list(self.connections):  # like a killed server: drop kept-alive connections too
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)

    # --- what tests do --------------------------------------------------------------------------------------

    def submit(self, launch: JobLaunch) -> float:
        with self.cond:
            self.desired[launch.job_id] = launch
            self._bump()
        return time.time()

    def cancel(self, job_id: int) -> None:
        with self.cond:
            self.desired.pop(job_id, None)
            self._bump()

    def wait_until(self, predicate: Callable[[], bool], timeout: float = 10.0) -> None:
        """Wait for `predicate` (checked at every heartbeat and every 20 ms, for conditions on files)."""
        deadline = time.monotonic() + timeout
        with self.cond:
            while not predicate():
                if time.monotonic() > deadline:
                    raise AssertionError("the agent did not report what the test waited for")
                self.cond.wait(0.02)

    def wait_state(self, job_id: int, state: str, timeout: float = 10.0) -> tuple[float, JobStatus]:
        self.wait_until(lambda: (job_id, state) in self.seen, timeout)
        return self.seen[(job_id, state)]

    def log(self, job_id: int) -> bytes:
        with self.cond:
            return bytes(self.logs.get(job_id, b""))

    # --- the endpoint ---------------------------------------------------------------------------------------

    def heartbeat(self, beat: Heartbeat) -> HeartbeatReply:
        now = time.time()
        with self.cond:
            self.beats.append(beat)
            self.cond.notify_all()
            before = list(self.desired.values())
            ack = self._record(beat, now)
            stale = bool(ack) and self.stale_replies > 0
            self.stale_replies -= stale
            start_version = self.version
            if beat.wait_s > 0 and not ack and not self._news(beat):
                self.cond.wait_for(lambda: self.version != start_version or self._closing, beat.wait_s)
            offsets = {j: len(self.logs.get(j, b"")) for j in {s.job_id for s in beat.jobs}}
            return HeartbeatReply(
                desired=before if stale else list(self.desired.values()),
                ack=ack,
                log_offsets=offsets,
                grace_s=self.grace_s,
                allow_root=self.allow_root,
            )

    def _record(self, beat: Heartbeat, now: float) -> list[int]:
        for chunk in beat.logs:
            log = self.logs.setdefault(chunk.job_id, bytearray())
            if chunk.offset <= len(log):
                log += chunk.data.encode()[len(log) - chunk.offset :]
        ack = []
        for status in beat.jobs:
            if (status.job_id, status.state) not in self.seen:
                self.seen[(status.job_id, status.state)] = (now, status)
                self.log_when_seen[(status.job_id, status.state)] = bytes(self.logs.get(status.job_id, b""))
                self.cond.notify_all()
            if status.state != "running":
                self.desired.pop(status.job_id, None)
                ack.append(status.job_id)
        return ack

    def _news(self, beat: Heartbeat) -> bool:
        """Whether the reply would change anything: jobs to start or to stop."""
        return set(self.desired) != {s.job_id for s in beat.jobs if s.state == "running"}

    def _bump(self) -> None:
        self.version += 1
        self.cond.notify_all()


def _handler(server: FakeServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def setup(self) -> None:
            super().setup()
            self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            server.connections.add(self.connection)

        def finish(self) -> None:
            server.connections.discard(self.connection)
            super().finish()

        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            if self.path != "/api/v1/agent/heartbeat":
                return self._send(404, b'{"detail": "not found"}')
            if self.headers.get("Authorization") != f"Bearer {server.token}":
                return self._send(401, b'{"detail": "unknown node token"}')
            reply = server.heartbeat(Heartbeat.model_validate_json(body))
            self._send(200, reply.model_dump_json().encode())

        def _send(self, code: int, body: bytes) -> None:
            try:
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
            except OSError:
                pass  # the agent gave up on this request

        def log_message(self, format: str, *args: Any) -> None:
            pass

    return Handler
