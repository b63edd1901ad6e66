"""The load a simulated GPU shows: what a job declares with `NANUM_SIM_UTIL` (and `NANUM_SIM_MEM`).

`NANUM_SIM_UTIL` is a utilisation in percent (`90`), or phases `UTIL@SECONDS,...` measured from the job's start
whose last entry holds for the rest of the run: `95@600,0` is busy for ten minutes, then idle. Unset: busy
(`DEFAULT_UTIL`). `NANUM_SIM_MEM` is the memory in use per GPU in MiB, or a share of the GPU (`0.4`); unset:
`DEFAULT_MEMORY_SHARE` of the GPU while the job is busy, and what it held before while idle (a loaded model
stays loaded).
"""

from __future__ import annotations

from collections.abc import Mapping

__all__ = ["DEFAULT_UTIL", "LoadError", "sim_memory", "sim_util"]

DEFAULT_UTIL = 90.0
DEFAULT_MEMORY_SHARE = 0.4
JITTER = 5.0


class LoadError(ValueError):
    """A NANUM_SIM_UTIL or NANUM_SIM_MEM value that does not parse."""


def phases(spec: str) -> list[tuple[float, float | None]]:
    """`95@600,0` → [(95.0, 600.0), (0.0, None)]. Raises LoadError."""
    out: list[tuple[float, float | None]] = []
    for part in spec.split(","):
        util, _, seconds = part.strip().partition("@")
        try:
            value = float(util)
            length = float(seconds) if seconds else None
        except ValueError:
            raise LoadError(f"NANUM_SIM_UTIL={spec!r}: use a percentage (90) or phases like 95@600,0") from None
        if not 0 <= value <= 100 or (length is not None and length < 0):
            raise LoadError(f"NANUM_SIM_UTIL={spec!r}: utilisation must be 0-100 and durations ≥ 0")
        out.append((value, length))
    return out


def sim_util(env: Mapping[str, str], elapsed: float, jitter: float = 0.0) -> float:
    """Utilisation of a job's simulated GPU `elapsed` seconds after it started. `jitter` in [-1, 1] spreads a
    busy figure by ±JITTER points; an idle one (0) stays 0. A bad spec counts as the default."""
    try:
        steps = phases(env.get("NANUM_SIM_UTIL", "")) if env.get("NANUM_SIM_UTIL") else [(DEFAULT_UTIL, None)]
    except LoadError:
        steps = [(DEFAULT_UTIL, None)]
    value, clock = steps[-1][0], 0.0
    for util, length in steps:
        if length is None or elapsed < clock + length:
            value = util
            break
        clock += length
    if value <= 0:
        return 0.0
    return min(100.0, max(0.0, value + JITTER * jitter))


def sim_memory(env: Mapping[str, str], total_mb: int, busy: bool, before_mb: int) -> int:
    """Memory in use on a job's simulated GPU of `total_mb` MiB."""
    spec = env.get("NANUM_SIM_MEM", "").strip()
    if spec:
        try:
            value = float(spec)
        except ValueError:
            value = DEFAULT_MEMORY_SHARE
        mb = value * total_mb if value <= 1 else value
        return int(min(max(mb, 0), total_mb))
    if busy:
        return int(DEFAULT_MEMORY_SHARE * total_mb)
    return before_mb
