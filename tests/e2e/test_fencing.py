"""A job never runs twice at once when its node's agent loses the server: the agent (or, while the agent is
frozen, its guard process) stops the node's jobs once its lease runs out, and the server requeues them only
after the lease and their grace have surely passed. Real `nanum server` and `nanum agent` processes, two nodes
with one simulated GPU each; every run of the job appends its start and end to a run log the test reads."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.e2e.cluster import (
    AgentProc,
    ServerProc,
    job_account,
    kill_job_processes,
    process_alive,
    remove,
    shared_dir,
)

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(240)]

LEASE_S, GRACE_S = 3.0, 1.0
REQUEUE_AFTER_S = LEASE_S + GRACE_S + max(2.0, LEASE_S / 3)  # the server's wait: lease + grace + margin
#: How an agent logs the end of a job it stopped for want of a lease.
FENCED = "heard nothing from the server for longer than the lease"

# Appends `start PID TIME` to runs.log, then `end PID TIME` when it ends or is stopped; runs until `release`.
JOB = [
    "sh", "-c",
    'echo "start $$ $(date +%s.%N)" >> runs.log; '
    'trap \'echo "end $$ $(date +%s.%N)" >> runs.log; exit 143\' TERM; '
    'i=0; while [ ! -e release ] && [ $i -lt 1800 ]; do sleep 0.1; i=$((i+1)); done; '
    'echo "end $$ $(date +%s.%N)" >> runs.log',
]


@dataclass
class Run:
    pid: int
    start: float
    end: float | None = None


def runs(workdir: Path) -> list[Run]:
    """The job's runs, in the order they started, from its run log."""
    found: dict[int, Run] = {}
    path = workdir / "runs.log"
    for line in path.read_text().splitlines() if path.exists() else []:
        parts = line.split()
        if len(parts) != 3:
            continue
        kind, pid, at = parts[0], int(parts[1]), float(parts[2])
        if kind == "start":
            found[pid] = Run(pid, at)
        elif pid in found:
            found[pid].end = at
    return sorted(found.values(), key=lambda r: r.start)


class Watch:
    """Samples the job's processes: never may two of its runs be alive at once."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.most_alive = 0

    def look(self) -> list[Run]:
        seen = runs(self.workdir)
        alive = [r for r in seen if process_alive(r.pid)]
        self.most_alive = max(self.most_alive, len(alive))
        assert len(alive) <= 1, f"two copies of the job run at once: {alive}"
        return seen

    def until(self, what: str, check: object, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while True:
            self.look()
            if callable(check) and check():
                return
            assert time.monotonic() < deadline, f"not {what} within {timeout} s"
            time.sleep(0.05)


@pytest.fixture
def workdir() -> Iterator[Path]:
    path = shared_dir("nanum-fence-")
    yield path
    remove(path)


def _setup(server: ServerProc, root: Path, names: list[str], netns: dict[str, str] | None = None,
           url: str | None = None) -> tuple[list[AgentProc], str]:
    server.start()
    agents = []
    for name in names:
        token = server.api("POST", "/nodes", {"name": name})["token"]
        ns = (netns or {}).get(name)
        agents.append(AgentProc(name, url or server.url, token, root, netns=ns))
    user = server.api("POST", "/users", {"name": "alice", "labs": ["vision"], "unix_user": job_account()})
    return agents, user["token"]


def _wait_nodes_up(server: ServerProc, names: list[str], timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while {n["name"] for n in server.api("GET", "/nodes") if n["state"] == "up"} < set(names):
        assert time.monotonic() < deadline, f"nodes {names} did not come up:\n{server.log_tail()}"
        time.sleep(0.1)


def _job(server: ServerProc, token: str, job_id: int) -> dict[str, object]:
    return dict(server.api("GET", f"/jobs/{job_id}", token=token))


def _node_of(job: dict[str, object]) -> str | None:
    alloc = job.get("allocation") or []
    return str(alloc[0]["node"]) if job.get("state") == "running" and alloc else None  # type: ignore[index]


def _cleanup(server: ServerProc, agents: list[AgentProc]) -> None:
    for agent in agents:
        agent.kill()
        kill_job_processes(agent.state_dir)
    server.kill()


def test_a_frozen_agents_job_runs_elsewhere_only_after_its_copy_is_gone(tmp_path: Path, workdir: Path) -> None:
    server = ServerProc(tmp_path, ("--lease", str(LEASE_S), "--grace", str(GRACE_S)))
    agents, alice = _setup(server, tmp_path, ["gpu-a", "gpu-b"])
    watch = Watch(workdir)
    try:
        for agent in agents:
            agent.start()
        _wait_nodes_up(server, ["gpu-a", "gpu-b"])
        job_id = server.api("POST", "/jobs", {"command": JOB, "gpus": 1, "workdir": str(workdir)}, token=alice)["id"]
        watch.until("running", lambda: len(runs(workdir)) == 1, 30)
        first_node = _node_of(_job(server, alice, job_id))
        frozen = next(a for a in agents if a.name == first_node)
        frozen.signal(signal.SIGSTOP)
        frozen_at = time.time()

        # While the agent is frozen, its guard stops the job when the lease runs out; the server requeues it
        # only after lease + grace + margin, and it starts again on the other node.
        watch.until("restarted on the other node",
                    lambda: len(runs(workdir)) == 2 and _node_of(_job(server, alice, job_id)) not in (None, first_node),
                    REQUEUE_AFTER_S + 30)
        first, second = runs(workdir)
        assert first.end is not None and first.end <= frozen_at + LEASE_S + GRACE_S + 1.0, (first, frozen_at)
        assert first.end < second.start and not process_alive(first.pid)
        assert second.start - frozen_at >= LEASE_S, "requeued before the frozen agent's lease could have run out"

        # The agent wakes (well past the point where the server gave its job away): it does not run its old copy
        # again or disturb the new one, and reports the old copy as fenced.
        time.sleep(2)
        frozen.signal(signal.SIGCONT)
        watch.until("the resumed agent records its copy as fenced", lambda: FENCED in frozen.log_text(), 20)
        for _ in range(40):
            watch.look()
            time.sleep(0.05)
        assert _node_of(_job(server, alice, job_id)) not in (None, first_node)
        (workdir / "release").touch()
        watch.until("completed", lambda: _job(server, alice, job_id)["state"] == "completed", 30)
        done = _job(server, alice, job_id)
        assert done["runs"] == 2 and len(runs(workdir)) == 2 and watch.most_alive == 1
    finally:
        _cleanup(server, agents)


# -- a node cut off from the network ------------------------------------------------------------------------


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, timeout=10)


def _netns_available() -> str | None:
    """Why network namespaces cannot be used here, or None when they can."""
    if os.geteuid() != 0:
        return "needs root to create network namespaces"
    try:
        subprocess.run(["ip", "netns", "list"], check=True, capture_output=True, timeout=10)
    except (OSError, subprocess.SubprocessError) as exc:
        return f"`ip netns` is unavailable: {exc}"
    return None


@pytest.fixture
def cut_off_namespace() -> Iterator[tuple[str, str, str, str]]:
    """A network namespace joined to this one by a veth pair: (namespace, host-side link, host address,
    namespace address). Removed afterwards."""
    if (why := _netns_available()) is not None:
        pytest.skip(why)
    tag = f"{os.getpid() % 10000}"
    ns, host_if, ns_if = f"nanum-fence-{tag}", f"nfh{tag}", f"nfn{tag}"
    octet = 1 + os.getpid() % 250
    host_ip, ns_ip = f"10.213.{octet}.1", f"10.213.{octet}.2"
    try:
        _ip("netns", "add", ns)
        _ip("link", "add", host_if, "type", "veth", "peer", "name", ns_if)
        _ip("link", "set", ns_if, "netns", ns)
        _ip("addr", "add", f"{host_ip}/30", "dev", host_if)
        _ip("link", "set", host_if, "up")
        _ip("-n", ns, "addr", "add", f"{ns_ip}/30", "dev", ns_if)
        _ip("-n", ns, "link", "set", ns_if, "up")
        _ip("-n", ns, "link", "set", "lo", "up")
    except subprocess.CalledProcessError as exc:
        with contextlib.suppress(subprocess.CalledProcessError):
            _ip("netns", "del", ns)
        pytest.skip(f"cannot set up a network namespace: {exc.stderr.decode(errors='replace').strip()}")
    try:
        yield ns, host_if, host_ip, ns_ip
    finally:
        with contextlib.suppress(subprocess.CalledProcessError):
            _ip("link", "del", host_if)
        with contextlib.suppress(subprocess.CalledProcessError):
            _ip("netns", "del", ns)


def test_an_agent_cut_off_from_the_server_stops_its_job_before_it_runs_elsewhere(
    tmp_path: Path, workdir: Path, cut_off_namespace: tuple[str, str, str, str]
) -> None:
    ns, host_if, host_ip, _ = cut_off_namespace
    server = ServerProc(tmp_path, ("--lease", str(LEASE_S), "--grace", str(GRACE_S)), host=host_ip)
    agents, alice = _setup(server, tmp_path, ["gpu-a", "gpu-b"], netns={"gpu-a": ns})
    cut_off, other = agents
    watch = Watch(workdir)
    try:
        cut_off.start()
        _wait_nodes_up(server, ["gpu-a"])
        job_id = server.api("POST", "/jobs", {"command": JOB, "gpus": 1, "workdir": str(workdir)}, token=alice)["id"]
        watch.until("running on the cut-off node", lambda: len(runs(workdir)) == 1, 30)
        assert _node_of(_job(server, alice, job_id)) == "gpu-a"
        other.start()
        _wait_nodes_up(server, ["gpu-a", "gpu-b"])

        _ip("link", "set", host_if, "down")
        cut_at = time.time()
        # The cut-off agent stops its job by itself within its lease (and the job's grace) ...
        watch.until("stopped on the cut-off node", lambda: runs(workdir)[0].end is not None, LEASE_S + GRACE_S + 10)
        first = runs(workdir)[0]
        assert first.end is not None and first.end - cut_at <= LEASE_S + GRACE_S + 1.0
        # ... and only then does the server requeue it; it runs once more, on the other node.
        watch.until("restarted on the other node", lambda: _node_of(_job(server, alice, job_id)) == "gpu-b",
                    REQUEUE_AFTER_S + 30)
        watch.until("started on the other node", lambda: len(runs(workdir)) == 2, 30)
        first, second = runs(workdir)
        assert first.end is not None and first.end < second.start
        assert second.start - cut_at >= LEASE_S
        assert FENCED in cut_off.log_text()

        _ip("link", "set", host_if, "up")  # the node comes back: its stopped copy does not disturb the new run
        deadline = time.monotonic() + 30
        while not any(n["name"] == "gpu-a" and n["state"] == "up" for n in server.api("GET", "/nodes")):
            watch.look()
            assert time.monotonic() < deadline, "the cut-off node did not come back"
            time.sleep(0.1)
        (workdir / "release").touch()
        watch.until("completed", lambda: _job(server, alice, job_id)["state"] == "completed", 30)
        assert _job(server, alice, job_id)["runs"] == 2 and len(runs(workdir)) == 2 and watch.most_alive == 1
    finally:
        _cleanup(server, agents)
