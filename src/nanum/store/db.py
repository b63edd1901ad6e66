"""Connecting to the store: SQLite (WAL) in the state directory by default, PostgreSQL by URL.

`Database` owns the engine and hands out sessions. Read sessions are plain transactions; write sessions on SQLite
begin with `BEGIN IMMEDIATE`, so a transaction that reads and then writes takes the write lock up front and waits
for it (busy timeout) instead of failing when another writer committed in between. SQLite has one writer at a time
anyway, so this process's writers also queue on a lock of their own: handing it over is immediate, where SQLite's
busy handler would sleep for milliseconds between retries. One thread's sessions can go before the others'
(`Precedence`: the scheduling tick's).
"""

from __future__ import annotations

import asyncio
import random
import threading
import time
import zlib
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from pathlib import Path
from typing import Any, TypeVar

from sqlalchemy import Connection, Engine, create_engine, event, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DisconnectionError, OperationalError
from sqlalchemy.orm import Session, sessionmaker

T = TypeVar("T")

#: PostgreSQL's SQLSTATE for a transaction it rolled back to break a deadlock.
DEADLOCK_DETECTED = "40P01"

#: Base of the PostgreSQL advisory lock held by the server that is scheduling (mixed with the schema's name).
SCHEDULER_LOCK_BASE = 0x6E616E756D  # "nanum"


def is_deadlock(exc: BaseException) -> bool:
    """PostgreSQL rolled this transaction back to break a deadlock: it changed nothing and may simply run again."""
    return isinstance(exc, OperationalError) and getattr(exc.orig, "sqlstate", None) == DEADLOCK_DETECTED


RETRY_PAUSE_S = 0.02  # the survivor's head start over a deadlock's victim that runs again


def retry_deadlocks(work: Callable[[], T], attempts: int = 3) -> T:
    """Run `work` (one or more whole write transactions), again when PostgreSQL picked it as a deadlock's victim.
    Two transactions that lock the same rows in opposite orders (two heartbeats charging the same labs' usage
    for jobs that ended) can deadlock; the one rolled back succeeds when it runs again.

    It runs again after a short random pause. The survivor is woken when the victim's locks go, but it must then
    take them itself; a victim that ran again at once could take its first row back first and deadlock with the
    same survivor again (seen once in a full test run: a victim rolled back twice)."""
    for attempt in range(1, attempts + 1):
        try:
            return work()
        except OperationalError as exc:
            if attempt == attempts or not is_deadlock(exc):
                raise
        time.sleep(random.uniform(RETRY_PAUSE_S, 2 * RETRY_PAUSE_S))
    raise AssertionError("unreachable")


def sqlite_url(home: Path) -> str:
    return f"sqlite:///{home / 'nanum.db'}"


class Database:
    """An engine plus session factories. `url` is any SQLAlchemy URL (sqlite:///..., postgresql+psycopg://...)."""

    def __init__(self, url: str, **engine_args: Any) -> None:
        self.url = url
        self.engine = _make_engine(url, **engine_args)
        self.is_sqlite = self.engine.dialect.name == "sqlite"
        self.is_postgres = self.engine.dialect.name == "postgresql"
        # On PostgreSQL a read outside `one_moment` runs in autocommit: at READ COMMITTED each statement sees the
        # database as it is when it runs, in a transaction or not, so the transaction's BEGIN and ROLLBACK (two
        # round trips, a quarter of a busy fleet's statements) bought nothing.
        reader = self.engine.execution_options(isolation_level="AUTOCOMMIT") if self.is_postgres else self.engine
        self._read = sessionmaker(reader, expire_on_commit=False)
        writer = self.engine.execution_options(nanum_write=True) if self.is_sqlite else self.engine
        self._write = sessionmaker(writer, expire_on_commit=False)
        self._writer_lock: AbstractContextManager[object] = threading.Lock() if self.is_sqlite else nullcontext()
        self.precedence = Precedence()

    @contextmanager
    def read(self, *, one_moment: bool = False) -> Iterator[Session]:
        """A session for queries, which writes nothing: rolled back at the end (on PostgreSQL, each statement is
        its own transaction). `one_moment`: every statement sees the database as the first one did (REPEATABLE
        READ on PostgreSQL; a SQLite read transaction always does)."""
        with self.precedence.turn(), self._read() as session:
            if one_moment and self.is_postgres:
                session.connection(execution_options={"isolation_level": "REPEATABLE READ"})
            yield session

    @contextmanager
    def write(self) -> Iterator[Session]:
        """A session that commits when the block ends without an exception, and rolls back otherwise."""
        with self.precedence.turn(), self._writer_lock, self._write() as session, session.begin():
            yield session

    def scheduler_lock_key(self, conn: Connection) -> int:
        """The advisory lock key of this database and schema: servers sharing both share the key."""
        where = conn.execute(text("SELECT current_database() || '.' || current_schema()")).scalar()
        return SCHEDULER_LOCK_BASE ^ zlib.crc32(str(where).encode())

    def dispose(self) -> None:
        self.engine.dispose()


class Precedence:
    """Lets one thread's work go first in a busy process: while it runs (`first`), other threads' new sessions
    (`turn`, entered by `Database.read` and `write`) wait for it to end.

    The server's threads share one interpreter lock, and a thread back from the database waits for that lock
    behind every other busy thread: with ten request threads busy, a scheduling tick that needs 40 ms of CPU took
    300 ms. Transactions already under way go on, and may open others (a thread holding a session never waits
    here, so no row lock it holds can hold up the one going first). Code on an event loop never waits, and no one
    waits longer than `MAX_WAIT_S`: this only orders work that would run anyway. The one going first must not
    wait for a lock that a waiting thread may hold (`LastSeen.flush(wait=False)`)."""

    MAX_WAIT_S = 1.0

    def __init__(self) -> None:
        self._clear = threading.Event()
        self._clear.set()
        self._owner: int | None = None
        self._depth = threading.local()
        self._first = threading.Lock()

    @contextmanager
    def first(self) -> Iterator[None]:
        """Go first: until the block ends, other threads open no new session."""
        with self._first:
            self._owner = threading.get_ident()
            self._clear.clear()
            try:
                yield
            finally:
                self._owner = None
                self._clear.set()

    @contextmanager
    def turn(self) -> Iterator[None]:
        """A session's turn: waits while another thread goes first, unless this thread already holds a session."""
        depth = getattr(self._depth, "n", 0)
        if not depth and not self._clear.is_set() and self._owner != threading.get_ident() and not _on_loop():
            self._clear.wait(self.MAX_WAIT_S)
        self._depth.n = depth + 1
        try:
            yield
        finally:
            self._depth.n = depth


def _on_loop() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


#: Connections a process keeps to PostgreSQL, and the most it opens: one for each of the server's worker threads
#: (`nanum.server.app.WORKER_THREADS`), the scheduling tick, its leadership lock and the bus's listener, with room
#: to spare.
POOL_SIZE, POOL_MAX = 10, 20


def _make_engine(url: str, **engine_args: Any) -> Engine:
    parsed = make_url(url)
    if parsed.get_backend_name() != "sqlite":
        engine_args.setdefault("pool_size", POOL_SIZE)
        engine_args.setdefault("max_overflow", POOL_MAX - POOL_SIZE)
        engine = create_engine(url, **engine_args)
        if not engine_args.get("pool_pre_ping"):
            _ping_when_idle(engine)
        return engine
    if parsed.database and parsed.database != ":memory:":
        Path(parsed.database).parent.mkdir(parents=True, exist_ok=True)
    engine_args.setdefault("connect_args", {"timeout": 30, "check_same_thread": False})
    engine = create_engine(url, **engine_args)
    event.listen(engine, "connect", _sqlite_connect)
    event.listen(engine, "begin", _sqlite_begin)
    return engine


#: A pooled connection left unused for longer than this (seconds) is checked with a round trip before it is handed
#: out, and replaced if the database dropped it (restarted, failed over, or ended the session).
PING_IDLE_S = 1.0


def _ping_when_idle(engine: Engine) -> None:
    """Check pooled connections before use, as `pool_pre_ping` does, but only those idle for `PING_IDLE_S`: a busy
    server's connections go back and forth many times a second, and a round trip before each transaction was 6 %
    of the server's CPU at 1,000 nodes. A database restart leaves every connection idle for longer than that before
    it can be used again; one dropped sooner fails its transaction, and the pool is then renewed."""

    def checked_in(_dbapi_connection: Any, record: Any) -> None:
        record.info["idle_since"] = time.monotonic()

    def checked_out(dbapi_connection: Any, record: Any, _proxy: Any) -> None:
        since = record.info.get("idle_since")
        if since is None or time.monotonic() - since < PING_IDLE_S:
            return
        try:
            engine.dialect.do_ping(dbapi_connection)
        except engine.dialect.loaded_dbapi.Error as exc:
            raise DisconnectionError(f"a pooled connection was dropped: {exc}") from exc  # the pool connects anew

    event.listen(engine, "checkin", checked_in)
    event.listen(engine, "checkout", checked_out)


def _sqlite_connect(dbapi_connection: Any, _record: Any) -> None:
    dbapi_connection.isolation_level = None  # SQLAlchemy emits BEGIN itself (see _sqlite_begin)
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.execute("PRAGMA busy_timeout=30000")
    cursor.close()


def _sqlite_begin(conn: Any) -> None:
    conn.exec_driver_sql("BEGIN IMMEDIATE" if conn.get_execution_options().get("nanum_write") else "BEGIN")
