"""`nanum agent` as people run it: clear one-line errors, and a clean stop that leaves jobs alone."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

from tests.agent.fakeserver import FakeServer
from tests.e2e.cluster import free_port, nanum_command


def agent_cmd(*args: str) -> list[str]:
    return [*nanum_command(), "agent", *args]


def env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("NANUM_")}


def test_a_bad_gpu_spec_is_one_line_and_exit_2(tmp_path: Path) -> None:
    result = subprocess.run(
        agent_cmd(
            "--server", "http://127.0.0.1:1", "--token", "t", "--simulate-gpus", "lots", "--state-dir", str(tmp_path)
        ),
        capture_output=True,
        text=True,
        env=env(),
    )
    assert result.returncode == 2
    assert result.stderr == (
        "nanum: error: --simulate-gpus: invalid GPU spec 'lots': use N or NxMODEL, for example 4, 4xA100 or 8xH100\n"
    )


def test_a_refused_token_is_one_line_and_exit_1(tmp_path: Path) -> None:
    server = FakeServer()
    try:
        result = subprocess.run(
            agent_cmd(
                "--server",
                server.url,
                "--token",
                "wrong",
                "--simulate-gpus",
                "2",
                "--state-dir",
                str(tmp_path),
                "--quiet",
            ),
            capture_output=True,
            text=True,
            env=env(),
            timeout=30,
        )
    finally:
        server.close()
    assert result.returncode == 1
    errors = [line for line in result.stderr.splitlines() if line.startswith("nanum: error: ")]
    assert len(errors) == 1 and errors[0].startswith("nanum: error: the server at ") and "nanum node add" in errors[0]
    assert "Traceback" not in result.stderr


def test_without_a_server_it_waits_and_stops_cleanly_on_sigterm(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    proc = subprocess.Popen(
        agent_cmd("--server", url, "--token", "t", "--name", "n1", "--state-dir", str(tmp_path)),
        stderr=subprocess.PIPE,
        text=True,
        env=env(),
    )
    assert proc.stderr is not None
    seen = []
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not any("cannot reach the server" in line for line in seen):
        seen.append(proc.stderr.readline())  # the agent says so once it runs, its signal handlers set
    proc.send_signal(signal.SIGTERM)
    _, rest = proc.communicate(timeout=15)
    err = "".join(seen) + rest
    assert proc.returncode == 0, err
    assert f"cannot reach the server at {url}" in err and "jobs keep running" in err
    assert "Traceback" not in err
