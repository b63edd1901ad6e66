"""Fencing: a node whose agent has had no word from the server for longer than a lease stops its own jobs.

The server requeues a silent node's jobs once the lease, their grace and a margin have surely passed since it
last heard from the node (`nanum.server.settings.ServerSettings.requeue_after_s`). By then every copy on the node
must be gone, or a requeued job would run twice at once. So the agent counts its lease from the moment it *sent*
the last heartbeat that got a reply (never later than the server received it) and, once the lease has run out,
stops its jobs: SIGTERM, then SIGKILL when the job's grace after the lease's end has passed too.

The agent cannot do that while it is frozen (SIGSTOP), hung or dead. So it writes its lease to STATE/lease, and
a small guard process (`python -m nanum.agent.fence STATE`, detached from the agent, one per state directory:
an flock on STATE/fence.lock) reads that file every `LOOK_S` and does the same to the jobs recorded in
STATE/jobs/. Before signalling a job it creates `fenced` in the job's directory, which makes the job's exit
status say `fenced` (the server then requeues it rather than failing it). The guard leaves once the agent has
stopped or died and no job of the node runs; the agent starts a new one whenever none holds the lock.

Times are CLOCK_BOOTTIME seconds, which keep counting while the machine sleeps.

Example: lease 30 s, grace 60 s. A heartbeat sent at t=100 is answered; the node then loses the network. At
t=130 the agent (or, if it is frozen, the guard) sends SIGTERM to every job, at t=190 SIGKILL. The server, which
received that heartbeat at t>=100, requeues the jobs after t=100+30+60+10.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from nanum.agent import procs

__all__ = ["LEASE_FILE", "Lease", "boottime", "ensure_guard", "fence_jobs"]

LEASE_FILE = "lease"
GUARD_LOCK = "fence.lock"
FENCED_MARK = "fenced"
#: How often the guard reads the lease.
LOOK_S = 0.2
#: How often the guard looks whether it may leave.
LEAVE_CHECK_S = 2.0


def boottime() -> float:
    return time.clock_gettime(time.CLOCK_BOOTTIME)


@dataclass(slots=True)
class Lease:
    """The agent's lease as STATE/lease holds it: `expires` (boottime), the agent's pid, whether it stopped,
    and the boot it was taken in."""

    expires: float
    agent: int = 0
    stopped: bool = False
    boot: str = ""

    def expired(self, now: float | None = None) -> bool:
        return (boottime() if now is None else now) >= self.expires

    def save(self, state_dir: Path) -> None:
        tmp = state_dir / f"{LEASE_FILE}.tmp"
        tmp.write_text(json.dumps(asdict(self)))
        os.replace(tmp, state_dir / LEASE_FILE)

    @classmethod
    def load(cls, state_dir: Path) -> Lease | None:
        try:
            data = json.loads((state_dir / LEASE_FILE).read_text())
            return cls(
                float(data["expires"]), int(data.get("agent", 0)), bool(data.get("stopped", False)),
                str(data.get("boot", "")),
            )
        except (OSError, ValueError, TypeError, KeyError):
            return None


def fence_jobs(jobs_dir: Path, expires: float, now: float, signalled: set[tuple[int, int | None]]) -> int:
    """Stop every job recorded under `jobs_dir` whose process still runs: mark it fenced and SIGTERM its group
    once (remembered in `signalled`), SIGKILL it once its grace after `expires` has passed. Returns how many
    recorded jobs still run."""
    alive = 0
    for job_dir in _job_dirs(jobs_dir):
        record = _read(job_dir / "job.json")
        found = _process(job_dir, record)
        if found is None:
            continue
        pid, ticks = found
        alive += 1
        grace = float((record.get("launch") or {}).get("grace_s", 0.0))
        if (pid, ticks) not in signalled:
            with contextlib.suppress(OSError):
                (job_dir / FENCED_MARK).touch()
                (job_dir / "preempt").touch()
            _signal(pid, signal.SIGTERM)
            signalled.add((pid, ticks))
        if now >= expires + grace:
            _signal(pid, signal.SIGKILL)
    return alive


def running_jobs(jobs_dir: Path) -> int:
    """How many recorded jobs still have a live process."""
    return sum(_process(job_dir, _read(job_dir / "job.json")) is not None for job_dir in _job_dirs(jobs_dir))


def _process(job_dir: Path, record: dict[str, Any]) -> tuple[int, int | None] | None:
    """The live process of a recorded job: (pid, start ticks), or None. A job still `starting` (its agent stopped
    between the spawn and recording the pid) is found by the exit file its waiter holds."""
    state, pid, ticks = record.get("state"), record.get("pid"), record.get("start_ticks")
    if state == "starting":
        pid = procs.holding(job_dir / "exit")  # `JobRecord.exit_path`
        return None if pid is None else (pid, procs.start_ticks(pid))
    if state != "running" or not isinstance(pid, int) or not procs.is_alive(pid, ticks):
        return None
    return pid, ticks


def ensure_guard(state_dir: Path) -> bool:
    """Start the guard for `state_dir` unless one holds its lock. True when one was started."""
    fd = os.open(state_dir / GUARD_LOCK, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)
    # The guard forks and its first process exits at once: nothing is left for the agent to reap.
    subprocess.run(
        [sys.executable, "-m", "nanum.agent.fence", str(state_dir)],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        start_new_session=True, check=False, timeout=30,
    )
    return True


def guard(state_dir: Path) -> None:
    """The guard's loop (see the module docstring). Returns when it is not needed, or another guard runs."""
    fd = os.open(state_dir / GUARD_LOCK, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return
    signalled: set[tuple[int, int | None]] = set()
    jobs_dir = state_dir / "jobs"
    next_leave_check = 0.0
    while state_dir.is_dir():
        lease, now = Lease.load(state_dir), boottime()
        if lease is not None and lease.expired(now):
            fence_jobs(jobs_dir, lease.expires, now, signalled)
        else:
            signalled.clear()
        if now >= next_leave_check:
            next_leave_check = now + LEAVE_CHECK_S
            agent_gone = lease is None or lease.stopped or not _pid_alive(lease.agent)
            if agent_gone and not running_jobs(jobs_dir):
                return
        time.sleep(LOOK_S)


def _job_dirs(jobs_dir: Path) -> list[Path]:
    try:
        return [p for p in jobs_dir.iterdir() if p.name.isdigit()]
    except OSError:
        return []


def _read(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _signal(pid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)


def _pid_alive(pid: int) -> bool:
    return pid > 0 and procs.is_alive(pid, None)


def _main() -> None:
    state_dir = Path(sys.argv[1])
    if os.fork() > 0:
        os._exit(0)
    guard(state_dir)


if __name__ == "__main__":
    _main()
