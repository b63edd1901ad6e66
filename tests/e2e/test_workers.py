"""`nanum server --workers 3` on PostgreSQL: three server processes take connections on one port and a fourth,
which takes none, schedules; jobs submitted through any of them run once each on a real agent; a serving worker
and the scheduling one killed in the middle of the workload are replaced and no submission is lost; `/metrics`
counts the scheduler's cycles whichever worker answers; the workers stop with the first process, or by themselves
if it is killed. On SQLite the option is refused."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import urllib.request
from collections import Counter
from pathlib import Path

import pytest

from tests.e2e.cluster import (
    AgentProc,
    ServerProc,
    job_account,
    kill_job_processes,
    nanum_command,
    process_alive,
    submit_many,
    wait_until,
)
from tests.processes import live_children

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(240)]

JOB = ["sh", "-c", 'echo "$NANUM_JOB_ID" >> runs.log']


def workers_of(pid: int) -> list[int]:
    """The live child processes of `pid`."""
    return sorted(live_children(pid))


def listening(pids: list[int], port: int) -> list[int]:
    """Those of `pids` that hold the socket listening on `port` (read from /proc: no `ss` needed)."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if int(fields[1].rsplit(":", 1)[1], 16) == port and fields[3] == "0A":  # 0A: LISTEN
                inodes.add(f"socket:[{fields[9]}]")
    found = []
    for pid in pids:
        links = set()
        with contextlib.suppress(OSError):  # the process ended
            for fd in Path(f"/proc/{pid}/fd").iterdir():
                with contextlib.suppress(OSError):  # closed while looked at: a worker starting opens and closes many
                    links.add(os.readlink(fd))
        if links & inodes:
            found.append(pid)
    return found


def roles(pid: int, port: int) -> tuple[list[int], list[int]] | None:
    """(the serving workers, the scheduling one) of the server `pid` once it has four workers, three of them taking
    connections on `port`; None until then (a worker just forked may not have settled into its role)."""
    workers = workers_of(pid)
    serving = listening(workers, port)
    others = sorted(set(workers) - set(serving))
    return (serving, others) if len(workers) == 4 and len(serving) == 3 and len(others) == 1 else None


def _cycles(url: str) -> float:
    with urllib.request.urlopen(f"{url}/metrics", timeout=10) as r:
        text = r.read().decode()
    return sum(float(line.split()[-1]) for line in text.splitlines()
               if line.startswith("nanum_scheduler_cycle_seconds_count"))


@pytest.mark.postgres
def test_three_workers_share_the_port_and_run_every_job_once(tmp_path: Path, database: str, workdir: Path) -> None:
    server = ServerProc(tmp_path, ("--db", database, "--workers", "3"))
    agent = None
    try:
        server.start()
        assert server.proc is not None
        port = int(server.url.rsplit(":", 1)[1])
        pid = server.proc.pid
        wait_until("three serving workers and one scheduling", lambda: roles(pid, port) is not None, 30)
        found = roles(pid, port)
        assert found is not None
        serving, (scheduling,) = found
        token = server.api("POST", "/nodes", {"name": "node-a"})["token"]
        agent = AgentProc("node-a", server.url, token, tmp_path, gpus="2")
        alice = server.api("POST", "/users", {"name": "alice", "labs": ["vision"], "unix_user": job_account()})
        agent.start()
        wait_until("the node up", lambda: [n["state"] for n in server.api("GET", "/nodes")] == ["up"], 30)

        ids = submit_many(server.url, alice["token"], workdir, 10, JOB)
        victims = [serving[0], scheduling]
        for victim in victims:
            os.kill(victim, signal.SIGKILL)
        ids += submit_many(server.url, alice["token"], workdir, 10, JOB)  # the others answer meanwhile
        wait_until("workers in their place, three serving and one scheduling",
                   lambda: roles(pid, port) is not None and not set(victims) & set(workers_of(pid)), 30,
                   server.log_tail())
        done = lambda: all(server.api("GET", f"/jobs/{j}")["state"] == "completed" for j in ids)  # noqa: E731
        wait_until("every job completed", done, 90, server.log_tail(), agent.log_text()[-2000:])
        ran = Counter(int(line) for line in (workdir / "runs.log").read_text().split())
        assert sorted(ran) == sorted(ids) and set(ran.values()) == {1}, ran  # each ran exactly once
        for victim in victims:
            assert f"(pid {victim}) ended (signal 9); starting another" in server.log_tail()

        counts = {_cycles(server.url) for _ in range(6)}  # six connections: answered by several workers
        assert min(counts) > 0, counts  # each reports the scheduling worker's cycles

        workers = workers_of(server.proc.pid)
        server.kill(signal.SIGTERM)
        wait_until("the workers stopped", lambda: not any(process_alive(p) for p in workers), 30)
        assert "nanum stopped" in server.log_tail()
    finally:
        if agent is not None:
            agent.kill()
            kill_job_processes(agent.state_dir)
        server.kill()


@pytest.mark.postgres
def test_workers_stop_when_the_first_process_is_killed(tmp_path: Path, database: str) -> None:
    server = ServerProc(tmp_path, ("--db", database, "--workers", "2"))
    try:
        server.start()
        assert server.proc is not None
        wait_until("three workers", lambda: len(workers_of(server.proc.pid)) == 3, 30)  # type: ignore[union-attr]
        workers = workers_of(server.proc.pid)
        server.kill(signal.SIGKILL)
        wait_until("the orphaned workers stopped", lambda: not any(process_alive(p) for p in workers), 30)
    finally:
        server.kill()


def test_workers_need_postgresql(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("NANUM_")}
    env.update(XDG_CONFIG_HOME=str(tmp_path / "config"))
    done = subprocess.run([*nanum_command(), "server", "--home", str(tmp_path / "home"), "--port", "0",
                           "--workers", "2"], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode != 0
    assert "--workers needs PostgreSQL" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr
    refused = subprocess.run([*nanum_command(), "server", "--home", str(tmp_path / "home"), "--workers", "0"],
                             env=env, capture_output=True, text=True, timeout=60)
    assert refused.returncode == 2 and "--workers" in refused.stderr and "Traceback" not in refused.stderr
