"""When each node was last heard from, written to the database in batches instead of once per heartbeat.

A heartbeat that reports nothing new (the same inventory, the same running jobs: most of them, on a quiet fleet)
changes only the node's `last_seen`. Writing that at once cost every such heartbeat a write transaction with the
node's row locked; on a fleet of 1,000 nodes those transactions took over half of the server's time. So a quiet
heartbeat notes the time here (`heard`), and `flush` writes every noted time in one transaction, about once a
second (`FLUSH_S`, the server's lifespan). The scheduling server takes the later of the stored and the noted time
of each node it hears from itself (`since`), both to see which nodes are up and to sweep for silent ones, so its
tick need not write them first: it does only when that writer has fallen behind (`overdue`: on a busy server the
writer's transaction waits while ticks go first), so a job's start rarely waits for this write.

What this costs: after a crash, the `last_seen` of nodes that were quiet in the last second is that much older,
which only brings their sweep closer by as much (the sweep gives a node its lease, its jobs' grace and a margin
of at least 2 s: `ServerSettings.requeue_after_s`). For nodes heard by another server sharing the database, the
sweep waits `PEER_SLACK_S` longer, the most their stored times can lag. A heartbeat is written at once again when
times noted here have gone unwritten for `STALE_S` (the database refuses writes, say), so nothing is promised to
an agent that the database does not know for longer than that.
"""

from __future__ import annotations

import threading
import time

from sqlalchemy import bindparam, or_, select

from nanum.server.periodic import flush_every
from nanum.store import Database, NodeRow, table

#: How often the noted times are written (seconds).
FLUSH_S = 1.0
#: A tick writes the noted times itself once one has waited this long (seconds): the writer is late.
OVERDUE_S = 2 * FLUSH_S
#: A heartbeat is written at once while some noted time has waited longer than this to be written (seconds).
STALE_S = 3.0
#: How much later a node heard by another server is given up: the most its stored time can lag (seconds).
PEER_SLACK_S = STALE_S

_NODES = table(NodeRow)
_WRITE = (
    _NODES.update()
    .where(_NODES.c.id == bindparam("node_id"), or_(_NODES.c.last_seen.is_(None), _NODES.c.last_seen < bindparam("at")))
    .values(last_seen=bindparam("at"))
)


class LastSeen:
    """Node id → when this server last heard from it; the times not yet in the database wait for `flush`.
    Thread-safe."""

    def __init__(self) -> None:
        self._heard: dict[int, float] = {}
        self._unwritten: dict[int, float] = {}
        self._oldest: float | None = None  # time.monotonic() when the oldest unwritten time was noted
        self._flushing: float | None = None  # the same, of the times a flush is writing now
        self._lock = threading.Lock()
        self._flush_lock = threading.Lock()  # one flush at a time (the writer's, a tick's)

    def heard(self, node_id: int, at: float, *, written: bool = False) -> None:
        """Note that the node was heard from at `at`; `written`: a heartbeat's own transaction stored it."""
        with self._lock:
            if at >= self._heard.get(node_id, at):
                self._heard[node_id] = at
            if written:
                return
            if at > self._unwritten.get(node_id, float("-inf")):
                self._unwritten[node_id] = at
            if self._oldest is None:
                self._oldest = time.monotonic()

    def latest(self, node_id: int) -> float | None:
        """When this server last heard from the node (None: not since it started)."""
        return self._heard.get(node_id)

    def since(self, node_id: int, stored: float | None) -> float | None:
        """When the node was last heard from: `stored` (its `last_seen` as read), or the later time this server
        noted and may not have written yet."""
        noted = self._heard.get(node_id)
        return stored if noted is None or (stored is not None and stored >= noted) else noted

    def overdue(self) -> bool:
        """True while some noted time has waited longer than `OVERDUE_S` to be written: the writer is late."""
        oldest = self._oldest
        return oldest is not None and time.monotonic() - oldest > OVERDUE_S

    def behind(self) -> bool:
        """True while some noted time has waited longer than `STALE_S` to be written."""
        waiting = [t for t in (self._oldest, self._flushing) if t is not None]
        return bool(waiting) and time.monotonic() - min(waiting) > STALE_S

    def forget(self, node_id: int) -> None:
        """The node was removed: write nothing more for its id."""
        with self._lock:
            self._heard.pop(node_id, None)
            self._unwritten.pop(node_id, None)

    def flush(self, db: Database, *, wait: bool = True) -> int:
        """Write every unwritten time, never moving a stored time back, in one transaction; returns how many it
        wrote. On PostgreSQL, rows locked by another transaction (a heartbeat's, a tick's) are left to the next flush
        rather than waited for. `wait=False`: write nothing if another flush is under way (a tick's: that flush's
        session waits for the tick, `Database.precedence`)."""
        if not self._flush_lock.acquire(blocking=wait):
            return 0
        try:
            return self._flush(db)
        finally:
            self._flush_lock.release()

    def _flush(self, db: Database) -> int:
        with self._lock:
            unwritten, self._unwritten = self._unwritten, {}
            oldest, self._oldest = self._oldest, None
            self._flushing = oldest
        if not unwritten:
            return 0
        written: list[int] = []
        count = 0
        try:
            with db.write() as s:
                ids = sorted(unwritten)
                locked = select(NodeRow.id).where(NodeRow.id.in_(ids)).order_by(NodeRow.id)
                # FOR NO KEY UPDATE, as strong as the UPDATE needs: a write whose foreign key names the node (its
                # readings, with a key-share lock on its row) does not wait for this one (tests/server/test_node_locks)
                written = list(s.scalars(locked.with_for_update(skip_locked=True, key_share=True)))
                if written:
                    s.connection().execute(_WRITE, [{"node_id": i, "at": unwritten[i]} for i in written])
                count = len(written)
                if len(written) < len(ids):  # locked elsewhere (kept for the next flush), or removed (dropped)
                    gone = set(ids) - set(s.scalars(select(NodeRow.id).where(NodeRow.id.in_(ids))))
                    written += gone
        except Exception:
            written = []
            raise
        finally:
            done = set(written)
            left = {i: at for i, at in unwritten.items() if i not in done}
            with self._lock:
                self._flushing = None
                if left:
                    for node_id, at in left.items():
                        if node_id in self._heard and at > self._unwritten.get(node_id, float("-inf")):
                            self._unwritten[node_id] = at
                    if self._unwritten and oldest is not None:
                        self._oldest = oldest if self._oldest is None else min(oldest, self._oldest)
        return count

    async def run(self, db: Database) -> None:
        """Flush every `FLUSH_S` until cancelled, then once more (a server stopping writes what it heard)."""
        await flush_every(FLUSH_S, lambda: self.flush(db), "when nodes were last heard from")
