"""Job revisions: the database stamps every job row it inserts or updates, so a reader can ask for the rows
written since it last looked (`JobRow.rev >= mark`) instead of reading them all.

- SQLite has one writer at a time: a counter in `job_revs` goes up by one for each row written, and the row gets
  the new value. A reader's next mark is the counter as its transaction sees it, plus one.
- PostgreSQL runs writers side by side, and a counter taken early may commit late. There the row gets the id of
  the transaction that wrote it (`pg_current_xact_id()`: the top-level one, also inside a savepoint). Every
  transaction with an id below a reader's snapshot's `xmin` had ended when the snapshot was taken, so its writes
  are in it; the next mark is that `xmin`. Rows written by transactions the snapshot already saw between `xmin`
  and the newest are read once more, which is harmless.

A job's allocations (the GPUs it holds) count as part of its row: inserting or deleting one stamps the job's row
too, so the rows written since a mark also name every job whose GPUs changed, and a reader reads allocations only
for those (`nanum.server.jobrows`).

Triggers do the stamping, so no write path of nanum can forget it. A migration that rebuilds `jobs` or
`allocations` on SQLite (batch mode: copy, drop, rename) drops their triggers with the old table and must create
them again (`create_job_triggers`, `create_allocation_triggers`).
"""

from __future__ import annotations

from sqlalchemy import Connection, text

SQLITE = (
    "CREATE TABLE IF NOT EXISTS job_revs (n BIGINT NOT NULL)",
    "INSERT INTO job_revs (n) SELECT coalesce(max(rev), 0) FROM jobs WHERE NOT EXISTS (SELECT 1 FROM job_revs)",
    # recursive triggers are off: the UPDATE in a trigger's body does not fire it again
    """CREATE TRIGGER IF NOT EXISTS jobs_rev_insert AFTER INSERT ON jobs BEGIN
        UPDATE job_revs SET n = n + 1;
        UPDATE jobs SET rev = (SELECT n FROM job_revs) WHERE id = NEW.id;
    END""",
    """CREATE TRIGGER IF NOT EXISTS jobs_rev_update AFTER UPDATE ON jobs BEGIN
        UPDATE job_revs SET n = n + 1;
        UPDATE jobs SET rev = (SELECT n FROM job_revs) WHERE id = NEW.id;
    END""",
)
#: An allocation inserted or deleted stamps its job's row (through the triggers above). On SQLite a trigger's
#: UPDATE fires the other table's triggers; only a trigger firing itself is off.
ALLOCATIONS_SQLITE = (
    """CREATE TRIGGER IF NOT EXISTS allocations_rev_insert AFTER INSERT ON allocations BEGIN
        UPDATE jobs SET rev = rev WHERE id = NEW.job_id;
    END""",
    """CREATE TRIGGER IF NOT EXISTS allocations_rev_delete AFTER DELETE ON allocations BEGIN
        UPDATE jobs SET rev = rev WHERE id = OLD.job_id;
    END""",
)
POSTGRES = (
    """CREATE OR REPLACE FUNCTION nanum_job_rev() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        NEW.rev := pg_current_xact_id()::text::bigint;
        RETURN NEW;
    END $$""",
    "DROP TRIGGER IF EXISTS jobs_rev ON jobs",
    "CREATE TRIGGER jobs_rev BEFORE INSERT OR UPDATE ON jobs FOR EACH ROW EXECUTE FUNCTION nanum_job_rev()",
)
_ALLOCATION_TRIGGERS = ("allocations_rev_insert", "allocations_rev_delete")
#: Once per statement, over the rows it inserted or deleted: a start's or an exit's write already holds its jobs'
#: rows, so stamping them takes no lock the statement's transaction does not have.
ALLOCATIONS_POSTGRES = (
    """CREATE OR REPLACE FUNCTION nanum_allocations_added() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        UPDATE jobs SET rev = 0 WHERE id IN (SELECT job_id FROM added);
        RETURN NULL;
    END $$""",
    """CREATE OR REPLACE FUNCTION nanum_allocations_gone() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        UPDATE jobs SET rev = 0 WHERE id IN (SELECT job_id FROM gone);
        RETURN NULL;
    END $$""",
    "DROP TRIGGER IF EXISTS allocations_rev_insert ON allocations",
    "DROP TRIGGER IF EXISTS allocations_rev_delete ON allocations",
    "CREATE TRIGGER allocations_rev_insert AFTER INSERT ON allocations REFERENCING NEW TABLE AS added "
    "FOR EACH STATEMENT EXECUTE FUNCTION nanum_allocations_added()",
    "CREATE TRIGGER allocations_rev_delete AFTER DELETE ON allocations REFERENCING OLD TABLE AS gone "
    "FOR EACH STATEMENT EXECUTE FUNCTION nanum_allocations_gone()",
)


def create_job_triggers(conn: Connection) -> None:
    for statement in SQLITE if conn.dialect.name == "sqlite" else POSTGRES:
        conn.execute(text(statement))


def create_allocation_triggers(conn: Connection) -> None:
    for statement in ALLOCATIONS_SQLITE if conn.dialect.name == "sqlite" else ALLOCATIONS_POSTGRES:
        conn.execute(text(statement))


def drop_job_triggers(conn: Connection) -> None:
    if conn.dialect.name == "sqlite":
        for statement in ("DROP TRIGGER IF EXISTS jobs_rev_insert", "DROP TRIGGER IF EXISTS jobs_rev_update",
                          "DROP TABLE IF EXISTS job_revs"):
            conn.execute(text(statement))
    else:
        conn.execute(text("DROP TRIGGER IF EXISTS jobs_rev ON jobs"))
        conn.execute(text("DROP FUNCTION IF EXISTS nanum_job_rev()"))


def drop_allocation_triggers(conn: Connection) -> None:
    on = "" if conn.dialect.name == "sqlite" else " ON allocations"
    for name in _ALLOCATION_TRIGGERS:
        conn.execute(text(f"DROP TRIGGER IF EXISTS {name}{on}"))
    if conn.dialect.name != "sqlite":
        for function in ("nanum_allocations_added", "nanum_allocations_gone"):
            conn.execute(text(f"DROP FUNCTION IF EXISTS {function}()"))


def mark(conn: Connection) -> int:
    """Where the next read of this reader starts: every row written after this transaction's snapshot has a
    `rev` at least this. Call it first in the transaction, before the rows are read (see the module docstring)."""
    if conn.dialect.name == "sqlite":
        return int(conn.execute(_SQLITE_MARK).scalar_one()) + 1
    return int(conn.execute(_POSTGRES_MARK).scalar_one())


#: Built once: every tick asks (building a statement costs about as much as running it).
_SQLITE_MARK = text("SELECT n FROM job_revs")
_POSTGRES_MARK = text("SELECT pg_snapshot_xmin(pg_current_snapshot())::text::bigint")
