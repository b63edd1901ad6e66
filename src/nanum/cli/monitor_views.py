"""How a job's GPU use looks in a terminal: the idle note in `nanum ps`, the GPU lines of `nanum show`.

Pure functions of the API's job body (fields `gpu_util`, `gpu_util_avg`, `idle`, `efficiency`).
"""

from __future__ import annotations

from typing import Any

FIELDS = ("gpu_util", "gpu_util_avg", "idle", "efficiency")


def _duration(seconds: float) -> str:
    s = max(int(seconds), 0)
    if s >= 3600:
        return f"{s // 3600}h {s % 3600 // 60:02d}m"
    return f"{s // 60}m" if s >= 60 else f"{s}s"


def idle_text(job: dict[str, Any]) -> str:
    """`idle 45m, flagged` for a running job flagged idle (its GPUs do nothing), else ''."""
    idle = job.get("idle")
    if not idle:
        return ""
    what = "being released" if idle.get("stage") == "released" else "flagged"
    return f"idle {_duration(idle.get('for_s') or 0)}, {what}"


def usage_lines(job: dict[str, Any]) -> list[tuple[str, str]]:
    """`nanum show` lines about GPU use: now, on average, idle state, and the summary with hints once ended."""
    lines: list[tuple[str, str]] = []
    if job.get("gpu_util") is not None:
        lines.append(("gpu_util", f"{job['gpu_util']:.0f}% now"))
    if job.get("gpu_util_avg") is not None:
        lines.append(("gpu_util_avg", f"{job['gpu_util_avg']:.0f}% on average"))
    if job.get("idle"):
        lines.append(("idle", f"{idle_text(job)}, since {job['idle'].get('since')}"))
    summary = job.get("efficiency")
    if summary:
        lines.append(("efficiency", _summary(summary)))
        lines += [("hint", hint) for hint in summary.get("hints", [])]
    return lines


def _summary(s: dict[str, Any]) -> str:
    memory = f"peak memory {s['gpu_memory_peak_mb'] / 1024:.1f} GiB"
    if s.get("gpu_memory_mb"):
        memory += f" of {s['gpu_memory_mb'] / 1024:.0f} GiB"
    return (
        f"GPU {s['gpu_util_avg']:.0f}% average, {s['gpu_util_peak']:.0f}% peak; {memory}; "
        f"idle in {s['idle_share']:.0%} of {s['readings']} readings; CPU {s['cpu_avg_percent'] / 100:.1f} cores"
    )


def util_text(gpu: dict[str, Any]) -> str:
    """`87%` from a GPU's latest reading; '' when there is none."""
    return "" if gpu.get("util") is None else f"{gpu['util']:.0f}%"


def holder_text(gpu: dict[str, Any]) -> str:
    """The USER column of `nanum nodes`: the holder, and anyone using the GPU outside nanum."""
    outside = [f"pid {p.get('pid')}" + (f" {p['user']}" if p.get("user") else "") for p in gpu.get("outside") or ()]
    parts = [gpu.get("user") or ""] + ([f"outside nanum: {', '.join(outside)}"] if outside else [])
    return "; ".join(p for p in parts if p)
