"""GPU and job readings: simulated GPUs follow their jobs' declared load, processes outside nanum are found (on
simulated GPUs through the simulation file, on real ones through NVML), CPU use and notebook activity are read,
and the agent carries every reading to the server."""

from __future__ import annotations

import os
import random
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from nanum.agent.executor import Executor
from nanum.agent.gpus import simulated_gpus
from nanum.agent.monitor import ROGUE_FILE, JobView, Monitor, NvmlSampler, SimSampler
from nanum.protocol import Sample
from tests.agent.conftest import NODE, make_launch
from tests.agent.fakeserver import FakeServer
from tests.agent.test_agent_loop import make_agent, running


@pytest.fixture
def stray() -> Iterator[subprocess.Popen[bytes]]:
    """A process outside nanum (someone who bypassed the queue)."""
    proc = subprocess.Popen(["sleep", "60"])
    yield proc
    proc.kill()
    proc.wait()


def views(executor: Executor) -> list[JobView]:
    return [
        JobView(r.job_id, pid, tuple(r.launch.gpus), r.launch.env, started, r.activity_path)
        for r, pid, started in executor.running()
    ]


def sim_monitor(state_dir: Path) -> Monitor:
    return Monitor(SimSampler(simulated_gpus("4xA100", NODE), state_dir / ROGUE_FILE, random.Random(7)))


def by_index(sample: Sample) -> dict[int, Any]:
    return {g.index: g for g in sample.gpus}


def test_simulated_gpus_show_their_jobs_declared_load(executor: Executor, state_dir: Path) -> None:
    executor.start(make_launch(1, "sleep", "30", gpus=[0, 1], env={"NANUM_SIM_UTIL": "40"}), allow_root=True)
    executor.start(
        make_launch(2, "sleep", "30", gpus=[2], env={"NANUM_SIM_UTIL": "0", "NANUM_SIM_MEM": "1000"}), allow_root=True
    )
    gpus = by_index(sim_monitor(state_dir).read(views(executor)))
    assert 35 <= gpus[0].util <= 45 and 35 <= gpus[1].util <= 45
    assert gpus[0].memory_mb == int(0.4 * 81920) and gpus[0].processes[0].job_id == 1
    assert gpus[2].util == 0 and gpus[2].memory_mb == 1000 and gpus[2].processes[0].job_id == 2
    assert gpus[3].util == 0 and gpus[3].memory_mb == 0 and gpus[3].processes == []
    assert gpus[0].power_w is not None and gpus[0].power_w > gpus[3].power_w  # type: ignore[operator]


def test_a_simulated_process_outside_nanum_is_reported_while_it_lives(
    state_dir: Path, stray: subprocess.Popen[bytes]
) -> None:
    state_dir.mkdir(parents=True)
    (state_dir / ROGUE_FILE).write_text(f"# gpu pid [MiB]\n3 {stray.pid} 5000\n1 999999999\n")
    monitor = sim_monitor(state_dir)
    gpus = by_index(monitor.read([]))
    [proc] = gpus[3].processes
    assert proc.pid == stray.pid and proc.job_id is None and proc.memory_mb == 5000
    assert proc.command == "sleep 60" and proc.user
    assert gpus[3].util > 0 and gpus[1].processes == []  # pid 999999999 is not alive
    assert monitor.strangers_changed  # news: the agent reports it at once
    monitor.read([])
    assert not monitor.strangers_changed
    stray.kill()
    stray.wait()
    assert by_index(monitor.read([]))[3].processes == [] and monitor.strangers_changed


def test_cpu_use_of_a_job_is_measured(executor: Executor, state_dir: Path) -> None:
    executor.start(make_launch(1, sys.executable, "-c", "while True: pass"), allow_root=True)
    executor.start(make_launch(2, "sleep", "30"), allow_root=True)
    monitor = sim_monitor(state_dir)
    monitor.read(views(executor))
    time.sleep(1.0)
    jobs = {j.job_id: j for j in monitor.read(views(executor)).jobs}
    # a busy loop gets a core only when the machine is idle: on a loaded one it still shows a large share
    assert jobs[1].cpu_percent > 20
    assert jobs[2].cpu_percent < 10


def test_notebook_activity_is_read_from_its_activity_file(executor: Executor, state_dir: Path) -> None:
    executor.start(make_launch(1, "sh", "-c", 'sleep 0.2; touch "$NANUM_ACTIVITY_FILE"; sleep 30'), allow_root=True)
    monitor = sim_monitor(state_dir)
    assert monitor.read(views(executor)).jobs[0].last_activity is None  # never touched yet
    deadline = time.time() + 5
    while (activity := monitor.read(views(executor)).jobs[0].last_activity) is None and time.time() < deadline:
        time.sleep(0.05)
    assert activity is not None and abs(activity - time.time()) < 5


def test_readings_wait_until_a_heartbeat_carried_them(state_dir: Path) -> None:
    monitor = Monitor(SimSampler(simulated_gpus("2", NODE), state_dir / ROGUE_FILE), max_pending=3)
    taken = [monitor.read([], now=float(t)) for t in range(5)]
    assert [s.time for s in monitor.pending()] == [2.0, 3.0, 4.0]  # the oldest are dropped first
    monitor.sent(taken[2:4])
    assert [s.time for s in monitor.pending()] == [4.0]


# -- NVML, through a stand-in for the pynvml module --------------------------------------------------------------


class FakeNvml:
    """The few pynvml calls the sampler makes, over two GPUs."""

    NVML_TEMPERATURE_GPU = 0

    class NVMLError(Exception):
        pass

    def __init__(self, procs: dict[int, list[tuple[int, int | None]]]) -> None:
        self.procs = procs
        self.shut = False

    def nvmlInit(self) -> None:
        pass

    def nvmlShutdown(self) -> None:
        self.shut = True

    def nvmlDeviceGetCount(self) -> int:
        return 2

    def nvmlDeviceGetHandleByIndex(self, i: int) -> int:
        return i

    def nvmlDeviceGetUtilizationRates(self, h: int) -> Any:
        return SimpleNamespace(gpu=[87, 3][h])

    def nvmlDeviceGetMemoryInfo(self, h: int) -> Any:
        return SimpleNamespace(used=[30 << 30, 1 << 30][h], total=80 << 30)

    def nvmlDeviceGetPowerUsage(self, h: int) -> int:
        if h == 1:
            raise self.NVMLError("Not Supported")
        return 312_000

    def nvmlDeviceGetTemperature(self, h: int, sensor: int) -> int:
        return 61

    def nvmlDeviceGetComputeRunningProcesses(self, h: int) -> list[Any]:
        return [SimpleNamespace(pid=p, usedGpuMemory=m) for p, m in self.procs.get(h, [])]

    def nvmlDeviceGetGraphicsRunningProcesses(self, h: int) -> list[Any]:
        return []


#: A pid no process here can have: above Linux's PID_MAX_LIMIT (2**22), as from another pid namespace.
INVISIBLE = 2**22 + 1


def test_nvml_readings_tell_job_processes_from_strangers(
    executor: Executor, state_dir: Path, stray: subprocess.Popen[bytes]
) -> None:
    executor.start(make_launch(1, "sh", "-c", "sleep 30 & wait", gpus=[0]), allow_root=True)
    [(_, pid, _)] = executor.running()
    assert pid is not None
    time.sleep(0.1)
    child = int(subprocess.check_output(["pgrep", "-s", str(pid), "sleep"]).split()[0])
    nvml = FakeNvml({0: [(child, 20 << 30), (INVISIBLE, None)], 1: [(stray.pid, 512 << 20)]})
    monitor = Monitor(NvmlSampler(nvml))
    gpus = by_index(monitor.read(views(executor)))
    assert gpus[0].util == 87 and gpus[0].memory_mb == 30 * 1024 and gpus[0].power_w == 312.0
    assert gpus[0].temperature_c == 61 and gpus[1].power_w is None
    owners = {p.pid: p.job_id for p in gpus[0].processes}
    assert owners == {child: 1, INVISIBLE: 1}  # its child, and a pid not visible here on its GPU
    [stranger] = gpus[1].processes
    assert stranger.job_id is None and stranger.memory_mb == 512 and stranger.command == "sleep 60"
    assert stranger.user == pwd_name()


def pwd_name() -> str:
    import pwd

    return pwd.getpwuid(os.geteuid()).pw_name


def test_the_agent_carries_readings_to_the_server(state_dir: Path) -> None:
    server = FakeServer()
    agent = make_agent(server.url, state_dir)
    agent.config.sample_interval_s = 0.2
    agent.monitor.interval_s = 0.2
    try:
        with running(agent):
            server.submit(make_launch(1, "sleep", "30", gpus=[1], env={"NANUM_SIM_UTIL": "70"}))
            server.wait_until(lambda: any(s.gpus[1].util > 0 for b in server.beats for s in b.samples))
            server.cancel(1)
            server.wait_state(1, "exited")
    finally:
        server.close()
    times = [s.time for b in server.beats for s in b.samples]
    assert times == sorted(times) and len(times) == len(set(times))  # each reading sent once, in order
