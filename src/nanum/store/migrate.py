"""Schema migrations: `upgrade(db)` brings a database to the newest revision shipped in `nanum.store.migrations`.

`nanum up` and `nanum server` call it on every start; it is a no-op when the schema is current.
"""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory

from nanum.store.db import Database

MIGRATIONS = Path(__file__).parent / "migrations"


def alembic_config(db: Database) -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    cfg.set_main_option("sqlalchemy.url", db.url.replace("%", "%%"))
    return cfg


def upgrade(db: Database, revision: str = "head") -> None:
    """Run every migration up to `revision` in one transaction.

    On SQLite a batch migration rebuilds a table (copy, drop, rename); with foreign keys enforced, dropping the old
    `jobs` would cascade to every allocation and event. So foreign keys are off while migrations run (SQLite
    ignores that pragma inside a transaction: it is set on the raw connection first) and on again after."""
    cfg = alembic_config(db)
    with db.engine.connect() as conn:
        raw = conn.connection.dbapi_connection if db.is_sqlite else None
        if raw is not None:
            raw.execute("PRAGMA foreign_keys=OFF")
        try:
            with conn.begin():
                cfg.attributes["connection"] = conn
                command.upgrade(cfg, revision)
        finally:
            if raw is not None:
                raw.execute("PRAGMA foreign_keys=ON")


def downgrade(db: Database, revision: str) -> None:
    cfg = alembic_config(db)
    with db.engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.downgrade(cfg, revision)


def current_revision(db: Database) -> str | None:
    with db.engine.connect() as conn:
        return MigrationContext.configure(conn).get_current_revision()


def head_revision(db: Database) -> str | None:
    return ScriptDirectory.from_config(alembic_config(db)).get_current_head()
