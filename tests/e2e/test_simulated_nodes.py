"""`nanum agent --simulate-nodes N`: N nodes in one process, each heartbeating with its own token and readings of
its GPUs; their jobs run no process (`sleep S` takes S seconds). A real `nanum server`, the agent process and the
API over loopback HTTP."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from nanum.agent.simnodes import NodeTokensError, _seconds, read_node_tokens
from tests.e2e.cluster import ServerProc, job_account, nanum_command

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]


def test_simulated_nodes_join_and_run_jobs(tmp_path: Path) -> None:
    server = ServerProc(tmp_path / "server")
    server.start()
    tokens = tmp_path / "tokens"
    tokens.write_text("".join(f"sim-{i:03d} {server.api('POST', '/nodes', {'name': f'sim-{i:03d}'})['token']}\n"
                              for i in range(6)))
    tokens.chmod(0o600)
    alice = server.api("POST", "/users", {"name": "alice", "labs": ["vision"], "unix_user": job_account()})["token"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("NANUM_")}
    agents = subprocess.Popen([*nanum_command(), "agent", "--server", server.url, "--simulate-nodes", "5",
                               "--simulate-gpus", "2xA100", "--token-file", str(tokens), "--sample-interval", "0.5"],
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 30
        while sum(n["state"] == "up" for n in server.api("GET", "/nodes")) < 5:
            assert time.monotonic() < deadline and agents.poll() is None, server.log_tail()
            time.sleep(0.1)
        nodes = {n["name"]: n for n in server.api("GET", "/nodes")}
        assert nodes["sim-005"]["state"] != "up"  # the sixth token was not asked for
        assert [g["model"] for g in nodes["sim-000"]["gpus"]] == ["A100", "A100"]

        def submit(command: list[str], **more: object) -> int:
            body = {"command": command, "gpus": 2, "workdir": "/tmp", **more}
            return int(server.api("POST", "/jobs", body, token=alice)["id"])

        quick = [submit(["true"]) for _ in range(5)]
        slow = [submit(["sleep", "1.5"]) for _ in range(5)]  # one per node at a time: 2 GPUs each
        forever = submit(["sh", "-c", "sleep 3600"], time_limit_s=3600)
        started = time.monotonic()
        deadline = started + 60

        def state(job: int) -> str:
            return str(server.api("GET", f"/jobs/{job}", token=alice)["state"])

        while any(state(j) != "completed" for j in quick + slow):
            assert time.monotonic() < deadline, [(j, state(j)) for j in quick + slow]
            time.sleep(0.2)
        assert time.monotonic() - started >= 1.5  # the sleeps took their time
        while state(forever) != "running":
            assert time.monotonic() < deadline
            time.sleep(0.1)
        # Like real agents, the nodes read their GPUs (every 0.5 s here) and their heartbeats carry the readings:
        # a held GPU reads busy.
        while server.api("GET", f"/jobs/{forever}/usage", token=alice).get("gpu_util") != 90.0:
            assert time.monotonic() < deadline, server.api("GET", f"/jobs/{forever}/usage", token=alice)
            time.sleep(0.2)
        server.api("POST", f"/jobs/{forever}/cancel", token=alice)
        while state(forever) != "cancelled":
            assert time.monotonic() < deadline
            time.sleep(0.1)
    finally:
        agents.terminate()
        out = agents.communicate(timeout=30)[0].decode()
        server.kill()
    assert "5 simulated nodes with 2xA100 GPUs each" in out, out


def test_the_token_file_and_commands_are_read_strictly(tmp_path: Path) -> None:
    path = tmp_path / "tokens"
    path.write_text("# name token\nnode-1 abc\n\nnode-2 def  # second\n")
    path.chmod(0o644)
    with pytest.raises(NodeTokensError, match="readable by others"):
        read_node_tokens(path)
    path.chmod(0o600)
    assert read_node_tokens(path) == [("node-1", "abc"), ("node-2", "def")]
    path.write_text("node-1\n")
    with pytest.raises(NodeTokensError, match="line 1: expected `NAME TOKEN`"):
        read_node_tokens(path)
    assert _seconds(["sleep", "2.5"]) == 2.5 and _seconds(["/bin/sh", "-c", "sleep 3"]) == 3.0
    assert _seconds(["python", "train.py"]) == 0.0 and _seconds(["sleep", "x"]) == 0.0
