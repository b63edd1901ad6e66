"""Linux process facts the executor relies on: start times from /proc, liveness, pidfds, the boot id.

A pid alone does not name a process across an agent restart (pids are reused), so a job is identified by its
pid together with its start time in clock ticks since boot (field 22 of /proc/PID/stat) and the boot id.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

__all__ = ["boot_id", "holding", "is_alive", "open_pidfd", "start_ticks"]


def _stat_fields(pid: int) -> list[str] | None:
    try:
        fd = os.open(f"/proc/{pid}/stat", os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        raw = os.read(fd, 4096).decode(errors="replace")  # at most a few hundred bytes
    except OSError:
        return None
    finally:
        os.close(fd)
    # The command name (field 2) is in parentheses and may itself contain spaces or parentheses.
    return raw[raw.rindex(")") + 2 :].split()


def start_ticks(pid: int) -> int | None:
    """When the process started, in clock ticks since boot; None when there is no such process."""
    fields = _stat_fields(pid)
    return int(fields[19]) if fields else None


def is_alive(pid: int, ticks: int | None) -> bool:
    """Whether `pid` is a live (not zombie) process that started at `ticks` (any start time when None)."""
    fields = _stat_fields(pid)
    if not fields or fields[0] in ("Z", "X", "x"):
        return False
    return ticks is None or int(fields[19]) == ticks


def holding(path: str | Path, fds: tuple[int, ...] = (1, 3)) -> int | None:
    """The live process that leads its own session and has `path` open as one of `fds`; None when there is none.
    A job's waiter holds its exit file so (descriptor 3; standard output in earlier versions): this finds a job
    whose pid was never recorded."""
    return next((pid for pid in _holders(path, fds) if _leads(pid)), None)


def opened_by_other(path: str | Path, me: int) -> int | None:
    """A live process other than `me` that has `path` open (at any descriptor); None when there is none."""
    return next((pid for pid in _holders(path, None) if pid != me), None)


def _holders(path: str | Path, fds: tuple[int, ...] | None) -> Iterator[int]:
    """The live processes that have `path` open as one of `fds` (None: as any descriptor)."""
    try:
        target = os.stat(path)
    except OSError:
        return
    with os.scandir("/proc") as entries:
        pids = [int(e.name) for e in entries if e.name.isdigit()]
    for pid in pids:
        try:
            if fds is None:
                with os.scandir(f"/proc/{pid}/fd") as entries:
                    paths = [e.path for e in entries]
            else:
                paths = [f"/proc/{pid}/fd/{fd}" for fd in fds]
        except OSError:
            continue
        for fd_path in paths:
            try:
                held = os.stat(fd_path)
            except OSError:
                continue
            if (held.st_dev, held.st_ino) == (target.st_dev, target.st_ino) and is_alive(pid, None):
                yield pid
                break


def _leads(pid: int) -> bool:
    try:
        return os.getsid(pid) == pid
    except OSError:
        return False


def open_pidfd(pid: int) -> int | None:
    """A pidfd that becomes readable when `pid` exits, or None where the kernel offers none. Raises
    `ProcessLookupError` when there is no such process any more (it ended and was reaped)."""
    try:
        return os.pidfd_open(pid)
    except ProcessLookupError:
        raise
    except (AttributeError, OSError):
        return None


def boot_id() -> str:
    """This boot's id: jobs recorded under another boot id cannot still be running."""
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""
