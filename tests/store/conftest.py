from tests.store.databases import _pg_database, _sqlite_template, database

__all__ = ["_pg_database", "_sqlite_template", "database"]
