"""Nothing is lost when the server or the agent dies mid-job: after `kill -9` (and a new `nanum up` where the
server died), the job that was running finishes, and its exit code and output are recorded."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from tests.e2e.cluster import Cluster

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]

# Runs until the test creates `release` in its directory, then exits 7.
JOB = ["--", "sh", "-c", "echo before; while [ ! -e release ]; do sleep 0.1; done; echo after; exit 7"]


def finishes_with_its_exit_code(cluster: Cluster, job_id: int, workdir: Path) -> None:
    (workdir / "release").touch()
    waited = cluster.nanum("wait", str(job_id), "--timeout", "90", user="alice")
    assert waited.returncode == 7, f"{waited.stderr}\n{cluster.log_tail()}"
    job = cluster.job(job_id)
    assert (job["state"], job["exit_code"], job["runs"]) == ("failed", 7, 1)
    assert cluster.nanum("logs", str(job_id), user="alice").stdout == "before\nafter\n"


def running_job(cluster: Cluster, workdir: Path) -> int:
    job_id = cluster.submit("alice", *JOB, cwd=workdir)
    cluster.wait_state(job_id, "running")
    return job_id


def kill_agents(cluster: Cluster) -> None:
    pids = cluster.agent_pids()
    assert pids, "no agent process found"
    for pid in pids:
        os.kill(pid, signal.SIGKILL)


def test_kill_9_of_the_server_mid_job_loses_nothing(own_cluster: Cluster, workdir: Path) -> None:
    job_id = running_job(own_cluster, workdir)
    own_cluster.kill(signal.SIGKILL)
    deadline = time.monotonic() + 10
    while own_cluster.agent_pids() and time.monotonic() < deadline:
        time.sleep(0.2)  # the job keeps running while no server is there
    assert not own_cluster.agent_pids(), "the agent of a killed `nanum up` should stop by itself"
    own_cluster.start()
    finishes_with_its_exit_code(own_cluster, job_id, workdir)


def test_kill_9_of_the_agent_mid_job_loses_nothing(own_cluster: Cluster, workdir: Path) -> None:
    job_id = running_job(own_cluster, workdir)
    kill_agents(own_cluster)  # `nanum up` starts a new agent, which adopts the job
    (workdir / "release").touch()  # the job ends while no agent watches it
    time.sleep(0.5)
    finishes_with_its_exit_code(own_cluster, job_id, workdir)


def test_kill_9_of_server_and_agent_mid_job_loses_nothing(own_cluster: Cluster, workdir: Path) -> None:
    job_id = running_job(own_cluster, workdir)
    own_cluster.kill(signal.SIGKILL)
    kill_agents(own_cluster)
    (workdir / "release").touch()
    own_cluster.start()
    finishes_with_its_exit_code(own_cluster, job_id, workdir)
