"""Migrations create exactly the schema the models describe, on SQLite and PostgreSQL, and run again harmlessly."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import inspect

from nanum.store import Base, Database, upgrade
from nanum.store.migrate import current_revision, downgrade, head_revision
from tests.store.databases import BACKENDS, create_pg_schema, drop_pg_schema, pg_schema_database


@pytest.fixture(params=BACKENDS)
def empty(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Database]:
    if request.param == "sqlite":
        db = Database(f"sqlite:///{tmp_path / 'fresh.db'}")
        yield db
        db.dispose()
        return
    schema = create_pg_schema()
    db = pg_schema_database(schema)
    try:
        yield db
    finally:
        db.dispose()
        drop_pg_schema(schema)


def test_upgrade_creates_the_schema_the_models_describe(empty: Database) -> None:
    assert current_revision(empty) is None
    upgrade(empty)
    assert current_revision(empty) == head_revision(empty)
    with empty.engine.connect() as conn:
        assert compare_metadata(MigrationContext.configure(conn), Base.metadata) == []
    tables = set(inspect(empty.engine).get_table_names())
    assert {"users", "labs", "memberships", "nodes", "jobs", "allocations", "events", "usage"} <= tables


def test_upgrade_twice_is_harmless_and_downgrade_removes_everything(empty: Database) -> None:
    upgrade(empty)
    upgrade(empty)
    downgrade(empty, "base")
    assert current_revision(empty) is None
    assert "jobs" not in inspect(empty.engine).get_table_names()
    upgrade(empty)
    assert "jobs" in inspect(empty.engine).get_table_names()


def test_sqlite_runs_in_wal_mode(tmp_path: Path) -> None:
    db = Database(f"sqlite:///{tmp_path / 'wal.db'}")
    upgrade(db)
    with db.engine.connect() as conn:
        assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
        assert conn.exec_driver_sql("PRAGMA synchronous").scalar() == 1  # NORMAL
        assert conn.exec_driver_sql("PRAGMA foreign_keys").scalar() == 1
    db.dispose()
