"""A job's efficiency: running totals of its readings, and the summary with hints it keeps when it ends.

`Tally` accumulates readings while the job runs (the server stores it with the job). `summarize` turns it into
what `nanum show` and the job page print: average and peak GPU utilisation and memory, the share of readings in
which the job was idle, and hints:

- *input-bound*: the GPUs were mostly waiting (average utilisation under 50 %) while the job's CPUs were busy
  (at least 75 % of the cores it reserved, or of one core per GPU when it reserved none): more data-loader
  workers, more CPUs or faster storage should help;
- *smaller GPU*: peak memory on any one GPU used less than half of it, and a smaller model in this cluster
  holds that peak with 25 % to spare;
- *mostly idle*: idle in at least half of the readings;
- *underused*: otherwise, the GPUs averaged under 30 % (a larger batch, or fewer GPUs, would use them better).

Example: 8 readings on an 80 GiB A100 at 20 % utilisation, 9 GiB peak, 3.5 cores busy of 4 reserved, in a
cluster that also has 24 GiB L4s → input-bound, and "an L4 (24 GiB) would hold its peak".
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

__all__ = ["Tally", "summarize"]

INPUT_BOUND_UTIL = 50.0
BUSY_CPU_SHARE = 0.75
SMALLER_GPU_SHARE = 0.5
HEADROOM = 1.25
MOSTLY_IDLE = 0.5
UNDERUSED_UTIL = 30.0


@dataclass(frozen=True, slots=True, kw_only=True)
class Tally:
    """Sums and peaks over a job's readings. Utilisation in percent, memory in MiB per GPU."""

    readings: int = 0
    util_sum: float = 0.0
    util_peak: float = 0.0
    memory_sum: float = 0.0
    memory_peak: int = 0
    cpu_sum: float = 0.0
    idle: int = 0
    first: float | None = None
    last: float | None = None

    def add(
        self, *, time: float, util: float, util_max: float, memory: float, memory_max: int, cpu: float, idle: bool
    ) -> Tally:
        """One reading: `util` averaged over the job's GPUs, `util_max` its busiest GPU, `memory` the average
        memory per GPU, `memory_max` the fullest GPU's, `cpu` percent of one core."""
        return replace(
            self,
            readings=self.readings + 1,
            util_sum=self.util_sum + util,
            util_peak=max(self.util_peak, util_max),
            memory_sum=self.memory_sum + memory,
            memory_peak=max(self.memory_peak, memory_max),
            cpu_sum=self.cpu_sum + cpu,
            idle=self.idle + idle,
            first=time if self.first is None else min(self.first, time),
            last=time if self.last is None else max(self.last, time),
        )

    @property
    def util_avg(self) -> float:
        return self.util_sum / self.readings if self.readings else 0.0

    @property
    def memory_avg(self) -> float:
        return self.memory_sum / self.readings if self.readings else 0.0

    @property
    def cpu_avg(self) -> float:
        return self.cpu_sum / self.readings if self.readings else 0.0

    @property
    def idle_share(self) -> float:
        return self.idle / self.readings if self.readings else 0.0


def summarize(
    tally: Tally, *, gpus: int, gpu_model: str, gpu_memory_mb: int, cpus: int, models: Mapping[str, int]
) -> dict[str, Any] | None:
    """The summary a finished job keeps; None when it was never read (no GPU, or too short to sample).

    `models`: memory (MiB) of each GPU model in the cluster, for the smaller-GPU hint."""
    if tally.readings == 0:
        return None
    hints = [
        h
        for h in (
            _input_bound(tally, gpus, cpus),
            _smaller_gpu(tally, gpu_model, gpu_memory_mb, models),
            _mostly_idle(tally),
        )
        if h
    ]
    if not any(h.startswith(("input-bound", "mostly idle")) for h in hints) and (low := _underused(tally, gpus)):
        hints.append(low)
    return {
        "readings": tally.readings,
        "gpu_util_avg": round(tally.util_avg, 1),
        "gpu_util_peak": round(tally.util_peak, 1),
        "gpu_memory_avg_mb": round(tally.memory_avg),
        "gpu_memory_peak_mb": tally.memory_peak,
        "gpu_memory_mb": gpu_memory_mb,
        "cpu_avg_percent": round(tally.cpu_avg, 1),
        "idle_share": round(tally.idle_share, 3),
        "hints": hints,
    }


def _input_bound(tally: Tally, gpus: int, cpus: int) -> str | None:
    cores = cpus if cpus > 0 else max(gpus, 1)
    if tally.util_avg >= INPUT_BOUND_UTIL or tally.cpu_avg < BUSY_CPU_SHARE * 100 * cores:
        return None
    return (
        f"input-bound: the GPUs averaged {tally.util_avg:.0f}% while the CPUs were busy "
        f"({tally.cpu_avg / 100:.1f} cores on average); more data-loader workers, more --cpus or faster "
        "storage should help"
    )


def _smaller_gpu(tally: Tally, model: str, memory_mb: int, models: Mapping[str, int]) -> str | None:
    if memory_mb <= 0 or tally.memory_peak >= SMALLER_GPU_SHARE * memory_mb:
        return None
    need = tally.memory_peak * HEADROOM
    fits = sorted((mb, name) for name, mb in models.items() if need <= mb < memory_mb and name != model)
    if not fits:
        return None
    mb, name = fits[0]
    return (
        f"smaller GPU would do: peak memory {_gib(tally.memory_peak)} of {_gib(memory_mb)}; "
        f"{name} ({_gib(mb)}) would hold it (--gpu-model {name})"
    )


def _mostly_idle(tally: Tally) -> str | None:
    if tally.idle_share < MOSTLY_IDLE:
        return None
    return f"mostly idle: the GPUs did nothing in {tally.idle_share:.0%} of the readings"


def _underused(tally: Tally, gpus: int) -> str | None:
    if tally.util_avg >= UNDERUSED_UTIL:
        return None
    fewer = " or fewer GPUs" if gpus > 1 else ""
    return (
        f"underused: the GPUs averaged {tally.util_avg:.0f}% (peak {tally.util_peak:.0f}%); a larger batch{fewer} "
        "would use them better"
    )


def _gib(mb: float) -> str:
    return f"{mb / 1024:.0f} GiB" if mb >= 10240 else f"{mb / 1024:.1f} GiB"
