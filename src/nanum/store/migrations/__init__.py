"""Alembic migrations of the nanum schema, shipped inside the package (see `nanum.store.migrate`)."""
