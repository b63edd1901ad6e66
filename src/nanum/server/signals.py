"""Wake-ups between worker threads and the event loop: the scheduler's poke and each node's held heartbeat.

A held heartbeat takes a node's current `asyncio.Event` *before* it reads the desired state, then waits on it;
`wake` sets that event and installs a fresh one, so a change that lands while the reply is being built is never
missed. `wake` and `poke` may be called from any thread. Where servers share a PostgreSQL database, both are also
published to the others (`bus`, a `nanum.server.bus.Bus`), which act on them as on their own (`wake_local`,
`poke_local`).

Each wake also gives the node a new `generation` at once, in the thread that woke it: what was worked out for a node
(a quiet heartbeat's answer, `nanum.server.services.agent`) holds only while its generation is the same. So does a
heartbeat that changed its own node's jobs (`outdate`: it recorded their ends), without waking it.

A wake may bring the woken heartbeat its reply (`wake(nodes, replies)`: the scheduler's tick, which has just
written the node's jobs, reads them in the same transaction). The reply is kept for the generation that wake
gives, and only if no other wake or change came between the reply's read and that wake (`ready`): otherwise the
heartbeat reads the node's jobs itself. A reply read before the node's own heartbeat recorded a job's end would
still list that job, and its agent, told in the same answer that the end is recorded, would start it again.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from nanum.server.bus import Bus

#: Replies a wake brings (`Signals.wake`): by node, its generation before the reply was read, and the reply.
Replies = dict[str, tuple[tuple[int, int], Any]]


class Signals:
    def __init__(self) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None
        self._nodes: dict[str, asyncio.Event] = {}
        self._count = itertools.count(1)
        self._generations: dict[str, int] = {}
        self._epoch = 0  # moved by `wake_all`: every node's generation changes
        self._latest: dict[str, object] = {}  # each node's newest heartbeat (`arrive`)
        self._stamping = threading.Lock()  # a generation and the reply kept for it, given together
        self._ready: dict[str, tuple[tuple[int, int], Any]] = {}  # node -> (its generation, the reply for it)
        self._held: dict[str, int] = {}  # node -> its heartbeats held now (`held`)
        self.closing = False
        self.on_poke: Callable[[bool], None] | None = None
        #: the other servers sharing the database, where there may be some
        self.bus: Bus | None = None

    def bind(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self.closing = False

    def arrive(self, node: str) -> object:
        """A heartbeat of `node` arrived: release its older one still held (its agent gave up on it to send this
        one) and return this one's ticket (`superseded`). Call on the event loop."""
        ticket = self._latest[node] = object()
        self.wake_now([node])
        return ticket

    def superseded(self, node: str, ticket: object) -> bool:
        """Whether a newer heartbeat of `node` arrived after the one given `ticket`. Call on the event loop."""
        return self._latest.get(node) is not ticket

    def event(self, node: str) -> asyncio.Event:
        """The event the next change to `node` will set. Call on the event loop."""
        ev = self._nodes.get(node)
        if ev is None:
            ev = self._nodes[node] = asyncio.Event()
        return ev

    def generation(self, node: str) -> tuple[int, int]:
        """Changes whenever the node is woken (here, or by another server through the bus). Safe from any thread."""
        return self._epoch, self._generations.get(node, 0)

    def hears_all(self) -> bool:
        """Whether every wake reaches this server: no other server shares its database, or it is listening to them
        (`nanum.server.bus.Bus.listening`; once it listens again, `wake_all` moves every generation)."""
        return self.bus is None or self.bus.listening.is_set()

    @contextlib.contextmanager
    def held(self, node: str) -> Iterator[None]:
        """While the block runs, a heartbeat of `node` is held here (`holding`). Call on the event loop."""
        self._held[node] = self._held.get(node, 0) + 1
        try:
            yield
        finally:
            if self._held[node] > 1:
                self._held[node] -= 1
            else:
                del self._held[node]

    def holding(self) -> set[str]:
        """The nodes with a heartbeat held on this server now. Safe from any thread."""
        return set(self._held)  # copied in one step: the event loop may change it meanwhile

    def wake(self, nodes: Iterable[str], replies: Replies | None = None) -> None:
        """Release held heartbeats of `nodes`, here and on the other servers. Safe from any thread. `replies`: for
        the heartbeats woken here (`ready`)."""
        names = tuple(nodes)
        if names and self.bus is not None:
            self.bus.wake(names)
        self.wake_local(names, replies)

    def wake_local(self, nodes: Iterable[str], replies: Replies | None = None) -> None:
        """Release held heartbeats of `nodes` on this server (`wake`). Safe from any thread; a no-op before the
        loop is bound."""
        names = tuple(nodes)
        with self._stamping:
            for name in names:
                offered = replies.get(name) if replies else None
                # kept only if no wake came since its read
                reply = offered[1] if offered is not None and offered[0] == self.generation(name) else None
                self._generations[name] = next(self._count)
                if reply is not None:
                    self._ready[name] = (self.generation(name), reply)
                else:
                    self._ready.pop(name, None)
        if names and self._loop is not None and not self._loop.is_closed():
            with contextlib.suppress(RuntimeError):  # the loop is shutting down
                self._loop.call_soon_threadsafe(self.wake_now, names)

    def outdate(self, node: str, since: tuple[int, int]) -> tuple[int, int] | None:
        """`node`'s jobs were changed here without a wake (its own heartbeat recorded their ends): no reply read
        before now may reach it. Gives the node a new generation, so that a reply a tick read before the change is
        neither kept (`wake_local` checks the generation it was read at) nor handed out (`ready`). Returns the new
        generation where it was still `since` until now, else None (a wake came meanwhile: what was worked out
        from `since` is old). Safe from any thread."""
        with self._stamping:
            unchanged = self.generation(node) == since
            self._generations[node] = next(self._count)
            self._ready.pop(node, None)
            return self.generation(node) if unchanged else None

    def ready(self, node: str) -> Any | None:
        """The reply the last wake of `node` brought, if nothing woke it since (once). Call on the event loop."""
        with self._stamping:
            kept = self._ready.pop(node, None)
            return kept[1] if kept is not None and kept[0] == self.generation(node) else None

    def wake_now(self, nodes: Iterable[str]) -> None:
        """`wake`, on the event loop itself."""
        for name in nodes:
            ev = self._nodes.pop(name, None)
            if ev is not None:
                ev.set()

    def wake_all(self) -> None:
        """Release every heartbeat held on this server (each reads its node's jobs again). Safe from any thread."""
        self._epoch = next(self._count)
        if self._loop is not None and not self._loop.is_closed():
            with contextlib.suppress(RuntimeError):
                self._loop.call_soon_threadsafe(lambda: self.wake_now(list(self._nodes)))

    def close(self) -> None:
        """Release every held heartbeat now and from now on (the server is stopping)."""
        self.closing = True
        self.wake_all()

    def poke(self, *, new_gpu_job: bool = False) -> None:
        """Ask the scheduler to run soon. Safe from any thread. `new_gpu_job`: only a job that needs GPUs was
        submitted, which cannot start while every GPU is taken (the timer tick then gives it its reason). The
        scheduling server may be another one: it is poked too."""
        if self.bus is not None:
            self.bus.poke(new_gpu_job)
        self.poke_local(new_gpu_job)

    def poke_local(self, new_gpu_job: bool = False) -> None:
        """`poke`, of this server's scheduler only."""
        if self.on_poke is not None:
            self.on_poke(new_gpu_job)
