"""Per-job cgroups: how the agent holds each job to its `--cpus` and `--mem`.

At start the agent probes which cgroup hierarchy it can write (`probe`): the unified one (cgroup v2: cpu.max,
memory.max, memory.events) or the legacy cpu and memory ones (cgroup v1: cpu.cfs_quota_us,
memory.limit_in_bytes, memory.oom_control). Each job gets a cgroup of its own, `job-ID`, under the agent's
parent `nanum/NODE-XXXXXXXX` (XXXXXXXX from the state directory's path, so two agents on one machine never
share one, while a restarted agent finds the cgroups of its jobs again):

    /sys/fs/cgroup/nanum/gpu-01-1a2b3c4d/job-17          (v2)
    /sys/fs/cgroup/{cpu,memory}/nanum/gpu-01-1a2b3c4d/job-17   (v1)

The job's first process, still root and a single-threaded shell, enters the cgroup itself before it drops to the
job's user, so everything the job runs is inside from its first instruction: it writes `0` (itself) into the files
`create` returns. On v1 those are the `tasks` files, which move the writing thread alone: recent kernels then skip
the lock over every process on the machine that a `cgroup.procs` write takes, which waits for an RCU grace period
(5-20 ms measured on a 2-core machine with Linux 6.18, most of a job's start; a kernel without that shortcut takes
the lock either way). The shell has no other thread, so the whole process moves. v2 moves a thread only within its
process's domain, so there it is `cgroup.procs`.

Limits: `cpus` cores is a quota of cpus × 100 ms of CPU time per 100 ms period (any cores, no more than `cpus`
of them on average); `memory_mb` bounds RAM and swap together, and past it the kernel's OOM killer kills the
job's largest process. When a job ends the agent asks whether that happened (`finish`: v2 memory.events
oom_kill, v1 memory.oom_control oom_kill), kills whatever the job left in its cgroup, and removes it; a cgroup
still busy is retried when the next job ends.

Processes: where the pids controller is there (v2 `pids`, v1 its own tree), a job may have at most `tasks_max()`
processes and threads at once: a quarter of what the machine may have, so that a fork bomb in one job leaves the
agent and the other jobs the rest (a machine with the common pid_max of 32,768 had none left for anyone).

Where nothing is writable (not root, a container whose cgroup is not delegated) `probe` returns no `Cgroups`
and a summary saying so; jobs then run without limits and the node reports `not enforced`.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import logging
import os
import signal
import time
from abc import ABC, abstractmethod
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar, Protocol

from nanum.units import memory_text

__all__ = [
    "NOT_ENFORCED", "ROOT", "CgroupV1", "CgroupV2", "Cgroups", "CpuStats", "agent_cgroup_name",
    "oom_reason", "probe",
]

log = logging.getLogger("nanum.agent")

ROOT = Path("/sys/fs/cgroup")
PERIOD_US = 100_000
MIB = 1024 * 1024
NOT_ENFORCED = "not enforced (no writable cgroup)"
_REMOVE_TRIES = 20
_REMOVE_PAUSE_S = 0.005
#: A job may have this share of the machine's process ids (`tasks_max`), and at least `MIN_TASKS`.
TASKS_SHARE = 4
MIN_TASKS = 1024


@dataclass(frozen=True, slots=True)
class CpuStats:
    """CPU time of a job's cgroup: used, and how often and how long its quota held it back (microseconds)."""

    usage_us: int | None
    periods: int
    throttled: int
    throttled_us: int


class Cgroups(Protocol):
    """One cgroup hierarchy the agent can write. The executor calls these under its own lock, one at a time."""

    #: `cgroup v2` or `cgroup v1`: what the node reports as its way of enforcing limits.
    kind: ClassVar[str]
    #: The agent's own cgroup in each tree the jobs' cgroups (`job-ID`) are made in.
    parents: list[Path]
    #: Whether jobs are held to `tasks_max()` processes and threads.
    pids: bool

    def create(self, job_id: int, *, cpus: int, memory_mb: int | None) -> list[str]:
        """Make the job's cgroup afresh (killing what an earlier run of the same job left there) with its
        limits (0 or None: none); return the files its first, single-threaded process enters by writing `0`
        (itself) into them (their `cgroup.procs` beside them move a process from outside).
        Raises OSError when the cgroup cannot be made."""
        ...

    def stats(self, job_id: int) -> CpuStats | None:
        """The job's CPU use and throttling so far; None when it has no cgroup."""
        ...

    def finish(self, job_id: int, *, sigkilled: bool) -> bool:
        """The job has ended: whether its memory limit killed it; then kill what it left and remove its
        cgroup (later, if still busy). `sigkilled`: its command died of SIGKILL (v1 kernels before 4.13 keep
        no OOM count, and a hit limit with a SIGKILL is then taken as the OOM killer's work). Idempotent."""
        ...

    def sweep(self, keep: Iterable[int]) -> None:
        """Kill and remove the cgroups of jobs other than `keep` (left by an agent that stopped meanwhile)."""
        ...

    def close(self) -> None:
        """The agent stops: remove its parent cgroup unless jobs (which keep running) are still in it."""
        ...


def probe(node: str, state_dir: Path, root: Path = ROOT) -> tuple[Cgroups | None, str]:
    """The hierarchy this agent can create job cgroups in, first v2 then v1, and a summary for the node's
    heartbeat: the hierarchy's kind, or `NOT_ENFORCED`. The reason for the latter is logged."""
    parent = Path("nanum") / agent_cgroup_name(node, state_dir)
    problems = []
    for cls in (CgroupV2, CgroupV1):
        try:
            found: Cgroups = cls.open(root, parent)
        except OSError as exc:
            problems.append(f"{cls.kind}: {_oserror(exc)}")
            continue
        log.info("limits: --cpus and --mem enforced with %s under %s%s", found.kind, parent,
                 f"; at most {tasks_max():,} processes and threads a job" if found.pids else "")
        return found, found.kind
    log.warning("limits: --cpus and --mem are not enforced on this node, no writable cgroup (%s)", "; ".join(problems))
    return None, NOT_ENFORCED


def tasks_max() -> int:
    """How many processes and threads one job may have at once (`pids.max`): a `TASKS_SHARE` of the fewer of the
    kernel's process ids and threads."""
    limits = [int(text) for name in ("pid_max", "threads-max")
              if (text := (_read(f"/proc/sys/kernel/{name}") or "").strip()).isdigit()]
    return max(MIN_TASKS, min(limits, default=32768) // TASKS_SHARE)


def agent_cgroup_name(node: str, state_dir: Path) -> str:
    digest = hashlib.sha1(str(Path(state_dir).resolve()).encode()).hexdigest()[:8]
    return f"{node.replace('/', '_')}-{digest}"


def oom_reason(memory_mb: int | None) -> str:
    """Why a job whose memory limit killed it ended, as the server shows it."""
    if memory_mb:
        return f"killed: exceeded its memory limit of {memory_text(memory_mb)}"
    return "killed: exceeded its memory limit"


class _Hierarchy(ABC):
    """What both hierarchies share: a job's cgroup is one directory per mounted controller tree."""

    kind: ClassVar[str]
    #: The file in a job's cgroup that its first process writes `0` into to enter it.
    ENTER: ClassVar[str]

    def __init__(self, parents: list[Path], *, pids: bool = False) -> None:
        self.parents = parents
        #: whether jobs' cgroups hold them to `tasks_max()` processes (in the last of `parents`, on v1)
        self.pids = pids
        self._tasks = tasks_max()
        #: The parents as text, ending in a slash: a job's cgroups are paths made for every start and end, and
        #: text is cheaper to join than a `Path` is to make.
        self._within = [os.path.join(p, "") for p in parents]
        self._pending: set[int] = set()

    @classmethod
    @abstractmethod
    def open(cls, root: Path, parent: Path) -> _Hierarchy:
        """Create the agent's parent cgroup(s) and prove a job cgroup can be made there, or raise OSError."""

    @abstractmethod
    def _limit(self, dirs: list[str], cpus: int, memory_mb: int | None) -> None: ...

    @abstractmethod
    def oom_kills(self, job_id: int) -> int | None:
        """How many processes of the job the OOM killer killed; None where the kernel does not count them."""

    @abstractmethod
    def _limit_hit(self, job_id: int) -> bool: ...

    @abstractmethod
    def stats(self, job_id: int) -> CpuStats | None: ...

    def dirs(self, job_id: int) -> list[str]:
        return [f"{p}job-{job_id}" for p in self._within]

    def create(self, job_id: int, *, cpus: int, memory_mb: int | None) -> list[str]:
        self._pending.discard(job_id)
        dirs = self.dirs(job_id)
        if any(os.path.exists(d) for d in dirs) and not self._remove(job_id, wait=True):
            raise OSError(errno.EBUSY, "an earlier run of this job still has processes in its cgroup", dirs[0])
        for d in dirs:
            os.mkdir(d)
        try:
            self._limit(dirs, cpus, memory_mb)
        except OSError:
            self._remove(job_id, wait=False)
            raise
        return [f"{d}/{self.ENTER}" for d in dirs]

    def finish(self, job_id: int, *, sigkilled: bool) -> bool:
        if not any(os.path.exists(d) for d in self.dirs(job_id)):
            return False
        kills = self.oom_kills(job_id)
        killed = kills > 0 if kills is not None else sigkilled and self._limit_hit(job_id)
        if not self._remove(job_id, wait=True):
            self._pending.add(job_id)
        for other in list(self._pending - {job_id}):
            if self._remove(other, wait=False):
                self._pending.discard(other)
        return killed

    def sweep(self, keep: Iterable[int]) -> None:
        kept = set(keep)
        found = {int(d.name[4:]) for p in self.parents if p.is_dir() for d in p.iterdir()
                 if d.name.startswith("job-") and d.name[4:].isdigit()}
        for job_id in sorted(found - kept):
            if not self._remove(job_id, wait=True):
                self._pending.add(job_id)

    def close(self) -> None:
        for p in self.parents:
            with contextlib.suppress(OSError):
                p.rmdir()

    def _remove(self, job_id: int, *, wait: bool) -> bool:
        """Kill every process left in the job's cgroup and remove it; False while it is still busy."""
        dirs = [d for d in self.dirs(job_id) if os.path.exists(d)]
        for attempt in range(_REMOVE_TRIES if wait else 1):
            self._kill(dirs)
            for d in list(dirs):
                try:
                    os.rmdir(d)
                    dirs.remove(d)
                except FileNotFoundError:
                    dirs.remove(d)
                except OSError as exc:
                    if exc.errno != errno.EBUSY:
                        log.warning("cannot remove cgroup %s: %s", d, _oserror(exc))
                        return False
            if not dirs:
                return True
            if attempt + 1 < _REMOVE_TRIES and wait:
                time.sleep(_REMOVE_PAUSE_S)
        return False

    def _kill(self, dirs: list[str]) -> None:
        for d in dirs:
            for pid in _pids(f"{d}/cgroup.procs"):
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)

    @classmethod
    def _prove(cls, parents: list[Path], *, pids: bool = False) -> None:
        """Make and remove a trial cgroup with limits: mkdir alone succeeds in places that refuse limits."""
        trial = cls(parents, pids=pids)
        name = -os.getpid()  # job ids are positive: a negative one never meets a real job
        dirs = trial.dirs(name)
        try:
            for d in dirs:
                with contextlib.suppress(FileExistsError):
                    os.mkdir(d)
            trial._limit(dirs, 1, 64)
        finally:
            for d in dirs:
                with contextlib.suppress(OSError):
                    os.rmdir(d)


class CgroupV2(_Hierarchy):
    """The unified hierarchy: one directory per job with cpu.max and memory.max (controllers cpu, memory)."""

    kind = "cgroup v2"
    ENTER = "cgroup.procs"
    CONTROLLERS = ("cpu", "memory")

    @classmethod
    def open(cls, root: Path, parent: Path) -> CgroupV2:
        controllers = _read(root / "cgroup.controllers")
        if controllers is None:
            raise OSError(errno.ENOENT, "no unified cgroup hierarchy", str(root))
        missing = [c for c in cls.CONTROLLERS if c not in controllers.split()]
        if missing:
            raise OSError(errno.ENOTSUP, f"controller {', '.join(missing)} not available", str(root))
        pids = "pids" in controllers.split()
        wanted = (*cls.CONTROLLERS, "pids") if pids else cls.CONTROLLERS
        levels = [root, *(root / Path(*parent.parts[: i + 1]) for i in range(len(parent.parts)))]
        for level in levels:  # every level above a job's cgroup hands the controllers down
            level.mkdir(exist_ok=True)
            if not set(wanted) <= set((_read(level / "cgroup.subtree_control") or "").split()):
                (level / "cgroup.subtree_control").write_text(" ".join(f"+{c}" for c in wanted))
        cls._prove(levels[-1:], pids=pids)
        return cls(levels[-1:], pids=pids)

    def _limit(self, dirs: list[str], cpus: int, memory_mb: int | None) -> None:
        (d,) = dirs  # a new cgroup: no limit until one is written
        if self.pids:
            _write(f"{d}/pids.max", str(self._tasks))
        if cpus:
            _write(f"{d}/cpu.max", f"{cpus * PERIOD_US} {PERIOD_US}")
        if memory_mb:
            _write(f"{d}/memory.max", str(memory_mb * MIB))
            if os.path.exists(f"{d}/memory.swap.max"):
                _write(f"{d}/memory.swap.max", "0")

    def oom_kills(self, job_id: int) -> int | None:
        return _keyed(f"{self.dirs(job_id)[0]}/memory.events").get("oom_kill")

    def _limit_hit(self, job_id: int) -> bool:
        return _keyed(f"{self.dirs(job_id)[0]}/memory.events").get("max", 0) > 0

    def stats(self, job_id: int) -> CpuStats | None:
        values = _keyed(f"{self.dirs(job_id)[0]}/cpu.stat")
        if not values:
            return None
        return CpuStats(values.get("usage_usec"), values.get("nr_periods", 0), values.get("nr_throttled", 0),
                        values.get("throttled_usec", 0))

    def _kill(self, dirs: list[str]) -> None:
        for d in dirs:
            if os.path.exists(f"{d}/cgroup.kill"):  # Linux 5.14: the kernel kills every process, forks included
                with contextlib.suppress(OSError):
                    _write(f"{d}/cgroup.kill", "1")
        super()._kill(dirs)


class CgroupV1(_Hierarchy):
    """The legacy hierarchies: a job has a directory in the memory tree and one in the cpu tree."""

    kind = "cgroup v1"
    ENTER = "tasks"  # the writing thread alone, without the machine-wide lock (see the module docstring)

    @classmethod
    def open(cls, root: Path, parent: Path) -> CgroupV1:
        memory, cpu = root / "memory", root / "cpu"
        if not (memory / "memory.limit_in_bytes").exists():
            raise OSError(errno.ENOENT, "no memory controller", str(memory))
        if not (cpu / "cpu.cfs_quota_us").exists():
            raise OSError(errno.ENOENT, "no cpu controller", str(cpu))
        trees = [memory] if memory.resolve() == cpu.resolve() else [memory, cpu]
        parents = [tree / parent for tree in trees]
        for p in parents:
            p.mkdir(parents=True, exist_ok=True)
        cls._prove(parents)
        pids = root / "pids"
        if (pids / "cgroup.procs").exists() and pids.resolve() not in {t.resolve() for t in trees}:
            try:  # its own tree, last; jobs run without a process limit where it refuses
                (pids / parent).mkdir(parents=True, exist_ok=True)
                cls._prove([*parents, pids / parent], pids=True)
                return cls([*parents, pids / parent], pids=True)
            except OSError as exc:
                log.warning("limits: jobs' processes are not limited, the pids cgroup refused: %s", _oserror(exc))
        return cls(parents)

    @property
    def _cpu(self) -> int:
        """Where the cpu tree is among `parents`: the memory tree's, or the next."""
        return min(1, len(self.parents) - 1 - self.pids)

    def _limit(self, dirs: list[str], cpus: int, memory_mb: int | None) -> None:
        memory, cpu = dirs[0], dirs[self._cpu]  # new cgroups: no limit until one is written
        if self.pids:
            _write(f"{dirs[-1]}/pids.max", str(self._tasks))
        if cpus:
            _write(f"{cpu}/cpu.cfs_period_us", str(PERIOD_US))
            _write(f"{cpu}/cpu.cfs_quota_us", str(cpus * PERIOD_US))
        if memory_mb:
            _write(f"{memory}/memory.limit_in_bytes", str(memory_mb * MIB))
            if os.path.exists(f"{memory}/memory.memsw.limit_in_bytes"):  # swap accounting on: no swapping past it
                _write(f"{memory}/memory.memsw.limit_in_bytes", str(memory_mb * MIB))

    def oom_kills(self, job_id: int) -> int | None:
        return _keyed(f"{self.dirs(job_id)[0]}/memory.oom_control").get("oom_kill")

    def _limit_hit(self, job_id: int) -> bool:
        d = self.dirs(job_id)[0]
        counts = (_read(f"{d}/{name}") for name in ("memory.failcnt", "memory.memsw.failcnt"))
        return any((count or "0").strip() not in ("", "0") for count in counts)

    def stats(self, job_id: int) -> CpuStats | None:
        d = self.dirs(job_id)[self._cpu]
        values = _keyed(f"{d}/cpu.stat")
        if not values:
            return None
        usage = _read(f"{d}/cpuacct.usage")  # where cpuacct is mounted with cpu (cpu,cpuacct)
        return CpuStats(int(usage) // 1000 if usage and usage.strip().isdigit() else None, values.get("nr_periods", 0),
                        values.get("nr_throttled", 0), values.get("throttled_time", 0) // 1000)


def _read(path: str | Path) -> str | None:
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return None


def _write(path: str, text: str) -> None:
    with open(path, "w") as f:
        f.write(text)


def _keyed(path: str) -> dict[str, int]:
    """A flat-keyed cgroup file (`key value` per line) as numbers."""
    values = {}
    for line in (_read(path) or "").splitlines():
        key, _, value = line.partition(" ")
        if value.strip().lstrip("-").isdigit():
            values[key] = int(value)
    return values


def _pids(path: str) -> list[int]:
    return [int(p) for p in (_read(path) or "").split() if p.isdigit()]


def _oserror(exc: OSError) -> str:
    where = f" ({exc.filename})" if exc.filename else ""
    return f"{exc.strerror or exc}{where}"
