"""PostgreSQL connections the database dropped while they sat in the pool (a restart, a failover, an ended session)
are replaced before use: the next transaction works. Connections in steady use are not checked before each
transaction (`PING_IDLE_S`)."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from sqlalchemy import create_engine, text

from nanum.store import Database
from nanum.store import db as store_db
from tests.store.databases import PG_URL, create_pg_schema, drop_pg_schema, pg_schema_database

pytestmark = pytest.mark.postgres


@pytest.fixture
def pg() -> Iterator[Database]:
    schema = create_pg_schema()
    database = pg_schema_database(schema)
    try:
        yield database
    finally:
        database.dispose()
        drop_pg_schema(schema)


def _backend(database: Database) -> int:
    with database.read() as s:
        return int(s.execute(text("SELECT pg_backend_pid()")).scalar_one())


def _end_session(pid: int) -> None:
    engine = create_engine(PG_URL)
    try:
        with engine.begin() as conn:
            assert conn.execute(text("SELECT pg_terminate_backend(:pid)"), {"pid": pid}).scalar_one()
    finally:
        engine.dispose()


def test_a_connection_dropped_while_idle_in_the_pool_is_replaced(pg: Database,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(store_db, "PING_IDLE_S", 0.2)
    first = _backend(pg)
    _end_session(first)
    time.sleep(0.3)
    second = _backend(pg)  # no error: the dropped connection was found out before use and replaced
    assert second != first
    with pg.write() as s:
        assert s.execute(text("SELECT 1")).scalar_one() == 1


def test_a_connection_in_steady_use_is_not_checked_before_each_transaction(pg: Database) -> None:
    pings: list[object] = []
    original = pg.engine.dialect.do_ping

    def counting(dbapi_connection: object) -> bool:
        pings.append(dbapi_connection)
        return bool(original(dbapi_connection))

    pg.engine.dialect.do_ping = counting  # type: ignore[method-assign]
    _backend(pg)  # a connection, then back to the pool
    for _ in range(20):
        _backend(pg)
    assert pings == []
    time.sleep(store_db.PING_IDLE_S + 0.1)
    _backend(pg)
    assert len(pings) == 1  # idle for longer: checked once
