"""--mem and --cpus as users meet them: a job over its memory is killed and `nanum show` says so; a node that
cannot hold jobs to their limits says so in `nanum nodes`."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from pathlib import Path

import pytest

from nanum.agent.agent import Agent, AgentConfig
from nanum.agent.gpus import simulated_gpus
from tests.e2e.cluster import Cluster, job_account

pytestmark = pytest.mark.e2e


def _limits(cluster: Cluster) -> dict[str, str]:
    nodes = json.loads(cluster.nanum("nodes", "--json").stdout)
    return {n["name"]: n.get("limits", "") for n in nodes}


def test_a_job_over_its_memory_limit_is_killed_and_show_says_why(cluster: Cluster, workdir: Path) -> None:
    (local,) = _limits(cluster).values()
    if not local.startswith("cgroup"):
        pytest.skip(f"this machine's node reports limits {local!r}: jobs cannot be held to --mem here")
    hog = cluster.submit("alice", "--mem", "64M", "--", "python3", "-c", "b = bytearray(256 * 2**20)", cwd=workdir)
    fits = cluster.submit("bob", "--mem", "256M", "--cpus", "1", "--", "python3", "-c", "b = bytearray(16 * 2**20)",
                          cwd=workdir)
    assert cluster.wait_state(hog, "failed")["exit_code"] == 137
    assert cluster.wait_state(fits, "completed")["exit_code"] == 0
    shown = cluster.nanum("show", str(hog), user="alice").stdout
    assert "killed: exceeded its memory limit of 64 MiB" in shown


def test_nodes_say_where_limits_are_not_enforced(cluster: Cluster, tmp_path: Path) -> None:
    added = cluster.nanum("node", "add", "gpu-77")
    assert added.returncode == 0, added.stderr
    agent = Agent(
        AgentConfig(server=cluster.url, token=added.stdout.strip(), name="gpu-77",
                    state_dir=tmp_path / "state", cgroup_root=tmp_path / "no-cgroups"),
        gpus=simulated_gpus("2xA100", "gpu-77"),
        simulated=True,
    )
    thread = threading.Thread(target=lambda: asyncio.run(agent.run()), daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 20
        while not agent.heartbeats and time.monotonic() < deadline:
            time.sleep(0.1)
        shown = cluster.nanum("nodes").stdout
    finally:
        agent.stop()
        thread.join(15)
    assert "! gpu-77 limits: not enforced (no writable cgroup)" in shown
    assert not any(line.startswith(f"! {name} ") for line in shown.splitlines() for name in _enforced(cluster))


def _enforced(cluster: Cluster) -> list[str]:
    return [name for name, limits in _limits(cluster).items() if limits.startswith("cgroup")]


def test_a_job_writing_more_output_than_the_server_keeps_is_stopped(tmp_path: Path, workdir: Path) -> None:
    """`nanum up --max-output 1M`: a runaway print loop is stopped once past it, `nanum show` says why, `nanum
    logs` gives its first MiB, and nothing more of it is kept on the node once the server has it."""
    cluster = Cluster(tmp_path, extra_args=["--max-output", "1M"])
    cluster.start()
    try:
        cluster.add_user("alice", job_account(), "vision")
        job = cluster.submit("alice", "--", "yes", "nanum", cwd=workdir)
        ended = cluster.wait_state(job, "failed")
        assert ended["exit_code"] == 143, ended
        shown = cluster.nanum("show", str(job), user="alice").stdout
        assert "its output passed 1 MiB, the most a job may write (the server's --max-output)" in shown, shown
        logs = cluster.nanum("logs", str(job), user="alice")
        assert logs.returncode == 0 and logs.stdout == "nanum\n" * ((1 << 20) // 6) + "nanu", logs.stderr[-300:]
        deadline = time.monotonic() + 15  # the node forgets the job once the server holds its log
        while (cluster.home / "agent" / "jobs" / str(job)).exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not (cluster.home / "agent" / "jobs" / str(job)).exists()
    finally:
        cluster.stop()


def test_the_oom_killer_takes_a_job_before_the_agent_or_the_server(cluster: Cluster, workdir: Path) -> None:
    """Run as root, `nanum up`'s server and agent lower their OOM score; a job is scored as any process and
    cannot lower its own."""
    import subprocess

    if subprocess.run(["sh", "-c", "echo -1 > /proc/self/oom_score_adj"], capture_output=True).returncode != 0:
        pytest.skip("this machine lets no process lower its OOM score (root without CAP_SYS_RESOURCE, or not root)")
    lower = "cat /proc/self/oom_score_adj; echo -500 > /proc/self/oom_score_adj"
    job = cluster.submit("alice", "--", "sh", "-c", lower, cwd=workdir)
    ended = cluster.wait_state(job, "completed", "failed")
    assert cluster.nanum("logs", str(job), user="alice").stdout.startswith("0\n")
    assert ended["state"] == "failed"  # lowering it is refused: "Permission denied"
    assert cluster.proc is not None
    services = [cluster.proc.pid, *cluster.agent_pids()]
    assert [Path(f"/proc/{pid}/oom_score_adj").read_text().strip() for pid in services] == ["-900"] * len(services)
