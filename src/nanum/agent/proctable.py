"""The node's process table from /proc: which session each process is in, the CPU time it used, who runs it.

Jobs run in sessions of their own (the job's first process leads it), so a process belongs to job J when its
session id is J's pid. That is how the monitor tells a job's GPU processes from someone else's, and sums a
job's CPU time.
"""

from __future__ import annotations

import os
import pwd
from dataclasses import dataclass
from pathlib import Path

__all__ = ["ProcStat", "describe", "scan", "stat"]

PROC = Path("/proc")


@dataclass(frozen=True, slots=True)
class ProcStat:
    pid: int
    session: int
    ticks: int  # user + system CPU time, its own and its reaped children's, in clock ticks


def stat(pid: int) -> ProcStat | None:
    """One process; None when it is gone (or in a PID namespace this agent cannot see)."""
    try:
        raw = (PROC / str(pid) / "stat").read_text()
    except OSError:
        return None
    fields = raw[raw.rindex(")") + 2 :].split()  # fields from the third (state) on
    if fields[0] in ("Z", "X", "x"):
        return None
    return ProcStat(pid, int(fields[3]), sum(int(f) for f in fields[11:15]))


def scan() -> list[ProcStat]:
    """Every live process."""
    out = []
    for entry in os.scandir(PROC):
        if entry.name.isdigit() and (found := stat(int(entry.name))) is not None:
            out.append(found)
    return out


def describe(pid: int) -> tuple[str | None, str | None]:
    """(user name, command line) of a process, as far as /proc tells; (None, None) when it is gone."""
    base = PROC / str(pid)
    try:
        uid = os.stat(base).st_uid
        cmdline = (base / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return None, None
    try:
        user = pwd.getpwuid(uid).pw_name
    except KeyError:
        user = str(uid)
    return user, cmdline[:200] or None
