"""The planner's statistics of a young PostgreSQL database (`nanum.store.planner`): analyzed each time the jobs
table has doubled, by at least `MIN_GROWTH` jobs, so that PostgreSQL stops planning a busy new database as if its
tables were empty; never on SQLite."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import text

from nanum.store import Database, upgrade
from nanum.store.planner import MIN_GROWTH, TABLES, PlannerStatistics
from tests.store.databases import fresh_pg_database
from tests.store.test_schema import _seed


@pytest.fixture
def young() -> Iterator[Database]:
    """A new PostgreSQL schema of its own: its tables were never analyzed."""
    with fresh_pg_database() as database:
        yield database


def _add_jobs(db: Database, like: int, count: int) -> None:
    """`count` more jobs, copies of job `like`."""
    columns = ("name, user_id, lab_id, command, workdir, env, gpus, nodes, cpus, priority, kind, preemptible, state, "
               "borrowing, over_reservation, allocation, submit_time, runs, attained_gpu_seconds")
    with db.write() as s:
        s.execute(text(f"INSERT INTO jobs ({columns}) SELECT {columns} FROM jobs, generate_series(1, :n) "
                       "WHERE id = :like"), {"n": count, "like": like})


def _planned_rows(db: Database) -> dict[str, float]:
    """How many rows PostgreSQL's planner thinks each table has (-1: never analyzed)."""
    with db.read() as s:
        found = s.execute(text("SELECT relname, reltuples FROM pg_class WHERE relname = ANY(:names) "
                               "AND relnamespace = current_schema()::regnamespace"), {"names": list(TABLES)})
        return {name: float(rows) for name, rows in found}


@pytest.mark.postgres
def test_the_job_tables_are_analyzed_each_time_the_jobs_table_doubles(young: Database) -> None:
    _, first, _, _ = _seed(young)  # jobs 1 and 2
    statistics = PlannerStatistics(young)
    assert not statistics.refresh()  # the first look notes the size
    _add_jobs(young, first, MIN_GROWTH - 1)  # 501 jobs: not MIN_GROWTH more than 2
    assert not statistics.refresh()
    assert _planned_rows(young)["jobs"] <= 0
    _add_jobs(young, first, 1)
    assert statistics.refresh()
    planned = _planned_rows(young)
    assert planned["jobs"] == 2 + MIN_GROWTH
    assert set(planned) == set(TABLES) and all(rows >= 0 for rows in planned.values())  # every one analyzed
    _add_jobs(young, first, 2 + MIN_GROWTH - 1)  # not yet doubled
    assert not statistics.refresh()
    assert _planned_rows(young)["jobs"] == 2 + MIN_GROWTH
    _add_jobs(young, first, 1)
    assert statistics.refresh()
    assert _planned_rows(young)["jobs"] == 2 * (2 + MIN_GROWTH)


@pytest.mark.postgres
def test_a_server_started_on_a_large_database_leaves_it_to_autovacuum(young: Database) -> None:
    _, first, _, _ = _seed(young)
    _add_jobs(young, first, 3000)
    statistics = PlannerStatistics(young)
    assert not statistics.refresh()
    _add_jobs(young, first, MIN_GROWTH)  # grown, but far from doubled
    assert not statistics.refresh()
    assert _planned_rows(young)["jobs"] <= 0


def test_sqlite_has_no_such_statistics(tmp_path: Path) -> None:
    db = Database(f"sqlite:///{tmp_path / 'nanum.db'}")
    upgrade(db)
    _seed(db)
    statistics = PlannerStatistics(db)
    assert not statistics.refresh()
    assert statistics.basis is None
