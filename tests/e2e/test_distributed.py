"""Distributed training across two real agents, one of them in its own network namespace: `--torchrun` starts
torch's gloo all-reduce on both nodes with the rendezvous filled in, and `nanum logs` shows both ranks' lines
(each led by its node) while `--node` picks one; when one node's agent dies mid-job, the other part is stopped and
the job is requeued. Needs root (namespaces, the job account) and PyTorch (`pip install torch==2.13.0`)."""

from __future__ import annotations

import importlib.util
import json
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.cluster import AgentProc, ServerProc, job_account, kill_job_processes, process_alive, remove, shared_dir
from tests.e2e.test_fencing import cut_off_namespace  # noqa: F401  (a fixture)

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(240)]

ROOT = Path(__file__).resolve().parents[2]
VENV_BIN = Path(sys.executable).parent
LEASE_S, GRACE_S = 10.0, 2.0  # a lease long enough for a busy machine (torch starting on two cores)
SYSTEM_PYTHON = "/usr/bin/python3"


def _site_packages() -> str:
    import torch

    return str(Path(torch.__file__).parents[1])

# The example, after pinning gloo to the interface that reaches the master (each node here has a different
# one: the namespace's veth and the host's), and, with HOLD set, writing its pid and waiting to be stopped.
SCRIPT = """
import os, runpy, socket, subprocess, sys, time
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.connect((os.environ["MASTER_ADDR"], 1))
mine = s.getsockname()[0]
for line in subprocess.run(["ip", "-o", "-4", "addr", "show"], capture_output=True, text=True).stdout.splitlines():
    if f" {mine}/" in line:
        os.environ["GLOO_SOCKET_IFNAME"] = line.split()[1]
runpy.run_path(sys.argv[1], run_name="__main__")
if os.environ.get("HOLD"):
    with open(f"pid-{os.environ['RANK']}", "w") as f:
        f.write(str(os.getpid()))
    for _ in range(1200):
        time.sleep(0.1)
"""


def _nanum(server: ServerProc, token: str, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {**server.env(), "NANUM_SERVER": server.url, "NANUM_TOKEN": token}
    return subprocess.run([str(VENV_BIN / "nanum"), *args], env=env, cwd=cwd, capture_output=True, text=True,
                          timeout=150)


def _wait(what: str, check: object, timeout: float, server: ServerProc) -> None:
    deadline = time.monotonic() + timeout
    while not (callable(check) and check()):
        assert time.monotonic() < deadline, f"not {what} within {timeout} s\n{server.log_tail()}"
        time.sleep(0.1)


def _system_minor() -> tuple[int, ...]:
    try:
        out = subprocess.run([SYSTEM_PYTHON, "-c", "import sys; print(*sys.version_info[:2])"], capture_output=True,
                             text=True, timeout=10).stdout
    except OSError:
        return ()
    return tuple(int(x) for x in out.split())


@pytest.fixture
def workdir() -> Iterator[Path]:
    path = shared_dir("nanum-fleet-")
    yield path
    remove(path)


def test_torchrun_all_reduce_across_two_agents_and_a_lost_node_stops_both_parts(
    tmp_path: Path, workdir: Path, cut_off_namespace: tuple[str, str, str, str]  # noqa: F811
) -> None:
    if importlib.util.find_spec("torch") is None:
        pytest.skip("PyTorch is not installed: .venv/bin/python -m pip install torch==2.13.0")
    if _system_minor() != sys.version_info[:2]:
        pytest.skip(f"{SYSTEM_PYTHON} is not Python {sys.version_info[0]}.{sys.version_info[1]}, as this venv's "
                    "PyTorch needs")
    ns, _, host_ip, ns_ip = cut_off_namespace
    server = ServerProc(tmp_path, ("--lease", str(LEASE_S), "--grace", str(GRACE_S)), host=host_ip)
    server.start()
    agents = []
    for name, netns, address in (("node-a", ns, ns_ip), ("node-b", None, host_ip)):
        token = server.api("POST", "/nodes", {"name": name})["token"]
        agents.append(AgentProc(name, server.url, token, tmp_path, gpus="1", netns=netns,
                                args=("--hostname", address)))
    alice = server.api("POST", "/users", {"name": "alice", "labs": ["vision"], "unix_user": job_account()})["token"]
    (workdir / "run.py").write_text(SCRIPT)
    (workdir / "allreduce.py").write_text((ROOT / "examples" / "allreduce.py").read_text())
    # The nodes' PyTorch for the job's account: this venv's packages under the system's Python of the same
    # version (the venv's own interpreter lives where only root may look).
    bin_dir = workdir / "bin"
    bin_dir.mkdir()
    (bin_dir / "torchrun").write_text(f"#!/bin/sh\nexec {SYSTEM_PYTHON} -m torch.distributed.run \"$@\"\n")
    (bin_dir / "torchrun").chmod(0o755)
    path = f"PATH={bin_dir}:/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin"
    pythonpath = f"PYTHONPATH={_site_packages()}"
    try:
        for agent in agents:
            agent.start()
        _wait("both nodes up", lambda: sum(n["state"] == "up" for n in server.api("GET", "/nodes")) == 2, 30,
              server)
        env = ("--env", path, "--env", pythonpath)
        done = _nanum(server, alice, "submit", "--nodes", "2", "--gpus", "1", *env, "--json", "--torchrun",
                      "run.py", "allreduce.py", cwd=workdir)
        assert done.returncode == 0, done.stderr
        job_id = int(json.loads(done.stdout)["id"])
        waited = _nanum(server, alice, "wait", str(job_id), "--timeout", "60")
        logs = _nanum(server, alice, "logs", str(job_id)).stdout
        assert waited.returncode == 0, logs
        assert "[node-a] rank 0 of 2" in logs or "[node-b] rank 0 of 2" in logs, logs
        lines = [line for line in logs.splitlines() if "all-reduce sum" in line]
        assert sorted(line.split("]")[0] for line in lines) == ["[node-a", "[node-b"], logs
        assert all(line.endswith("all-reduce sum 3 (expected 3)") for line in lines), logs
        rank1 = _nanum(server, alice, "logs", str(job_id), "--node", "1").stdout
        assert "rank 1 of 2" in rank1 and "rank 0 of 2" not in rank1 and "[node-" not in rank1, rank1

        # A second run holds after its all-reduce; node-b's agent dies with its part (the machine is gone).
        held = _nanum(server, alice, "submit", "--nodes", "2", "--gpus", "1", *env, "--env", "HOLD=1", "--json",
                      "--torchrun", "run.py", "allreduce.py", cwd=workdir)
        job_id = int(json.loads(held.stdout)["id"])
        _wait("both parts running", lambda: len(list(workdir.glob("pid-*"))) == 2, 90, server)
        allocation = [a["node"] for a in server.api("GET", f"/jobs/{job_id}")["allocation"]]
        survivor = int((workdir / f"pid-{allocation.index('node-a')}").read_text())
        dead = agents[1]
        dead.signal(signal.SIGKILL)
        kill_job_processes(dead.state_dir)
        _wait("the surviving part stopped", lambda: not process_alive(survivor), 60, server)
        _wait("requeued", lambda: server.api("GET", f"/jobs/{job_id}")["state"] == "pending", 30, server)
        job = server.api("GET", f"/jobs/{job_id}")
        assert "requeued" in (job["reason"] or "") or "down" in (job["reason"] or ""), job
    finally:
        for agent in agents:
            agent.kill()
            kill_job_processes(agent.state_dir)
        server.kill()
