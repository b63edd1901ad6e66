"""Planner statistics of a young PostgreSQL database, kept current while its tables grow.

PostgreSQL plans each statement from statistics that autovacuum gathers at most once a minute, and only once a
table has grown by a tenth since. A new database that takes its first sweep of thousands of jobs within a minute
is planned as if its tables were empty: at 1,000 nodes the join of a node's GPUs to their jobs read every job
instead of the node's few, and a new job's burst sorted every job of the last ten seconds. So the server that
schedules analyzes the tables that grow with the jobs (`TABLES`) whenever the jobs table has doubled since it last
looked (by at least `MIN_GROWTH` jobs): a few times in a database's first hours, never once it is large, where
autovacuum keeps up. SQLite plans without such statistics: nothing to do there.
"""

from __future__ import annotations

import logging
import time

from sqlalchemy import text

from nanum.store.db import Database

log = logging.getLogger("nanum.server")

#: The tables whose size follows the number of jobs.
TABLES = ("jobs", "allocations", "events", "segments")
#: The fewest new jobs worth an ANALYZE.
MIN_GROWTH = 500


class PlannerStatistics:
    """Analyzes `TABLES` of `db` when the jobs table has doubled since the last look (`refresh`)."""

    def __init__(self, db: Database) -> None:
        self.db = db
        #: the newest job id when the statistics were last refreshed (or first looked at); None: not yet looked
        self.basis: int | None = None

    def refresh(self) -> bool:
        """Analyze the tables if the jobs table has doubled since the last refresh; True if it did. The first
        call only notes the table's size: a database that is already large was analyzed by autovacuum."""
        if not self.db.is_postgres:
            return False
        with self.db.engine.connect() as conn:
            newest = int(conn.execute(text("SELECT coalesce(max(id), 0) FROM jobs")).scalar() or 0)
            if self.basis is None or newest < self.basis:  # first look, or a database emptied since
                self.basis = newest
                return False
            if newest < max(2 * self.basis, self.basis + MIN_GROWTH):
                return False
            began = time.monotonic()
            conn.execute(text(f"ANALYZE {', '.join(TABLES)}"))
            conn.commit()
        log.info("analyzed the job tables for PostgreSQL's planner (%d jobs, was %d) in %.0f ms", newest,
                 self.basis, (time.monotonic() - began) * 1000)
        self.basis = newest
        return True
