"""The agent's hold on its lease (`nanum.agent.fence` explains fencing): carry on the lease of the agent before
it, renew it with every reply, look at it often, stop the node's jobs once it has run out, and keep a guard
process running for when the agent itself cannot.

Looking often matters for an agent that was frozen: when it resumes it must stop its jobs before it does anything
else, since the server may have given them to other nodes meanwhile.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable
from pathlib import Path

from nanum.agent import fence, procs

__all__ = ["GUARD_CHECK_S", "LEASE_CHECK_S", "LeaseKeeper"]

log = logging.getLogger("nanum.agent")

#: How often the agent looks at its lease, and whether its guard process runs.
LEASE_CHECK_S = 0.2
GUARD_CHECK_S = 2.0
#: A renewed lease is written at once where the one on file runs out sooner than this (seconds); otherwise once
#: the reply's jobs have started (`flush`).
WRITE_AHEAD_S = 2 * GUARD_CHECK_S


class LeaseKeeper:
    """The lease of the agent using `state_dir`, as STATE/lease holds it."""

    def __init__(self, state_dir: Path) -> None:
        self.state_dir = state_dir
        self.lease = fence.Lease(expires=0.0)
        self._fenced_until = -1.0  # the lease expiry the running jobs were last fenced for
        self._unwritten = False  # renewed since STATE/lease was last written
        self._unwritable: str | None = None  # why STATE/lease could not be written, while it cannot
        #: Jobs stopped because the lease ran out (for tests and logs).
        self.fenced: list[int] = []

    def take(self, lease_s: float) -> None:
        """Carry on the lease of the agent before this one (a new agent earns none before its first reply)."""
        held, boot = fence.Lease.load(self.state_dir), procs.boot_id()
        fresh = held is None or held.boot != boot  # after a reboot no job of the old lease runs
        expires = fence.boottime() + lease_s if fresh or held is None else held.expires
        self.lease = fence.Lease(expires=expires, agent=os.getpid(), boot=boot)
        self._unwritten = True
        self.flush()
        fence.ensure_guard(self.state_dir)

    def renew(self, sent: float, lease_s: float) -> None:
        """A reply came to the heartbeat sent at `sent` (boottime): the lease now runs until `lease_s` after it.

        The guard reads the lease from STATE/lease, so that file is written at once only where the lease on it
        runs out soon; otherwise `flush` writes it once the reply's jobs have started, and a job's start waits for
        no file. Until then the guard sees the lease before this one, which can only run out sooner: its jobs are
        never let run longer than the lease the agent holds."""
        soon = self.lease.expires - fence.boottime() < WRITE_AHEAD_S
        self.lease.expires = sent + lease_s
        self._unwritten = True
        if soon:
            self.flush()

    def flush(self) -> None:
        """Write a renewed lease still unwritten (`renew`). Where it cannot be written (a full disk) the agent
        carries on, says so, and writes it when next asked: the guard then sees the lease on file run out and
        stops the jobs, as it would had the agent stopped, and the agent reports their ends."""
        if not self._unwritten:
            return
        try:
            self.lease.save(self.state_dir)
        except OSError as exc:
            why = f"{exc.strerror or exc} ({exc.filename or self.state_dir})"
            if why != self._unwritable:
                log.error("cannot write its lease: %s; unless it can again, this node's jobs are stopped when the "
                          "lease on file runs out", why)
            self._unwritable = why
            return
        if self._unwritable is not None:
            log.info("its lease is written again")
            self._unwritable = None
        self._unwritten = False

    def release(self) -> None:
        """The agent stops: the guard may leave once no job runs."""
        self.lease.stopped = True
        self._unwritten = True
        self.flush()

    def check(self, stop_jobs: Callable[[float], list[int]], lease_s: float) -> None:
        """Once the lease has run out, stop every running job (once per lapse): `stop_jobs(expires)` stops them
        and returns their ids; `lease_s` is the lease the server gave, for the log."""
        expires = self.lease.expires
        if self._fenced_until == expires or not self.lease.expired():
            return
        self._fenced_until = expires
        stopped = stop_jobs(expires)
        if stopped:
            self.fenced.extend(stopped)
            log.warning(
                "no reply from the server for longer than the lease (%.0f s): stopping jobs %s, which the server "
                "requeues", lease_s, ", ".join(map(str, stopped)),
            )

    async def watch(self, check: Callable[[], None]) -> None:
        """Call `check` often (a frozen agent that resumes stops its jobs at once), and keep a guard."""
        next_guard = fence.boottime() + GUARD_CHECK_S
        while True:
            check()
            if fence.boottime() >= next_guard:
                next_guard = fence.boottime() + GUARD_CHECK_S
                await asyncio.to_thread(fence.ensure_guard, self.state_dir)
            await asyncio.sleep(LEASE_CHECK_S)
