"""What a node tells the server about itself in every heartbeat (`NodeInfo`): its GPUs, its host name, CPUs and
memory, the account the agent runs as, and nanum's version. The agent adds what it finds later (cgroup limits,
container runtimes, the paths the server asks about).
"""

from __future__ import annotations

import os
import pwd
import socket

import nanum
from nanum.protocol import GpuInfo, NodeInfo

__all__ = ["describe_node"]


def describe_node(name: str, gpus: list[GpuInfo], simulated: bool) -> NodeInfo:
    uid = os.geteuid()
    try:
        user = pwd.getpwuid(uid).pw_name
    except KeyError:
        user = str(uid)
    return NodeInfo(
        name=name,
        hostname=socket.gethostname(),
        gpus=gpus,
        cpus=os.cpu_count() or 1,
        memory_mb=_memory_mb(),
        simulated=simulated,
        unix_user=user,
        is_root=uid == 0,
        version=nanum.__version__,
    )


def _memory_mb() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // (1024 * 1024)
    except (ValueError, OSError):
        return 0
