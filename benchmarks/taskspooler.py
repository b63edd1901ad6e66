"""task-spooler measured live, beside nanum in the same run of `benchmarks/throughput.py`.

Debian's `task-spooler` package installs it as `tsp` (elsewhere `ts`, a name moreutils also uses: a `ts` counts
only if `ts -V` says Task Spooler). Each measurement runs its own `tsp` server on a private socket, with output
files in a private folder, and kills it afterwards:

  - submissions per second: a bash loop of `tsp true` while every slot is busy, so the jobs queue (at most
    `QUEUED_MAX` of them: each queued job holds a connection to ts's server, which takes 1,000 at most and makes
    further clients wait for a free one);
  - submit-to-start: from just before `tsp` is started to the job's first instruction (`date +%s.%N`), one job at
    a time on idle slots (nanum's figure is from an in-process client, so ts pays for one process start more);
  - the drain: `jobs` x `tsp true` submitted by a bash loop onto `slots` slots, from the loop's start until the
    last job has ended (`tsp -w` on the last ones), and how many did not finish with exit code 0.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

from load import stamped  # the benchmarks' shared helpers

#: The most jobs queued for the submission rate (see above).
QUEUED_MAX = 500


class Figures(NamedTuple):
    submissions_per_s: float
    latencies_s: list[float]
    drain_s: float
    drain_lost: int


def executable() -> str | None:
    """The task-spooler client on this machine, or None."""
    if found := shutil.which("tsp"):
        return found
    found = shutil.which("ts")
    if found:
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            probe = subprocess.run([found, "-V"], capture_output=True, text=True, timeout=5)
            if "task spooler" in (probe.stdout + probe.stderr).lower():
                return found
    return None


class Spooler:
    """One private task-spooler server with `slots` slots."""

    def __init__(self, exe: str, root: Path, slots: int) -> None:
        self.exe, self.root = exe, root
        self.env = {**os.environ, "TS_SOCKET": str(root / "socket"), "TMPDIR": str(root), "TS_MAXFINISHED": "100000"}
        self.run("-S", str(slots))  # starts the server

    def run(self, *args: str) -> str:
        return subprocess.run([self.exe, *args], env=self.env, check=True, capture_output=True, text=True).stdout

    def submit(self, *command: str) -> int:
        return int(self.run(*command).strip())

    def loop(self, n: int, command: str) -> float:
        """Seconds a bash loop of `n` submissions of `command` took."""
        started = time.perf_counter()
        subprocess.run(["bash", "-c", f'for i in $(seq {n}); do "$0" {command} > /dev/null || exit 1; done',
                        self.exe], env=self.env, check=True)
        return time.perf_counter() - started

    def finished_ok(self) -> int:
        """Jobs listed as finished with exit code 0."""
        lines = self.run("-l").splitlines()[1:]
        return sum(1 for line in lines if line.split()[1:2] == ["finished"] and line.split()[3:4] == ["0"])

    def close(self) -> None:
        with contextlib.suppress(subprocess.SubprocessError):
            self.run("-K")


@contextlib.contextmanager
def spooler(exe: str, slots: int) -> Iterator[Spooler]:
    root = Path(tempfile.mkdtemp(prefix="nanum-bench-ts-"))
    s = Spooler(exe, root, slots)
    try:
        yield s
    finally:
        s.close()
        shutil.rmtree(root, ignore_errors=True)


def submission_rate(exe: str, slots: int, n: int) -> float:
    n = min(n, QUEUED_MAX)
    with spooler(exe, slots) as s:
        blockers = [s.submit("sleep", "600") for _ in range(slots)]
        try:
            return n / s.loop(n, "true")
        finally:
            for job in blockers:
                with contextlib.suppress(subprocess.SubprocessError):
                    s.run("-k", str(job))


def latencies(exe: str, slots: int, n: int) -> list[float]:
    delays = []
    with spooler(exe, slots) as s:
        for i in range(n):
            stamp = s.root / f"lat-{i}"
            sent = time.time()
            job = s.submit("sh", "-c", f"date +%s.%N > {stamp}")
            delays.append(stamped(stamp) - sent)
            s.run("-w", str(job))
    return delays


def drain(exe: str, slots: int, n: int) -> tuple[float, int]:
    """(seconds from the first submission to the last end, jobs that did not complete)."""
    with spooler(exe, slots) as s:
        started = time.perf_counter()
        s.loop(n, "true")
        for job in range(max(0, n - 2 * slots), n):  # FIFO: the last ones end last; ids count from 0
            with contextlib.suppress(subprocess.CalledProcessError):  # `-w` exits with the job's own status
                s.run("-w", str(job))
        elapsed = time.perf_counter() - started
        return elapsed, n - s.finished_ok()


def measure(slots: int, api_jobs: int, latency_jobs: int, drain_jobs: int) -> Figures | None:
    """task-spooler's figures on this machine now, or None where it is not installed."""
    exe = executable()
    if exe is None:
        return None
    seconds, lost = drain(exe, slots, drain_jobs)
    return Figures(submission_rate(exe, slots, api_jobs), latencies(exe, slots, latency_jobs), seconds, lost)
