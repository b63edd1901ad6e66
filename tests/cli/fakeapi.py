"""A stand-in nanum server for CLI tests: real loopback HTTP, scripted answers per route, requests kept."""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit


@dataclass
class Request:
    method: str
    path: str
    query: dict[str, list[str]]
    body: Any
    headers: dict[str, str]


@dataclass
class Answer:
    status: int = 200
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)
    text: str | None = None


class FakeApi:
    """`api.on("GET", "/jobs", [...])` scripts an answer (a list of answers is served in turn, the last one
    repeating); `api.requests` lists what the client sent."""

    def __init__(self) -> None:
        self.routes: dict[tuple[str, str], list[Answer]] = {}
        self.requests: list[Request] = []
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.02,), daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def on(self, method: str, path: str, *answers: Any, status: int = 200,
           headers: dict[str, str] | None = None) -> None:
        self.routes[(method, "/api/v1" + path)] = [
            a if isinstance(a, Answer) else Answer(status, a, headers or {}) for a in answers
        ]

    def sent(self, method: str, path: str) -> list[Request]:
        return [r for r in self.requests if r.method == method and r.path == "/api/v1" + path]

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def _answer(self, method: str, path: str) -> Answer:
        answers = self.routes.get((method, path))
        if not answers:
            return Answer(404, {"detail": f"no route {method} {path}"})
        return answers.pop(0) if len(answers) > 1 else answers[0]

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        api = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def _serve(self) -> None:
                url = urlsplit(self.path)
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                body = json.loads(raw) if raw else None
                api.requests.append(Request(self.command, url.path, parse_qs(url.query), body,
                                            dict(self.headers.items())))
                answer = api._answer(self.command, url.path)
                data = (answer.text.encode() if answer.text is not None else json.dumps(answer.body).encode())
                self.send_response(answer.status)
                ctype = "text/plain" if answer.text is not None else "application/json"
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(data)))
                for k, v in answer.headers.items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_PATCH = do_PUT = do_DELETE = _serve

        return Handler


def job(**fields: Any) -> dict[str, Any]:
    """A job object as the API returns it, with the given fields changed."""
    base: dict[str, Any] = {
        "id": 7, "name": "train", "user": "alice", "lab": "vision", "state": "pending", "reason": None,
        "reason_code": None, "estimated_start": None, "gpus": 1, "nodes": 1, "gpu_model": None, "cpus": 1,
        "memory_mb": None, "time_limit_s": None, "priority": 0, "kind": "batch", "preemptible": True,
        "borrowing": False, "allocation": [], "submit_time": "2026-11-29T17:00:00Z", "start_time": None,
        "end_time": None, "exit_code": None, "command": ["python", "train.py"], "workdir": "/home/alice",
        "env": {}, "runs": 0,
    }
    base.update(fields)
    return base
