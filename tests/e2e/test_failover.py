"""Two `nanum server` processes on one PostgreSQL database, agents and the CLI given both URLs: the leading server
is killed in the middle of a workload, and the other carries on. No submission is lost, no job runs twice, and
scheduling resumes within seconds. Real processes over loopback HTTP; every run of a job appends its job ID to a
run log the test reads."""

from __future__ import annotations

import os
import subprocess
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.cluster import AgentProc, ServerProc, job_account, kill_job_processes, nanum_command, remove, shared_dir
from tests.store.databases import create_pg_schema, drop_pg_schema, pg_schema_url

pytestmark = [pytest.mark.e2e, pytest.mark.postgres, pytest.mark.timeout(240)]

JOB = ["sh", "-c", 'echo "$NANUM_JOB_ID $(date +%s.%N)" >> runs.log; sleep 1']


@pytest.fixture
def database() -> Iterator[str]:
    """A fresh schema in the test database, as a URL `nanum server --db` takes."""
    schema = create_pg_schema()
    yield pg_schema_url(schema)
    drop_pg_schema(schema)


@pytest.fixture
def workdir() -> Iterator[Path]:
    path = shared_dir("nanum-failover-")
    yield path
    remove(path)


def _submit(servers: str, token: str, workdir: Path, count: int) -> list[int]:
    """`nanum submit` as a user would, with both servers in NANUM_SERVER."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("NANUM_")}
    env.update(NANUM_SERVER=servers, NANUM_TOKEN=token, XDG_CONFIG_HOME=str(workdir / ".config"))
    ids = []
    for _ in range(count):
        done = subprocess.run([*nanum_command(), "submit", "--gpus", "1", "--workdir", str(workdir), "--", *JOB],
                              env=env, capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        ids.append(int(done.stdout.split()[2]))  # "Submitted job 12"
    return ids


def _starts(workdir: Path) -> list[tuple[int, float]]:
    """(job ID, wall-clock start) of every run so far."""
    path = workdir / "runs.log"
    lines = path.read_text().splitlines() if path.exists() else []
    return [(int(job), float(at)) for job, at in (line.split() for line in lines if len(line.split()) == 2)]


def _ran(workdir: Path) -> Counter[int]:
    return Counter(job for job, _ in _starts(workdir))


def _wait(what: str, check: object, timeout: float, *why: object) -> None:
    deadline = time.monotonic() + timeout
    while not (callable(check) and check()):
        assert time.monotonic() < deadline, f"not {what} within {timeout} s: {why}"
        time.sleep(0.1)


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
        _wait("both nodes up", lambda: sum(n["state"] == "up" for n in second.api("GET", "/nodes")) == 2, 30)

        before = _submit(both, alice, workdir, 12)
        _wait("a few jobs run", lambda: len(_ran(workdir)) >= 4, 30, first.log_tail())
        first.kill()
        killed_at = time.time()
        after = _submit(both, alice, workdir, 8)  # the CLI moves on to the second server by itself

        _wait("a job starts after the kill", lambda: any(at > killed_at for _, at in _starts(workdir)), 30,
              second.log_tail())
        resumed_s = min(at for _, at in _starts(workdir) if at > killed_at) - killed_at
        jobs = before + after
        done = lambda: all(second.api("GET", f"/jobs/{j}")["state"] == "completed" for j in jobs)  # noqa: E731
        _wait("every job completed", done, 90, second.log_tail(), [a.log_text()[-2000:] for a in agents])
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
