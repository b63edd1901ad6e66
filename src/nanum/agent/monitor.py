"""Readings of the node's GPUs and jobs for the heartbeat: NVML on real GPUs, job-driven figures on simulated ones.

Every `interval_s` the monitor takes one `Sample`: per GPU its utilisation, memory in use, power, temperature
and the processes on it (each with the job that owns it, or none); per running job its CPU use since the last
reading and, for notebooks where known, when its kernel was last active. Samples wait in `pending` until a
heartbeat has carried them (`sent`); at most `max_pending` are kept while the server is away.

A GPU process belongs to a job when it runs in the job's session (jobs run in sessions of their own), or in its
container's (`nanum.agent.environments.container_sessions`). Any other process on a GPU is reported with
`job_id` None; the server then treats that GPU as busy. On a GPU a job holds, a process this agent cannot see
in /proc (another PID namespace) is counted as the job's.

Simulated GPUs show what their jobs declare (`NANUM_SIM_UTIL`, `NANUM_SIM_MEM`; see `nanum.monitor.simload`)
and are idle otherwise. A process outside nanum on a simulated GPU is simulated with the file
`STATE/simulated-gpu-processes`: one `GPU PID [MEMORY_MIB]` per line; a line counts while that PID is alive.

Notebook activity: the mtime of the job's `$NANUM_ACTIVITY_FILE` (anything may touch it), or, when the job
sets `NANUM_JUPYTER_URL` (and `JUPYTER_TOKEN`), the `last_activity` of Jupyter's `/api/status`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import random
import threading
import time
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Protocol

from nanum.agent import proctable
from nanum.monitor.simload import sim_memory, sim_util
from nanum.protocol import GpuInfo, GpuProcess, GpuSample, JobSample, Sample

__all__ = ["JobView", "Monitor", "NvmlSampler", "Sampler", "SimSampler", "make_sampler"]

log = logging.getLogger("nanum.agent")

ROGUE_FILE = "simulated-gpu-processes"
ROGUE_MEMORY_MB = 2048
ROGUE_UTIL = 60.0
CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


@dataclass(frozen=True, slots=True)
class JobView:
    """A running job as the monitor needs it."""

    job_id: int
    pid: int | None
    gpus: tuple[int, ...]
    env: dict[str, str] = field(default_factory=dict)
    started_at: float | None = None
    activity_file: str | None = None
    #: Sessions of its processes besides its own: those in its container.
    sessions: tuple[int, ...] = ()


class Sampler(Protocol):
    """Reads the node's GPUs. `owners` maps a session id to the job whose session it is."""

    def read(self, jobs: Sequence[JobView], owners: dict[int, int], now: float) -> list[GpuSample]: ...

    def close(self) -> None: ...


def make_sampler(gpus: list[GpuInfo], simulated: bool, state_dir: Path) -> Sampler | None:
    """The sampler for this node; None when NVML cannot be used (the node then reports no readings)."""
    if simulated:
        return SimSampler(gpus, state_dir / ROGUE_FILE)
    try:
        return NvmlSampler()
    except Exception as exc:  # NVML missing or broken: the node still runs jobs, just unmonitored
        log.warning("cannot read GPU utilisation through NVML (%s); the node reports no readings", exc)
        return None


# -- real GPUs -------------------------------------------------------------------------------------------------


class NvmlSampler:
    """Readings through NVML. `nvml` is the pynvml module (tests pass a stand-in)."""

    def __init__(self, nvml: Any = None) -> None:
        if nvml is None:
            import pynvml

            nvml = pynvml
        self.nvml = nvml
        nvml.nvmlInit()
        self.handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(nvml.nvmlDeviceGetCount())]

    def read(self, jobs: Sequence[JobView], owners: dict[int, int], now: float) -> list[GpuSample]:
        holders = {g: j.job_id for j in jobs for g in j.gpus}
        return [self._one(i, h, owners, holders.get(i)) for i, h in enumerate(self.handles)]

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.nvml.nvmlShutdown()

    def _one(self, index: int, handle: Any, owners: dict[int, int], holder: int | None) -> GpuSample:
        nvml = self.nvml
        util = self._try(lambda: float(nvml.nvmlDeviceGetUtilizationRates(handle).gpu), 0.0)
        memory = self._try(lambda: int(nvml.nvmlDeviceGetMemoryInfo(handle).used) // (1024 * 1024), 0)
        power = self._try(lambda: nvml.nvmlDeviceGetPowerUsage(handle) / 1000.0, None)
        temp = self._try(lambda: float(nvml.nvmlDeviceGetTemperature(handle, nvml.NVML_TEMPERATURE_GPU)), None)
        procs = [_process(p.pid, _mib(p.usedGpuMemory), owners, holder) for p in self._processes(handle)]
        return GpuSample(
            index=index,
            util=min(max(util, 0.0), 100.0),
            memory_mb=max(memory, 0),
            power_w=power,
            temperature_c=temp,
            processes=procs,
        )

    def _processes(self, handle: Any) -> list[Any]:
        found: dict[int, Any] = {}
        for call in ("nvmlDeviceGetComputeRunningProcesses", "nvmlDeviceGetGraphicsRunningProcesses"):
            for p in self._try(lambda c=call: list(getattr(self.nvml, c)(handle)), []):  # type: ignore[misc]
                found.setdefault(int(p.pid), p)
        return list(found.values())

    def _try(self, read: Callable[[], Any], default: Any) -> Any:
        try:
            return read()
        except self.nvml.NVMLError:
            return default


def _mib(used: int | None) -> int:
    """NVML's per-process memory in bytes (None or a huge sentinel when not available) as MiB."""
    if used is None or used < 0 or used >= 1 << 51:  # 2 PiB: a sentinel, and no MiB count fits 32 bits past it
        return 0
    return int(used) // (1024 * 1024)


def _process(pid: int, memory_mb: int, owners: dict[int, int], holder: int | None) -> GpuProcess:
    found = proctable.stat(pid)
    if found is None:  # not visible from here: on a held GPU, assume it is the job's
        return GpuProcess(pid=pid, memory_mb=memory_mb, job_id=holder)
    job = owners.get(found.session)
    if job is not None:
        return GpuProcess(pid=pid, memory_mb=memory_mb, job_id=job)
    user, command = proctable.describe(pid)
    return GpuProcess(pid=pid, memory_mb=memory_mb, user=user, command=command)


# -- simulated GPUs --------------------------------------------------------------------------------------------


class SimSampler:
    """Figures driven by the jobs' declared load, plus simulated processes outside nanum from `rogue_file`."""

    def __init__(self, gpus: list[GpuInfo], rogue_file: Path, rng: random.Random | None = None) -> None:
        self.gpus = gpus
        self.rogue_file = rogue_file
        self.rng = rng or random.Random()
        self._memory: dict[tuple[int, int], int] = {}

    def read(self, jobs: Sequence[JobView], owners: dict[int, int], now: float) -> list[GpuSample]:
        by_gpu = {g: j for j in jobs for g in j.gpus}
        rogue = self.rogue_processes()
        samples = []
        for gpu in self.gpus:
            util, memory, procs = self._job_load(by_gpu.get(gpu.index), gpu, now)
            for pid, mb in rogue.get(gpu.index, []):
                user, command = proctable.describe(pid)
                procs.append(GpuProcess(pid=pid, memory_mb=mb, user=user, command=command))
                util = min(100.0, util + ROGUE_UTIL + 10 * self.rng.uniform(-1, 1))
                memory = min(gpu.memory_mb, memory + mb)
            samples.append(self._sample(gpu.index, util, memory, procs))
        return samples

    def _sample(self, index: int, util: float, memory: int, procs: list[GpuProcess]) -> GpuSample:
        """Power and temperature that follow the load, as on a real board (55-60 W and ~35 °C at rest)."""
        power = 55 + 3.4 * util + self.rng.uniform(0, 5)
        temperature = 34 + 0.45 * util + self.rng.uniform(0, 2)
        return GpuSample(
            index=index,
            util=round(util, 1),
            memory_mb=memory,
            power_w=round(power, 1),
            temperature_c=round(temperature, 1),
            processes=procs,
        )

    def close(self) -> None:
        pass

    def _job_load(self, job: JobView | None, gpu: GpuInfo, now: float) -> tuple[float, int, list[GpuProcess]]:
        if job is None:
            return 0.0, 0, []
        elapsed = now - (job.started_at or now)
        util = sim_util(job.env, elapsed, self.rng.uniform(-1, 1))
        key = (job.job_id, gpu.index)
        memory = self._memory[key] = sim_memory(job.env, gpu.memory_mb, util > 0, self._memory.get(key, 0))
        return util, memory, [GpuProcess(pid=job.pid or 0, memory_mb=memory, job_id=job.job_id)]

    def rogue_processes(self) -> dict[int, list[tuple[int, int]]]:
        """GPU index → (pid, MiB) of each live simulated process outside nanum."""
        try:
            lines = self.rogue_file.read_text().splitlines()
        except OSError:
            return {}
        out: dict[int, list[tuple[int, int]]] = {}
        for line in lines:
            parts = line.split("#", 1)[0].split()
            if len(parts) < 2 or not all(p.isdigit() for p in parts[:3]):
                continue
            pid = int(parts[1])
            if proctable.stat(pid) is not None:
                out.setdefault(int(parts[0]), []).append((pid, int(parts[2]) if len(parts) > 2 else ROGUE_MEMORY_MB))
        return out


# -- jobs ------------------------------------------------------------------------------------------------------


class JobReader:
    """CPU use of each job between readings, and notebook activity."""

    def __init__(self) -> None:
        self._last: dict[int, tuple[float, int]] = {}

    def read(self, jobs: Sequence[JobView], now: float) -> tuple[list[JobSample], dict[int, int]]:
        """(a sample per job, session id → job id)."""
        owners = {j.pid: j.job_id for j in jobs if j.pid}
        owners.update({s: j.job_id for j in jobs for s in j.sessions})
        ticks: dict[int, int] = dict.fromkeys(owners.values(), 0)
        if owners:
            for proc in proctable.scan():
                if proc.session in owners:
                    ticks[owners[proc.session]] += proc.ticks
        samples = [
            JobSample(
                job_id=j.job_id,
                cpu_percent=self._cpu(j.job_id, ticks.get(j.job_id, 0), now),
                last_activity=last_activity(j),
            )
            for j in jobs
        ]
        self._last = {j.job_id: (now, ticks.get(j.job_id, 0)) for j in jobs}
        return samples, owners

    def _cpu(self, job_id: int, ticks: int, now: float) -> float:
        before = self._last.get(job_id)
        if before is None or now <= before[0]:
            return 0.0
        return round(max(ticks - before[1], 0) / CLOCK_TICKS / (now - before[0]) * 100, 1)


def last_activity(job: JobView) -> float | None:
    """When a notebook was last active: its activity file, or Jupyter's own account; None when unknown."""
    found = None
    if job.activity_file is not None:
        with contextlib.suppress(OSError):
            found = os.stat(job.activity_file).st_mtime or None  # 1970: never touched
    url = job.env.get("NANUM_JUPYTER_URL")
    if url:
        jupyter = _jupyter_activity(url, job.env.get("JUPYTER_TOKEN"))
        if jupyter is not None:
            found = jupyter if found is None else max(found, jupyter)
    return found


def _jupyter_activity(url: str, token: str | None) -> float | None:
    """Jupyter's last activity from its /api/status. The URL is the job's (its environment) and the agent may
    run as root: only http(s) is fetched, redirects included, so a job cannot make it read a local file."""
    try:
        request = urllib.request.Request(url.rstrip("/") + "/api/status")
    except ValueError:
        return None
    if request.type not in ("http", "https"):
        return None
    if token:
        request.add_header("Authorization", f"token {token}")
    try:
        with _HTTP_ONLY.open(request, timeout=1.0) as response:
            stamp = json.loads(response.read()).get("last_activity")
        return datetime.fromisoformat(str(stamp).replace("Z", "+00:00")).timestamp()
    except (OSError, ValueError, AttributeError):
        return None


def _http_only() -> urllib.request.OpenerDirector:
    opener = urllib.request.OpenerDirector()
    for handler in (
        urllib.request.HTTPHandler(),
        urllib.request.HTTPSHandler(),
        urllib.request.HTTPRedirectHandler(),
        urllib.request.HTTPErrorProcessor(),
        urllib.request.HTTPDefaultErrorHandler(),
    ):
        opener.add_handler(handler)
    return opener


_HTTP_ONLY = _http_only()


# -- the loop --------------------------------------------------------------------------------------------------


class Monitor:
    """Takes a sample every `interval_s` and keeps it until a heartbeat has carried it."""

    def __init__(self, sampler: Sampler | None, interval_s: float = 5.0, max_pending: int = 120) -> None:
        self.sampler = sampler
        self.interval_s = interval_s
        self.max_pending = max_pending
        self.jobs = JobReader()
        self._pending: list[Sample] = []
        self._lock = threading.Lock()
        self._strangers: set[tuple[int, int]] = set()
        #: Whether the last reading found processes outside nanum come or go (news for the scheduler).
        self.strangers_changed = False

    def read(self, jobs: Sequence[JobView], now: float | None = None) -> Sample:
        """One sample, kept for the next heartbeat."""
        now = time.time() if now is None else now
        job_samples, owners = self.jobs.read(jobs, now)
        gpus = self.sampler.read(jobs, owners, now) if self.sampler is not None else []
        sample = Sample(time=now, gpus=gpus, jobs=job_samples)
        strangers = {(g.index, p.pid) for g in gpus for p in g.processes if p.job_id is None}
        self.strangers_changed, self._strangers = strangers != self._strangers, strangers
        with self._lock:
            self._pending = [*self._pending, sample][-self.max_pending :]
        return sample

    def pending(self) -> list[Sample]:
        with self._lock:
            return list(self._pending)

    def sent(self, samples: Sequence[Sample]) -> None:
        """These samples reached the server: forget them."""
        carried = {id(s) for s in samples}
        with self._lock:
            self._pending = [s for s in self._pending if id(s) not in carried]

    async def run(self, jobs: Callable[[], Sequence[JobView]], on_news: Callable[[], None] | None = None) -> None:
        """Sample until cancelled; call `on_news` (if given) when processes outside nanum came or went, so the
        agent reports them at once (the GPUs they use must not be handed out, or may be again)."""
        if self.sampler is None:
            return
        try:
            while True:
                try:
                    await asyncio.to_thread(self.read, jobs())
                    if self.strangers_changed and on_news is not None:
                        on_news()
                except Exception:
                    log.exception("reading the GPUs failed; trying again")
                await asyncio.sleep(self.interval_s)
        finally:
            self.sampler.close()
