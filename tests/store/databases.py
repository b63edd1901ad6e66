"""Test databases: a migrated SQLite file per test, and a fresh PostgreSQL schema per test run.

`database` is parametrised over both backends. PostgreSQL runs in database `test` on 127.0.0.1:5432 (user
postgres; override with NANUM_TEST_PG); each run gets its own schema, dropped at the end, and each test starts
from empty tables. The PostgreSQL half is skipped, with a message saying so, only when the server is unreachable.
"""

from __future__ import annotations

import os
import secrets
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.exc import OperationalError

from nanum.store import Base, Database, upgrade

PG_URL = os.environ.get("NANUM_TEST_PG", "postgresql+psycopg://postgres@127.0.0.1:5432/test")
BACKENDS = ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]


def pg_schema_database(schema: str) -> Database:
    return Database(PG_URL, connect_args={"options": f"-csearch_path={schema}"}, pool_size=5, max_overflow=10)


def create_pg_schema() -> str:
    """A new empty schema in the test database; skips the test when PostgreSQL is unreachable."""
    schema = f"nanum_test_{os.getpid()}_{secrets.token_hex(4)}"
    engine = create_engine(PG_URL)
    try:
        with engine.begin() as conn:
            conn.execute(text(f'CREATE SCHEMA "{schema}"'))
    except OperationalError as exc:
        pytest.skip(f"PostgreSQL is not reachable at {PG_URL} ({type(exc).__name__}); start it to run this half")
    finally:
        engine.dispose()
    return schema


def pg_schema_url(schema: str) -> str:
    """A database URL (as `nanum server --db` takes) whose connections use `schema`."""
    sep = "&" if "?" in PG_URL else "?"
    return f"{PG_URL}{sep}options=-csearch_path%3D{schema}"


def drop_pg_schema(schema: str) -> None:
    engine = create_engine(PG_URL)
    with engine.begin() as conn:
        conn.execute(text(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE'))
    engine.dispose()


@pytest.fixture(scope="session")
def _sqlite_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("db") / "template.db"
    db = Database(f"sqlite:///{path}")
    upgrade(db)
    db.dispose()
    return path


@contextmanager
def fresh_pg_database() -> Iterator[Database]:
    """A migrated database in a new PostgreSQL schema of its own, dropped afterwards."""
    schema = create_pg_schema()
    db = pg_schema_database(schema)
    try:
        upgrade(db)
        yield db
    finally:
        db.dispose()
        drop_pg_schema(schema)


@pytest.fixture(scope="session")
def _pg_database() -> Iterator[Database]:
    with fresh_pg_database() as db:
        yield db


def _truncate(db: Database) -> None:
    names = ", ".join(t.name for t in Base.metadata.sorted_tables)
    with db.engine.begin() as conn:
        conn.execute(text(f"TRUNCATE {names} RESTART IDENTITY CASCADE"))


@pytest.fixture(params=BACKENDS)
def database(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Database]:
    """An empty, migrated database: SQLite or PostgreSQL."""
    if request.param == "sqlite":
        path = tmp_path / "nanum.db"
        shutil.copy(request.getfixturevalue("_sqlite_template"), path)
        db = Database(f"sqlite:///{path}")
        yield db
        db.dispose()
    else:
        db = request.getfixturevalue("_pg_database")
        _truncate(db)
        yield db
