"""Transactions as the server relies on them, on SQLite and PostgreSQL: a failure inside a savepoint undoes exactly
the savepoint's writes and the rest of the transaction commits; jobs that need no GPU share a node."""

from __future__ import annotations

import pytest
from sqlalchemy import select
from sqlalchemy.exc import IntegrityError

from nanum.store import AllocationRow, Database, EventRow, JobRow
from tests.store.test_schema import _seed


def test_a_failure_inside_a_savepoint_leaves_no_partial_write(database: Database) -> None:
    node, first, second, _ = _seed(database)
    with database.write() as s:
        s.add(AllocationRow(job_id=first, node_id=node, gpu_index=0))
    with database.write() as s:
        s.connection().execute(EventRow.__table__.insert(), {"job_id": second, "time": 1.0, "kind": "before"})
        with pytest.raises(IntegrityError), s.begin_nested():
            conn = s.connection()
            conn.execute(JobRow.__table__.update().where(JobRow.id == second).values(state="cancelled"))
            conn.execute(AllocationRow.__table__.insert(), {"job_id": second, "node_id": node, "gpu_index": 0})
        s.connection().execute(EventRow.__table__.insert(), {"job_id": second, "time": 2.0, "kind": "after"})
    with database.read() as s:
        assert s.scalar(select(JobRow.state).where(JobRow.id == second)) == "running"
        assert s.scalars(select(AllocationRow.job_id)).all() == [first]
        assert s.scalars(select(EventRow.kind).order_by(EventRow.id)).all() == ["before", "after"]


def test_jobs_needing_no_gpu_share_a_node_without_holding_a_gpu(database: Database) -> None:
    node, first, second, _ = _seed(database)
    with database.write() as s:
        s.add_all([AllocationRow(job_id=j, node_id=node, gpu_index=None) for j in (first, second)])
        s.add(AllocationRow(job_id=second, node_id=node, gpu_index=0))
    with database.read() as s:
        rows = s.execute(select(AllocationRow.job_id, AllocationRow.gpu_index).order_by(AllocationRow.id)).all()
        assert [tuple(r) for r in rows] == [(first, None), (second, None), (second, 0)]
