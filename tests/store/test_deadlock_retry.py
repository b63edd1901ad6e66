"""Two writers that lock the same rows in opposite orders deadlock on PostgreSQL; the one it rolls back runs
again (`retry_deadlocks`) and both changes land."""

from __future__ import annotations

import threading

import pytest
from sqlalchemy import text

from nanum.store import Database
from nanum.store.db import retry_deadlocks
from tests.store.databases import _truncate

ADD = text("UPDATE usage SET gpu_seconds = gpu_seconds + 1 WHERE name = :name")


@pytest.mark.postgres
def test_a_deadlock_victim_runs_again_and_both_writes_land(_pg_database: Database) -> None:
    db = _pg_database
    _truncate(db)
    with db.write() as s:
        for name in ("a", "b"):
            s.execute(text("INSERT INTO usage (month, kind, name, gpu_seconds) VALUES ('2026-01', 'lab', :n, 0)"),
                      {"n": name})
    both_hold_one = threading.Barrier(2, timeout=10)
    attempts: list[str] = []
    errors: list[BaseException] = []

    def writer(first: str, second: str) -> None:
        def work() -> None:
            attempts.append(first)
            with db.write() as s:
                s.execute(ADD, {"name": first})
                if attempts.count(first) == 1:
                    both_hold_one.wait()  # each holds one row and now asks for the other's
                s.execute(ADD, {"name": second})

        try:
            retry_deadlocks(work)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=pair) for pair in (("a", "b"), ("b", "a"))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert not errors, errors
    assert len(attempts) == 3  # one of the two ran twice
    with db.read() as s:
        assert dict(s.execute(text("SELECT name, gpu_seconds FROM usage")).all()) == {"a": 2.0, "b": 2.0}
