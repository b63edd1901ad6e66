"""Two `nanum server` processes on one PostgreSQL database, agents and the CLI given both URLs: the leading server
is killed in the middle of a workload, and the other carries on. No submission is lost, no job runs twice, and
scheduling resumes within seconds. Real processes over loopback HTTP; every run of a job appends its job ID to a
run log the test reads."""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path

import pytest

from tests.e2e.cluster import AgentProc, ServerProc, job_account, kill_job_processes, submit_many, wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.postgres, pytest.mark.timeout(240)]

JOB = ["sh", "-c", 'echo "$NANUM_JOB_ID $(date +%s.%N)" >> runs.log; sleep 1']


def _starts(workdir: Path) -> list[tuple[int, float]]:
    """(job ID, wall-clock start) of every run so far."""
    path = workdir / "runs.log"
    lines = path.read_text().splitlines() if path.exists() else []
    return [(int(job), float(at)) for job, at in (line.split() for line in lines if len(line.split()) == 2)]


def _ran(workdir: Path) -> Counter[int]:
    return Counter(job for job, _ in _starts(workdir))


def test_the_other_server_carries_on_when_the_leader_is_killed(tmp_path: Path, database: str, workdir: Path) -> None:
    first = ServerProc(tmp_path / "a", ("--db", database))
    second = ServerProc(tmp_path / "b", ("--db", database))
    agents: list[AgentProc] = []
    try:
        first.start()  # the first to start takes the scheduler lock
        second.start()
        both = f"{first.url},{second.url}"
        for name in ("node-a", "node-b"):
            token = first.api("POST", "/nodes", {"name": name})["token"]
            agents.append(AgentProc(name, both, token, tmp_path, gpus="2"))
        alice = first.api("POST", "/users", {"name": "alice", "labs": ["vision"], "unix_user": job_account()})["token"]
        for agent in agents:
            agent.start()
        wait_until("both nodes up", lambda: sum(n["state"] == "up" for n in second.api("GET", "/nodes")) == 2, 30)

        before = submit_many(both, alice, workdir, 12, JOB)
        wait_until("a few jobs run", lambda: len(_ran(workdir)) >= 4, 30, first.log_tail())
        first.kill()
        killed_at = time.time()
        after = submit_many(both, alice, workdir, 8, JOB)  # the CLI moves on to the second server by itself

        wait_until("a job starts after the kill", lambda: any(at > killed_at for _, at in _starts(workdir)), 30,
              second.log_tail())
        resumed_s = min(at for _, at in _starts(workdir) if at > killed_at) - killed_at
        jobs = before + after
        done = lambda: all(second.api("GET", f"/jobs/{j}")["state"] == "completed" for j in jobs)  # noqa: E731
        wait_until("every job completed", done, 90, second.log_tail(), [a.log_text()[-2000:] for a in agents])
        ran = _ran(workdir)
        assert sorted(ran) == sorted(jobs) and set(ran.values()) == {1}, ran  # each ran exactly once
        assert all(second.api("GET", f"/jobs/{j}")["runs"] == 1 for j in jobs)
        assert resumed_s < 15, f"scheduling resumed only {resumed_s:.1f} s after the leader died"
        print(f"scheduling resumed {resumed_s:.1f} s after the leading server was killed")
        assert any("trying" in a.log_text() for a in agents), "no agent said it moved to the other server"
    finally:
        for agent in agents:
            agent.kill()
            kill_job_processes(agent.state_dir)
        first.kill()
        second.kill()
