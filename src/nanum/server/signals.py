"""Wake-ups between worker threads and the event loop: the scheduler's poke and each node's held heartbeat.

A held heartbeat takes a node's current `asyncio.Event` *before* it reads the desired state, then waits on it;
`wake` sets that event and installs a fresh one, so a change that lands while the reply is being built is never
missed. `wake` and `poke` may be called from any thread.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Iterable


class Signals:
    def __init__(self) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None
        self._nodes: dict[str, asyncio.Event] = {}
        self.closing = False
        self.on_poke: Callable[[bool], None] | None = None

    def bind(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self.closing = False

    def event(self, node: str) -> asyncio.Event:
        """The event the next change to `node` will set. Call on the event loop."""
        ev = self._nodes.get(node)
        if ev is None:
            ev = self._nodes[node] = asyncio.Event()
        return ev

    def wake(self, nodes: Iterable[str]) -> None:
        """Release held heartbeats of `nodes`. Safe from any thread; a no-op before the loop is bound."""
        names = tuple(nodes)
        if names and self._loop is not None and not self._loop.is_closed():
            with contextlib.suppress(RuntimeError):  # the loop is shutting down
                self._loop.call_soon_threadsafe(self.wake_now, names)

    def wake_now(self, nodes: Iterable[str]) -> None:
        """`wake`, on the event loop itself."""
        for name in nodes:
            ev = self._nodes.pop(name, None)
            if ev is not None:
                ev.set()

    def close(self) -> None:
        """Release every held heartbeat now and from now on (the server is stopping)."""
        self.closing = True
        self.wake(list(self._nodes))

    def poke(self, *, new_gpu_job: bool = False) -> None:
        """Ask the scheduler to run soon. Safe from any thread. `new_gpu_job`: only a job that needs GPUs was
        submitted, which cannot start while every GPU is taken (the timer tick then gives it its reason)."""
        if self.on_poke is not None:
            self.on_poke(new_gpu_job)
