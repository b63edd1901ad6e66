"""--cpus and --mem held by the node's cgroups: real jobs in real cgroups (skipped where none is writable)."""

from __future__ import annotations

import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from nanum.agent.cgroups import NOT_ENFORCED, Cgroups, CpuStats, probe
from nanum.agent.executor import Executor
from nanum.protocol import JobLaunch
from nanum.units import memory_text
from tests.agent.conftest import NODE, make_launch
from tests.e2e.cluster import job_account, remove, shared_dir

PYTHON = shutil.which("python3", path="/usr/local/bin:/usr/bin:/bin") or "python3"

ALLOCATE = "import time; b = bytearray({mb} * 2**20); time.sleep(0.2); print('allocated')"
# Four processes spinning for 1.5 s of wall time (more than one core's worth even while other work holds a core of
# two); prints the CPU seconds they got together.
SPIN = (
    "import os, time\n"
    "pids = []\n"
    "for _ in range(4):\n"
    "    pid = os.fork()\n"
    "    if pid == 0:\n"
    "        t = time.monotonic()\n"
    "        while time.monotonic() - t < 1.5: pass\n"
    "        os._exit(0)\n"
    "    pids.append(pid)\n"
    "for pid in pids: os.waitpid(pid, 0)\n"
    "t = os.times(); print(t.children_user + t.children_system)\n"
)


@pytest.fixture
def cgroups(state_dir: Path) -> Iterator[Cgroups]:
    found, summary = probe(NODE, state_dir)
    if found is None:
        pytest.skip(f"limits {summary} on this machine: needs root and a writable cgroup v2 or v1 cpu and memory")
    yield found
    found.close()


@pytest.fixture
def limited(state_dir: Path, cgroups: Cgroups) -> Iterator[Executor]:
    ex = Executor(state_dir, NODE, cgroups=cgroups)
    yield ex
    for job_id, state in ex.held().items():
        if state == "running":
            ex.stop(job_id, 0.0)
            ex.wait(job_id, 5)
    ex.close()


def _launch(job_id: int, *command: str, **fields: object) -> JobLaunch:
    """A job of the account the tests' jobs run as (not root: the agent drops to it, then ENTERs the cgroup)."""
    return make_launch(job_id, *command, unix_user=job_account(), **fields)


def _job_dirs(cgroups: Cgroups, job_id: int) -> list[Path]:
    return [p / f"job-{job_id}" for p in cgroups.parents]


def test_a_job_over_its_memory_limit_is_killed_and_says_why(limited: Executor, cgroups: Cgroups) -> None:
    limited.start(_launch(1, PYTHON, "-c", ALLOCATE.format(mb=256), memory_mb=64))
    status = limited.wait(1, 20)
    assert status is not None and status.state == "exited"
    assert status.signal == 9
    assert status.reason == "killed: exceeded its memory limit of 64 MiB"
    assert "allocated" not in limited.read_log(1, 0, 10_000)[0]
    assert not any(d.exists() for d in _job_dirs(cgroups, 1))  # removed once the job ended


def test_a_job_within_its_memory_limit_runs_to_its_end(limited: Executor) -> None:
    limited.start(_launch(2, PYTHON, "-c", ALLOCATE.format(mb=16), memory_mb=256))
    status = limited.wait(2, 20)
    assert status is not None
    assert (status.exit_code, status.reason) == (0, None)
    assert "allocated" in limited.read_log(2, 0, 10_000)[0]


def _spin(executor: Executor, cgroups: Cgroups, job_id: int, cpus: int) -> tuple[float, CpuStats | None]:
    """Run the spinners as job `job_id`: the CPU seconds they got, and their cgroup's CPU statistics."""
    executor.start(_launch(job_id, PYTHON, "-c", SPIN, cpus=cpus))
    time.sleep(1.0)
    stats = cgroups.stats(job_id)
    status = executor.wait(job_id, 20)
    assert status is not None and status.exit_code == 0, executor.read_log(job_id, 0, 10_000)[0]
    return float(executor.read_log(job_id, 0, 10_000)[0].split()[-1]), stats


def test_a_busy_job_gets_no_more_cpu_than_its_cpus(limited: Executor, cgroups: Cgroups) -> None:
    free, unlimited = _spin(limited, cgroups, 3, cpus=0)
    held, limited_stats = _spin(limited, cgroups, 5, cpus=1)
    assert unlimited is not None and unlimited.periods == 0  # no quota: the kernel counts no periods
    assert limited_stats is not None and limited_stats.periods > 0  # the quota is in force
    assert held < 1.5 * 1.3  # spinners for 1.5 s held to one core (unlimited: up to 1.5 s per core)
    # Throttling shows only where the spinners could get more than one core: on a machine busy with other work
    # (unlimited, they got little more than one core's worth; limited, less than the one core allowed: the machine
    # got busier between the two runs) it cannot, and the quota's periods are the evidence.
    if free > 1.5 * 1.5 and held > 1.5 * 0.9:
        assert limited_stats.throttled > 0 and limited_stats.throttled_us > 0, (free, held, limited_stats)


def test_what_a_job_leaves_behind_in_another_session_is_killed_when_it_ends(limited: Executor) -> None:
    shared = shared_dir("nanum-limits-")
    pid_file = shared / "escaped.pid"
    limited.start(_launch(4, "sh", "-c", f"setsid sh -c 'echo $$ > {pid_file}; exec sleep 300' & sleep 0.3"))
    status = limited.wait(4, 20)
    assert status is not None and status.exit_code == 0
    escaped = int(pid_file.read_text())
    deadline = time.monotonic() + 5
    while Path(f"/proc/{escaped}").exists() and _state(escaped) != "Z" and time.monotonic() < deadline:
        time.sleep(0.05)
    remove(shared)
    assert not Path(f"/proc/{escaped}").exists() or _state(escaped) == "Z"


def test_a_job_and_what_it_starts_are_in_its_own_cgroup_from_its_first_instruction(
        limited: Executor, cgroups: Cgroups) -> None:
    # The first line is the job's own shell, the second a process it starts: both in job-6 in every hierarchy
    # (v1: the memory and the cpu tree), though the agent's ENTER moved only its own thread there.
    limited.start(_launch(6, "sh", "-c", "cat /proc/$$/cgroup; echo --; sh -c 'cat /proc/$$/cgroup'"))
    status = limited.wait(6, 20)
    assert status is not None and status.exit_code == 0
    own, started = limited.read_log(6, 0, 10_000)[0].split("--\n")
    for lines in (own, started):
        inside = [line for line in lines.splitlines() if line.endswith(f"/{cgroups.parents[0].name}/job-6")]
        assert len(inside) == len(cgroups.parents), lines


# Forks sleeping children until the kernel refuses one; prints how many it got.
FORK_BOMB = (
    "import os, time\n"
    "n = 0\n"
    "while n < 100_000:\n"
    "    try:\n"
    "        pid = os.fork()\n"
    "    except OSError as exc:\n"
    "        print('refused', n, exc.strerror, flush=True); break\n"
    "    if pid == 0:\n"
    "        time.sleep(300); os._exit(0)\n"
    "    n += 1\n"
)


def test_a_fork_bomb_is_held_to_its_share_of_the_machines_processes(
    state_dir: Path, cgroups: Cgroups, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A job forking without end gets at most `tasks_max()` processes (here held to 200), then the kernel refuses
    it; the agent and the machine keep the rest, and what it forked is killed when it ends."""
    if not cgroups.pids:
        pytest.skip("this machine's cgroups have no pids controller")
    from nanum.agent import cgroups as module

    monkeypatch.setattr(module, "tasks_max", lambda: 200)
    cgroups, _ = probe(NODE, state_dir)
    assert cgroups is not None
    ex = Executor(state_dir, NODE, cgroups=cgroups)
    try:
        ex.start(_launch(8, PYTHON, "-c", FORK_BOMB))
        status = ex.wait(8, 60)
        assert status is not None and status.exit_code == 0
        said = ex.read_log(8, 0, 10_000)[0]
        assert said.startswith("refused ") and 150 <= int(said.split()[1]) < 200, said
        assert not any(d.exists() for d in _job_dirs(cgroups, 8))  # its children killed, its cgroup removed
    finally:
        ex.close()
        cgroups.close()


def test_without_a_writable_cgroup_limits_are_not_enforced(tmp_path: Path) -> None:
    assert probe(NODE, tmp_path / "state", root=tmp_path / "no-cgroups") == (None, NOT_ENFORCED)


@pytest.mark.parametrize(
    ("memory_mb", "text"),
    [
        pytest.param(512, "512 MiB", id="mib"),
        pytest.param(2048, "2 GiB", id="gib"),
        pytest.param(1536, "1.5 GiB", id="fraction"),
    ],
)
def test_memory_text(memory_mb: int, text: str) -> None:
    assert memory_text(memory_mb) == text


def _state(pid: int) -> str:
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return "gone"
    return raw[raw.rindex(")") + 2]


def test_job_cgroups_are_gone_after_the_executor_closes(state_dir: Path, cgroups: Cgroups) -> None:
    ex = Executor(state_dir, NODE, cgroups=cgroups)
    ex.start(_launch(5, "true"))
    assert ex.wait(5, 10) is not None
    ex.close()
    assert not any(p.exists() for p in cgroups.parents)
