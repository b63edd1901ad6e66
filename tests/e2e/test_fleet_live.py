"""A lab's own node in a running `nanum server` with real agents: lent to another lab while idle, taken back when
its owner's job comes (the borrower is preempted and waits), and kept from new jobs while drained. Real processes,
the CLI as each user types it."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.cluster import AgentProc, ServerProc, job_account, kill_job_processes, remove, shared_dir

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]

NANUM = str(Path(sys.executable).parent / "nanum")


def _nanum(server: ServerProc, token: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**server.env(), "NANUM_SERVER": server.url, "NANUM_TOKEN": token}
    return subprocess.run([NANUM, *args], env=env, capture_output=True, text=True, timeout=60)


def _until(what: str, check: Any, server: ServerProc, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"not {what} within {timeout} s\n{server.log_tail()}"
        time.sleep(0.1)


@pytest.fixture
def workdir() -> Iterator[Path]:
    path = shared_dir("nanum-fleet-live-")
    yield path
    remove(path)


def test_an_owned_node_is_lent_taken_back_and_drained(tmp_path: Path, workdir: Path) -> None:
    server = ServerProc(tmp_path)
    server.start()
    agents = [AgentProc(name, server.url, server.api("POST", "/nodes", {"name": name})["token"], tmp_path, gpus=g)
              for name, g in (("shared-01", "1"), ("vision-01", "2"))]
    admin = server.admin_token
    alice = server.api("POST", "/users", {"name": "alice", "labs": ["vision"], "unix_user": job_account()})["token"]
    carol = server.api("POST", "/users", {"name": "carol", "labs": ["nlp"], "unix_user": job_account()})["token"]

    def job(job_id: int) -> dict[str, Any]:
        return dict(server.api("GET", f"/jobs/{job_id}"))

    def submit(token: str, *args: str) -> int:
        done = _nanum(server, token, "submit", "--json", "--workdir", str(workdir), *args, "--", "sleep", "300")
        assert done.returncode == 0, done.stderr
        return int(json.loads(done.stdout)["id"])

    try:
        for agent in agents:
            agent.start()
        _until("both nodes up", lambda: sum(n["state"] == "up" for n in server.api("GET", "/nodes")) == 2, server)
        said = _nanum(server, admin, "node", "set", "vision-01", "--lab", "vision", "--label", "net=ib")
        assert said.stdout == "vision-01: up; owner vision; labels net=ib; GPU model SIM\n", said.stderr

        borrower = submit(carol, "--gpus", "2", "--constraint", "net=ib")  # nlp owns nothing: it borrows
        _until("the borrower running", lambda: job(borrower)["state"] == "running", server)
        assert job(borrower)["borrowing"] and job(borrower)["allocation"][0]["node"] == "vision-01"

        owner = submit(alice, "--gpus", "2")  # vision takes its node back
        _until("the owner running", lambda: job(owner)["state"] == "running", server)
        assert job(owner)["allocation"][0]["node"] == "vision-01" and not job(owner)["borrowing"]
        back = job(borrower)
        assert back["state"] == "pending" and back["preemptions"] == 1, back

        drained = _nanum(server, admin, "node", "drain", "shared-01", "--reason", "new PSU")
        assert drained.stdout.startswith("shared-01: drained (new PSU);"), drained.stdout + drained.stderr
        small = submit(alice, "--gpus", "1")
        _until("a reason for the small job", lambda: job(small)["reason"] != "waiting for the scheduler", server)
        time.sleep(1)
        assert job(small)["state"] == "pending"
        nodes = _nanum(server, alice, "nodes").stdout
        assert "! shared-01 drained: new PSU" in nodes and "vision-01: owner vision; labels net=ib" in nodes, nodes
        _nanum(server, admin, "node", "resume", "shared-01")
        _until("the small job running on the resumed node", lambda: job(small)["state"] == "running", server)
        assert job(small)["allocation"][0]["node"] == "shared-01"
    finally:
        for agent in agents:
            agent.kill()
            kill_job_processes(agent.state_dir)
        server.kill()
