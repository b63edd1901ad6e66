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
    """Run every migration up to `revision` in one transaction."""
    cfg = alembic_config(db)
    with db.engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, revision)


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
