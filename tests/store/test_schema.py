"""What the database itself guarantees: no GPU held twice, unique names and tokens, cascades, usage upserts."""

from __future__ import annotations

import time

import pytest
from sqlalchemy import Connection, MetaData, Table, func, select
from sqlalchemy.exc import IntegrityError

from nanum.store import AllocationRow, Base, Database, EventRow, JobRow, UsageRow, UserRow


def _seed(db: Database) -> tuple[int, int, int, int]:
    """A lab, a user, a node and two running jobs (node id, job ids, user id). Inserted into the tables as the
    database has them, so that it also seeds a database still at an older revision (tests/store/test_*upgrade*)."""
    now = time.time()
    with db.write() as s:
        conn = s.connection()
        lab = _insert(conn, "labs", name="vision", weight=1.0, decayed_usage=0.0, decayed_at=now, created=now)
        user = _insert(conn, "users", name="alice", token_hash="h" * 64, admin=False, default_lab_id=lab,
                       decayed_usage=0.0, decayed_at=now, created=now)
        node = _insert(conn, "nodes", name="gpu-01", state="up", desired_version=0, created=now)
        jobs = [
            _insert(conn, "jobs", name=f"j{i}", user_id=user, lab_id=lab, command=["true"], workdir="/", env={},
                    gpus=1, nodes=1, cpus=1, priority=0, kind="batch", preemptible=True, state="running",
                    borrowing=False, over_reservation=False, allocation=[], submit_time=now, runs=1,
                    attained_gpu_seconds=0.0)
            for i in range(2)
        ]
        return node, jobs[0], jobs[1], user


def _insert(conn: Connection, table: str, **values: object) -> int:
    """Insert `values` that the table has (reflected, not the models: it may be an older revision); its id."""
    reflected = Table(table, MetaData(), autoload_with=conn)
    known = {k: v for k, v in values.items() if k in reflected.c}
    typed = Base.metadata.tables[table]
    row = {k: typed.c[k].type.bind_processor(conn.dialect)(v) if typed.c[k].type.bind_processor(conn.dialect)
           else v for k, v in known.items()}
    return int(conn.execute(reflected.insert().values(**row).returning(reflected.c.id)).scalar_one())


def test_a_gpu_can_never_be_held_by_two_jobs(database: Database) -> None:
    node, first, second, _ = _seed(database)
    with database.write() as s:
        s.add(AllocationRow(job_id=first, node_id=node, gpu_index=0))
    with pytest.raises(IntegrityError), database.write() as s:
        s.add(AllocationRow(job_id=second, node_id=node, gpu_index=0))
    with database.write() as s:  # another GPU of the same node is fine
        s.add(AllocationRow(job_id=second, node_id=node, gpu_index=1))
    with database.read() as s:
        assert s.scalar(select(func.count()).select_from(AllocationRow)) == 2


def test_a_freed_gpu_can_be_taken_again(database: Database) -> None:
    node, first, second, _ = _seed(database)
    with database.write() as s:
        s.add(AllocationRow(job_id=first, node_id=node, gpu_index=0))
    with database.write() as s:
        s.execute(AllocationRow.__table__.delete().where(AllocationRow.job_id == first))
        s.add(AllocationRow(job_id=second, node_id=node, gpu_index=0))
    with database.read() as s:
        assert s.scalars(select(AllocationRow.job_id)).all() == [second]


def test_user_names_and_token_hashes_are_unique(database: Database) -> None:
    _seed(database)
    now = time.time()
    with pytest.raises(IntegrityError), database.write() as s:
        s.add(UserRow(name="alice", token_hash="x" * 64, admin=False, decayed_usage=0.0, decayed_at=now, created=now))
    with pytest.raises(IntegrityError), database.write() as s:
        s.add(UserRow(name="bob", token_hash="h" * 64, admin=False, decayed_usage=0.0, decayed_at=now, created=now))


def test_deleting_a_job_removes_its_events_and_allocations(database: Database) -> None:
    node, first, _, _ = _seed(database)
    with database.write() as s:
        s.add(AllocationRow(job_id=first, node_id=node, gpu_index=3))
        s.add(EventRow(job_id=first, time=time.time(), kind="started", message=""))
    with database.write() as s:
        s.execute(JobRow.__table__.delete().where(JobRow.id == first))
    with database.read() as s:
        assert s.scalar(select(func.count()).select_from(AllocationRow)) == 0
        assert s.scalar(select(func.count()).select_from(EventRow)) == 0


def test_usage_accumulates_per_month_lab_and_user(database: Database) -> None:
    from nanum.server.services.charging import _add_usage

    for seconds in (10.0, 32.5):
        with database.write() as s:
            _add_usage(s, "2026-11", "lab", "vision", seconds)
    with database.write() as s:
        _add_usage(s, "2026-12", "lab", "vision", 1.0)
    with database.read() as s:
        rows = {(r.month, r.name): r.gpu_seconds for r in s.scalars(select(UsageRow))}
    assert rows == {("2026-11", "vision"): 42.5, ("2026-12", "vision"): 1.0}
