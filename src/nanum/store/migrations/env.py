"""Alembic environment: runs migrations on the connection `nanum.store.migrate` passes in (or on the URL)."""

from __future__ import annotations

from alembic import context
from sqlalchemy import Connection, create_engine

from nanum.store.models import Base

config = context.config


def run(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=Base.metadata,
        render_as_batch=True,  # SQLite alters tables by copying them
        compare_type=True,
    )
    with context.begin_transaction():
        context.run_migrations()


connection = config.attributes.get("connection")
if connection is not None:
    run(connection)
else:
    engine = create_engine(config.get_main_option("sqlalchemy.url") or "")
    with engine.begin() as conn:
        run(conn)
    engine.dispose()
