"""Wake-ups between servers that share a PostgreSQL database, through PostgreSQL's LISTEN/NOTIFY.

Any server takes submissions, but only the one holding the leadership schedules; any server may hold a node's
heartbeat, but the scheduling server decides what that node should run. So a server's poke of the scheduler
and its wake-up of a node's held heartbeat (`nanum.server.signals`) are also published on a channel of this
database and schema, and every other server sharing it acts on them at once: a job submitted to the standby starts
as soon as one submitted to the leader, and a start decided by the leader reaches a heartbeat held by the standby
without waiting.

Each server listens on one connection of its own and publishes from one thread: what its requests asked for while
the last notification was being sent goes out together, in as few notifications as fit (PostgreSQL takes up to
8,000 bytes each). A server that lost its listening connection wakes all its held heartbeats and pokes its
scheduler once it is back, since it may have missed something meanwhile.
"""

from __future__ import annotations

import contextlib
import json
import logging
import secrets
import threading
import zlib
from collections.abc import Callable, Iterable
from typing import Any

from sqlalchemy import text
from sqlalchemy.engine import Connection
from sqlalchemy.exc import DBAPIError

from nanum.store import Database

__all__ = ["Bus", "channel_of"]

log = logging.getLogger("nanum.server")

#: A notification's payload stays under PostgreSQL's limit of 8,000 bytes.
MAX_PAYLOAD = 7_000
#: How long the listening thread waits for a notification before it looks whether the server is stopping.
LISTEN_WAIT_S = 0.5
#: Pause before connecting again after the database went away.
RECONNECT_S = 1.0
#: Poke kinds, by strength: a new job that needs GPUs (the scheduler may skip it while none is free), any change.
POKE_NONE, POKE_GPU_JOB, POKE_ANY = 0, 1, 2


def channel_of(conn: Connection) -> str:
    """The channel of this database and schema: servers sharing both share it, and no one else does."""
    where = conn.execute(text("SELECT current_database() || '.' || current_schema()")).scalar()
    return f"nanum_{zlib.crc32(str(where).encode()):08x}"


def payloads(sender: str, poke: int, nodes: Iterable[str]) -> list[str]:
    """The notifications that carry `poke` and the wake-up of `nodes`, each at most `MAX_PAYLOAD` bytes (JSON
    written in ASCII: a byte per character)."""
    room = MAX_PAYLOAD - len(json.dumps({"from": sender, "poke": poke, "wake": []}))
    out: list[str] = []
    batch: list[str] = []
    size = 0
    for name in sorted(nodes):
        cost = len(json.dumps(name)) + 2  # the name and its separator
        if batch and size + cost > room:
            out.append(json.dumps({"from": sender, "poke": POKE_NONE, "wake": batch}))
            batch, size = [], 0
        batch.append(name)
        size += cost
    if batch or poke:
        out.append(json.dumps({"from": sender, "poke": poke, "wake": batch}))
    return out


class Bus:
    """Publishes this server's pokes and wake-ups, and delivers other servers' to `on_poke` and `on_wake` (called
    from the listening thread; both must be safe from any thread)."""

    def __init__(self, db: Database, on_poke: Callable[[bool], None], on_wake: Callable[[list[str]], None],
                 on_missed: Callable[[], None]) -> None:
        self.db = db
        self.on_poke, self.on_wake, self.on_missed = on_poke, on_wake, on_missed
        #: tells this server's notifications from the others' (a server hears its own too)
        self.sender = secrets.token_hex(6)
        self.channel: str | None = None
        #: set once the listening connection is listening: notifications sent from then on are delivered
        self.listening = threading.Event()
        self._cond = threading.Condition()
        self._poke = POKE_NONE
        self._nodes: set[str] = set()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []

    # -- publishing ------------------------------------------------------------------------------------------

    def poke(self, new_gpu_job: bool = False) -> None:
        with self._cond:
            self._poke = max(self._poke, POKE_GPU_JOB if new_gpu_job else POKE_ANY)
            self._cond.notify_all()

    def wake(self, nodes: Iterable[str]) -> None:
        with self._cond:
            self._nodes.update(nodes)
            self._cond.notify_all()

    # -- running ---------------------------------------------------------------------------------------------

    def start(self) -> None:
        for target, name in ((self._listen, "nanum-bus-listen"), (self._publish, "nanum-bus-publish")):
            thread = threading.Thread(target=target, name=name, daemon=True)
            thread.start()
            self._threads.append(thread)

    def close(self) -> None:
        with self._cond:
            self._stop.set()
            self._cond.notify_all()
        for thread in self._threads:
            thread.join(timeout=5)

    def _connect(self) -> Connection:
        conn = self.db.engine.connect().execution_options(isolation_level="AUTOCOMMIT")
        if self.channel is None:
            self.channel = channel_of(conn)
        return conn

    def _publish(self) -> None:
        conn: Connection | None = None
        try:
            while True:
                with self._cond:
                    while not self._stop.is_set() and self._poke == POKE_NONE and not self._nodes:
                        self._cond.wait()
                    if self._stop.is_set():
                        return
                    poke, nodes = self._poke, self._nodes
                    self._poke, self._nodes = POKE_NONE, set()
                for payload in payloads(self.sender, poke, nodes):
                    conn = self._send(conn, payload)
        finally:
            _discard(conn)

    def _send(self, conn: Connection | None, payload: str) -> Connection | None:
        """Send one notification, on a new connection if the last one broke; a notification that cannot be sent is
        lost (the others' scheduler still ticks on its timer, and held heartbeats end at their wait)."""
        for attempt in (1, 2):
            try:
                if conn is None:
                    conn = self._connect()
                conn.execute(text("SELECT pg_notify(:channel, :payload)"), {"channel": self.channel,
                                                                            "payload": payload})
                return conn
            except DBAPIError as exc:
                _discard(conn)
                conn = None
                if attempt == 2:
                    log.warning("could not tell the other servers of a change: %s", exc.orig or exc)
        return None

    def _listen(self) -> None:
        heard_before = False
        while not self._stop.is_set():
            conn = None
            try:
                conn = self._connect()
                conn.exec_driver_sql(f'LISTEN "{self.channel}"')
                raw: Any = conn.connection.driver_connection
                self.listening.set()
                if heard_before:
                    self.on_missed()  # changes made while this server was not listening
                heard_before = True
                while not self._stop.is_set():
                    for note in raw.notifies(timeout=LISTEN_WAIT_S):
                        self._deliver(note.payload)
            except Exception as exc:  # the database went away: listen again once it is back
                self.listening.clear()
                if not self._stop.is_set():
                    log.warning("lost the other servers' notifications (%s); listening again in %.0f s",
                                getattr(exc, "orig", None) or exc, RECONNECT_S)
                    self._stop.wait(RECONNECT_S)
            finally:
                _discard(conn)

    def _deliver(self, payload: str) -> None:
        try:
            note = json.loads(payload)
            if note.get("from") == self.sender:
                return
            poke, nodes = int(note.get("poke", POKE_NONE)), [str(n) for n in note.get("wake", ())]
        except (ValueError, TypeError, AttributeError):
            log.warning("ignored a notification that is not nanum's: %.100r", payload)
            return
        if nodes:
            self.on_wake(nodes)
        if poke != POKE_NONE:
            self.on_poke(poke == POKE_GPU_JOB)


def _discard(conn: Connection | None) -> None:
    """Close a connection that listened or may be broken without returning it to the pool."""
    if conn is not None:
        with contextlib.suppress(Exception):  # already broken
            conn.invalidate()
            conn.close()
