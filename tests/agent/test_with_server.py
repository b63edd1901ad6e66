"""The agent with the real server (`nanum server` in a subprocess): jobs run as their owners, logs and exit
codes reach the server, and an agent restarted mid-job re-adopts its job. Marked e2e: it starts real processes."""

from __future__ import annotations

import asyncio
import os
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from nanum.agent.agent import Agent, AgentConfig
from nanum.agent.gpus import simulated_gpus
from nanum.client import Client
from tests.e2e.cluster import free_port, job_account, nanum_command, remove, shared_dir

pytestmark = pytest.mark.e2e
NODE = "gpu-01"


@pytest.fixture
def server(tmp_path: Path) -> Iterator[tuple[str, str]]:
    """A real `nanum server`: its URL and admin token."""
    port, home = free_port(), tmp_path / "home"
    env = {k: v for k, v in os.environ.items() if not k.startswith("NANUM_")}
    env["XDG_CONFIG_HOME"] = str(tmp_path / "config")
    with (tmp_path / "server.log").open("wb") as log:
        proc = subprocess.Popen(
            [*nanum_command(), "server", "--home", str(home), "--port", str(port)],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while not (home / "admin-token").exists() or not _healthy(url):
            assert proc.poll() is None and time.monotonic() < deadline, (tmp_path / "server.log").read_text()
            time.sleep(0.1)
        yield url, (home / "admin-token").read_text().strip()
    finally:
        proc.terminate()
        proc.wait(30)


def _healthy(url: str) -> bool:
    try:
        with Client(url, "") as c:
            c.health()
        return True
    except Exception:
        return False


@contextmanager
def running_agent(url: str, token: str, state_dir: Path) -> Iterator[Agent]:
    agent = Agent(
        AgentConfig(server=url, token=token, name=NODE, state_dir=state_dir),
        gpus=simulated_gpus("4xA100", NODE),
        simulated=True,
    )
    thread = threading.Thread(target=lambda: asyncio.run(agent.run()), daemon=True)
    thread.start()
    try:
        yield agent
    finally:
        agent.stop()
        thread.join(15)


def test_jobs_run_as_their_owner_report_back_and_survive_an_agent_restart(
    server: tuple[str, str], tmp_path: Path
) -> None:
    url, admin = server
    workdir = shared_dir("nanum-agent-it-")
    account = job_account()
    try:
        with Client(url, admin) as c:
            node_token = c.add_node(NODE)["token"]
            user_token = c.add_user("alice", ["vision"], unix_user=account)["token"]
        state = tmp_path / "agent"
        with Client(url, user_token) as alice:
            with running_agent(url, node_token, state):
                quick = alice.submit(
                    ["sh", "-c", 'echo "$(id -un) $CUDA_VISIBLE_DEVICES"; exit 3'], gpus=2, workdir=str(workdir)
                )
                done = alice.wait(quick["id"], timeout=30)
                assert (done["state"], done["exit_code"]) == ("failed", 3)
                assert alice.logs(quick["id"]).text == f"{account} 0,1\n"
                slow = alice.submit(["sh", "-c", "sleep 2; echo finished"], gpus=1, workdir=str(workdir))
                deadline = time.monotonic() + 30
                while alice.job(slow["id"])["state"] != "running" and time.monotonic() < deadline:
                    time.sleep(0.05)
            # The agent is down; the job goes on. A new agent over the same state directory takes it back.
            with running_agent(url, node_token, state):
                ended = alice.wait(slow["id"], timeout=30)
            assert (ended["state"], ended["exit_code"]) == ("completed", 0)
            assert alice.logs(slow["id"]).text == "finished\n"
    finally:
        remove(workdir)


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root: jobs run as another account")
def test_a_job_whose_user_cannot_enter_its_directory_fails_with_the_reason(
    server: tuple[str, str], tmp_path: Path
) -> None:
    url, admin = server
    account = job_account()
    with Client(url, admin) as c:
        node_token = c.add_node(NODE)["token"]
        user_token = c.add_user("alice", ["vision"], unix_user=account)["token"]
    with Client(url, user_token) as alice, running_agent(url, node_token, tmp_path / "agent"):
        job = alice.submit(["ls"], gpus=1, workdir="/root")
        done = alice.wait(job["id"], timeout=30)
        log = alice.logs(job["id"]).text
    assert done["state"] == "failed"
    assert done["reason"] == f"cannot enter working directory /root as {account}: Permission denied"
    assert log == ""
