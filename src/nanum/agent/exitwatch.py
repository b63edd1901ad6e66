"""Noticing at once that a job's process ended: a pidfd per process in one epoll, and a pipe that wakes the wait
early (a job started or stopped, so the next deadline changed). Where the kernel has no pidfds, the process is
looked at every `POLL_S` instead. A process that is gone by the time it is to be watched (a job that ends within
a millisecond or two: its waiter has exited and been reaped before the agent has read its pid) has no pidfd to
give: its end is handled at the next wake, which it causes, not at a later look.

The executor's watcher thread waits here, outside its lock, and handles what ended under it; this module holds
only the file descriptors, so that the executor reads as what it does with jobs.
"""

from __future__ import annotations

import contextlib
import os
import select
from collections.abc import Iterable, Iterator

from nanum.agent import procs

__all__ = ["POLL_S", "ExitWatch"]

#: How often a process without a pidfd is looked at.
POLL_S = 0.02


class ExitWatch:
    """The processes being waited for, by job id; `polled` are those without a pidfd (the caller looks at them)."""

    def __init__(self) -> None:
        self.polled: set[int] = set()
        self._gone: set[int] = set()  # jobs whose process had ended before it could be watched
        self._fd_job: dict[int, int] = {}
        self._epoll = select.epoll()
        self._wake_r, self._wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        self._epoll.register(self._wake_r, select.EPOLLIN)

    def watch(self, job_id: int, pid: int) -> None:
        """Wait for `pid`, the process of `job_id`, from now on (and wake the wait, which may be long)."""
        try:
            fd = procs.open_pidfd(pid)
        except ProcessLookupError:
            self._gone.add(job_id)
            self.wake()
            return
        if fd is None:
            self.polled.add(job_id)
        else:
            self._fd_job[fd] = job_id
            self._epoll.register(fd, select.EPOLLIN)
        self.wake()

    def unwatch(self, job_id: int) -> None:
        self.polled.discard(job_id)
        self._gone.discard(job_id)
        for fd, watched in list(self._fd_job.items()):
            if watched == job_id:
                del self._fd_job[fd]
                self._epoll.unregister(fd)
                os.close(fd)

    def wait(self, timeout: float) -> list[int]:
        """Block up to `timeout` seconds for an exit or a wake; the file descriptors that became ready."""
        return [fd for fd, _ in self._epoll.poll(timeout)]

    def ended(self, ready: Iterable[int]) -> Iterator[int]:
        """The jobs whose process ended among `ready`, and those whose process was gone when it was to be watched
        (each still watched when its turn comes); empties the wake pipe."""
        for fd in ready:
            if fd == self._wake_r:
                self._drain_wake()
            elif fd in self._fd_job:
                yield self._fd_job[fd]
        while self._gone:
            yield self._gone.pop()

    def wake(self) -> None:
        """End the current `wait` early (from any thread)."""
        with contextlib.suppress(BlockingIOError, OSError):
            os.write(self._wake_w, b"x")

    def close(self) -> None:
        for fd in self._fd_job:
            os.close(fd)
        self._fd_job.clear()
        self._epoll.close()
        os.close(self._wake_r)
        os.close(self._wake_w)

    def _drain_wake(self) -> None:
        try:
            while os.read(self._wake_r, 4096):
                pass
        except BlockingIOError:
            pass
