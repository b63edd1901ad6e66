"""`nanum agent` as people run it: clear one-line errors, and a clean stop that leaves jobs alone."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

from tests.agent.conftest import SilentServer
from tests.agent.fakeserver import TOKEN, FakeServer
from tests.e2e.cluster import free_port, nanum_command


def agent_cmd(*args: str) -> list[str]:
    return [*nanum_command(), "agent", *args]


def env(token: str | None = "t") -> dict[str, str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("NANUM_")}
    return clean if token is None else {**clean, "NANUM_NODE_TOKEN": token}


def test_a_bad_gpu_spec_is_one_line_and_exit_2(tmp_path: Path) -> None:
    result = subprocess.run(
        agent_cmd(
            "--server", "http://127.0.0.1:1", "--simulate-gpus", "lots", "--state-dir", str(tmp_path)
        ),
        capture_output=True,
        text=True,
        env=env(),
    )
    assert result.returncode == 2
    assert result.stderr == (
        "nanum: error: --simulate-gpus: invalid GPU spec 'lots': use N or NxMODEL, for example 4, 4xA100 or 8xH100\n"
    )


def test_a_sample_interval_that_is_not_a_finite_number_is_refused(tmp_path: Path) -> None:
    for value in ("nan", "inf", "1e400"):
        result = subprocess.run(
            agent_cmd("--server", "http://127.0.0.1:1", "--simulate-gpus", "1", "--state-dir", str(tmp_path),
                      "--sample-interval", value),
            capture_output=True, text=True, env=env(), timeout=60,
        )
        assert result.returncode == 2, result.stderr
        assert "--sample-interval" in result.stderr, result.stderr
        assert "is not a number; write a finite one" in result.stderr, result.stderr
        assert "Traceback" not in result.stderr


def test_a_refused_token_is_one_line_and_exit_1(tmp_path: Path) -> None:
    server = FakeServer()
    try:
        result = subprocess.run(
            agent_cmd(
                "--server",
                server.url,
                "--simulate-gpus",
                "2",
                "--state-dir",
                str(tmp_path),
                "--quiet",
            ),
            capture_output=True,
            text=True,
            env=env("wrong"),
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
        agent_cmd("--server", url, "--name", "n1", "--state-dir", str(tmp_path)),
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


def test_an_agent_stopped_while_its_heartbeat_waits_for_an_answer_never_says_it_connected(
        tmp_path: Path, silent_server: SilentServer) -> None:
    proc = subprocess.Popen(
        agent_cmd("--server", silent_server.url, "--name", "n1", "--state-dir", str(tmp_path), "--simulate-gpus", "1"),
        stderr=subprocess.PIPE, text=True, env=env(),
    )
    deadline = time.monotonic() + 30
    while silent_server.requests == 0 and time.monotonic() < deadline:  # its first heartbeat is in, unanswered
        time.sleep(0.05)
    assert silent_server.requests == 1
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert "agent stopped" in err
    assert "connected to" not in err, err


def run_agent(*args: str, token: str | None = None) -> subprocess.CompletedProcess[str]:
    argv = agent_cmd("--server", "http://127.0.0.1:1", "--simulate-gpus", "2", *args)
    return subprocess.run(argv, capture_output=True, text=True, env=env(token), timeout=30)


def test_a_token_file_other_users_could_read_or_write_is_refused_like_an_ssh_key(tmp_path: Path) -> None:
    path = tmp_path / "node-token"
    path.write_text("secret-node-token\n")
    for mode in (0o644, 0o620, 0o604):
        path.chmod(mode)
        result = run_agent("--token-file", str(path), "--state-dir", str(tmp_path / "state"), token=None)
        assert result.returncode == 2
        assert result.stderr == (
            f"nanum: error: token file {path} can be read or written by other users (mode {mode:03o}); "
            f"run `chmod 600 {path}`\n"
        )


def test_the_token_is_never_taken_from_the_command_line(tmp_path: Path) -> None:
    result = run_agent("--token", "secret-node-token", "--state-dir", str(tmp_path), token=None)
    assert result.returncode == 2
    [line] = result.stderr.splitlines()
    assert line.startswith("nanum: error: --token would show the node token to every user of this machine")
    assert "--token-file FILE" in line and "NANUM_NODE_TOKEN" in line
    missing = run_agent("--state-dir", str(tmp_path), token=None)
    assert missing.returncode == 2 and "--token-file FILE" in missing.stderr and "Traceback" not in missing.stderr


def test_the_token_from_a_private_file_reaches_the_server_and_not_the_process_list(tmp_path: Path) -> None:
    path = tmp_path / "agent.secret"
    path.write_text(f"{TOKEN}\n")
    path.chmod(0o600)
    server = FakeServer()
    proc = subprocess.Popen(
        agent_cmd("--server", server.url, "--token-file", str(path), "--simulate-gpus", "1", "--name", "n1",
                  "--state-dir", str(tmp_path / "state"), "--sample-interval", "0", "--quiet"),
        stderr=subprocess.PIPE, text=True, env=env(None),
    )
    try:
        deadline = time.monotonic() + 30
        while not server.beats and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.05)
        assert server.beats, "the server never accepted the agent's token"
        for what in ("cmdline", "environ"):
            assert TOKEN.encode() not in Path(f"/proc/{proc.pid}/{what}").read_bytes(), what
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=15)
        server.close()
