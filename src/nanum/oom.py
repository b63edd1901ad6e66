"""What the kernel's OOM killer takes on a machine out of memory: a job, not nanum's server or agent.

A job without `--mem` may use all of its node's memory. The kernel then kills the process with the highest
`oom_score`, and a server or an agent holding hundreds of megabytes can rank above a job made of many small
processes: every job of the node would lose its agent, or the whole cluster its server. Run as root, the server
and the agent lower their own score by `SERVICE_ADJ` (as slurmd's systemd unit does with OOMScoreAdjust); the
agent's launcher puts its own back to 0, so the jobs it starts are scored as any process is, and cannot lower
theirs (that takes CAP_SYS_RESOURCE).
"""

from __future__ import annotations

import os

__all__ = ["SERVICE_ADJ", "as_any_process", "spare_the_service"]

SERVICE_ADJ = -900


def spare_the_service() -> str | None:
    """Lower this process's OOM score, for a server or an agent run as root; why it could not, or None. (A
    container may deny root the capability it takes.)"""
    if os.geteuid() != 0:
        return None
    return _adjust(SERVICE_ADJ)


def as_any_process() -> None:
    """Score this process (and what it forks from now on) as any other: for the launcher of jobs."""
    _adjust(0)


def _adjust(value: int) -> str | None:
    try:
        with open("/proc/self/oom_score_adj", "w") as f:
            f.write(str(value))
    except OSError as exc:
        return f"cannot set its OOM score adjustment to {value}: {exc.strerror}"
    return None
