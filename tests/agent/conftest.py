"""Fixtures for the agent tests: an executor over a temporary state directory, a launch builder, and a server that
never answers."""

from __future__ import annotations

import contextlib
import os
import pwd
import signal
import socket
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from nanum.agent.executor import Executor
from nanum.agent.launch import launcher
from nanum.protocol import JobLaunch

NODE = "test-node"


class SilentServer:
    """Accepts connections on a loopback port and reads what comes, but never answers: a server too busy (or stuck)
    to answer a heartbeat it took."""

    def __init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.listener.settimeout(0.05)
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        self.requests = 0  # connections on which something arrived
        self._held: list[socket.socket] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._stop.is_set():
            with contextlib.suppress(TimeoutError):
                conn, _ = self.listener.accept()
                conn.settimeout(5)
                with contextlib.suppress(OSError):
                    if conn.recv(65536):
                        self.requests += 1
                self._held.append(conn)

    def close(self) -> None:
        self._stop.set()
        self._thread.join()
        for conn in self._held:
            conn.close()
        self.listener.close()


@pytest.fixture
def silent_server() -> Iterator[SilentServer]:
    server = SilentServer()
    try:
        yield server
    finally:
        server.close()


def make_launch(job_id: int, *command: str, **fields: Any) -> JobLaunch:
    values: dict[str, Any] = {
        "job_id": job_id,
        "name": f"job{job_id}",
        "command": list(command),
        "workdir": "/tmp",
        "gpus": [0],
        "unix_user": pwd.getpwuid(os.geteuid()).pw_name,
        "checkpoint_dir": "",
        "grace_s": 5.0,
    }
    values.update(fields)
    return JobLaunch(**values)


@pytest.fixture
def state_dir(tmp_path: Path) -> Path:
    return tmp_path / "state"


@pytest.fixture
def executor(state_dir: Path) -> Iterator[Executor]:
    ex = Executor(state_dir, NODE)
    yield ex
    for job_id, state in ex.held().items():
        if state == "running":
            ex.stop(job_id, 0.0)
            ex.wait(job_id, 5)
    ex.close()


@pytest.fixture(autouse=True, scope="session")
def _reap_left_children() -> Iterator[None]:
    """Job processes that a test's executors left behind (a test that drops an executor while its job runs, as an
    agent restart does) are stopped once the tests are done, rather than left running."""
    yield
    for pid in launcher().waiters():
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL)
        launcher().returncode(pid)
    launcher().close()


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 2 MiB file system of its own (tmpfs), for a node whose disk fills up."""
    mount = tmp_path / "small"
    mount.mkdir()
    made = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mount)], capture_output=True)
    if made.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here: {made.stderr.decode(errors='replace').strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], capture_output=True)
