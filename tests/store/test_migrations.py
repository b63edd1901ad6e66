"""Migrations create exactly the schema the models describe, on SQLite and PostgreSQL, run again harmlessly, and
bring a database that has lived since the first schema to the newest one with its rows intact and working."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import Connection, MetaData, inspect

from nanum.protocol import JobLaunch
from nanum.server.app import create_app
from nanum.server.callers import hash_token
from nanum.server.context import ServerContext
from nanum.server.settings import ServerSettings
from nanum.store import Base, Database, upgrade
from nanum.store.migrate import current_revision, downgrade, head_revision
from tests.server.asgiclient import serve
from tests.server.conftest import settle
from tests.server.fakeagent import FakeAgent
from tests.store.databases import BACKENDS, create_pg_schema, drop_pg_schema, pg_schema_database


@pytest.fixture(params=BACKENDS)
def empty(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Database]:
    if request.param == "sqlite":
        db = Database(f"sqlite:///{tmp_path / 'fresh.db'}")
        yield db
        db.dispose()
        return
    schema = create_pg_schema()
    db = pg_schema_database(schema)
    try:
        yield db
    finally:
        db.dispose()
        drop_pg_schema(schema)


def _schema_differences(conn: Connection) -> list[Any]:
    """What the database has that the models do not describe, or lacks. SQLite's job revision counter belongs to
    `nanum.store.revs` (with its triggers), not to the models."""
    diffs = compare_metadata(MigrationContext.configure(conn), Base.metadata)
    return [d for d in diffs if not (d[0] == "remove_table" and d[1].name == "job_revs")]


def test_upgrade_creates_the_schema_the_models_describe(empty: Database) -> None:
    assert current_revision(empty) is None
    upgrade(empty)
    assert current_revision(empty) == head_revision(empty)
    with empty.engine.connect() as conn:
        assert _schema_differences(conn) == []
    tables = set(inspect(empty.engine).get_table_names())
    assert {"users", "labs", "memberships", "nodes", "jobs", "allocations", "events", "usage"} <= tables


def test_upgrade_twice_is_harmless_and_downgrade_removes_everything(empty: Database) -> None:
    upgrade(empty)
    upgrade(empty)
    downgrade(empty, "base")
    assert current_revision(empty) is None
    assert "jobs" not in inspect(empty.engine).get_table_names()
    upgrade(empty)
    assert "jobs" in inspect(empty.engine).get_table_names()


def test_sqlite_runs_in_wal_mode(tmp_path: Path) -> None:
    db = Database(f"sqlite:///{tmp_path / 'wal.db'}")
    upgrade(db)
    with db.engine.connect() as conn:
        assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
        assert conn.exec_driver_sql("PRAGMA synchronous").scalar() == 1  # NORMAL
        assert conn.exec_driver_sql("PRAGMA foreign_keys").scalar() == 1
    db.dispose()


# -- upgrading a database that has lived since the first schema -------------------------------------------------

FIRST = "0001"
NOW = time.time()  # the node was last heard from just now: its running job is still its own
ALICE_TOKEN, NODE_TOKEN = "alice-token-from-0001", "node-token-from-0001"


def _populate_first_schema(db: Database) -> None:
    """Rows as a server at the first migration wrote them: a lab, an admin and a member, a node, a finished job
    with its events, a running job holding a GPU, a pending job, and a month of usage."""
    rows = {
        "labs": [dict(id=1, name="vision", guaranteed_gpus=2, max_gpus=4, max_running_jobs=None,
                      monthly_gpu_hours=100.0, weight=1.0, decayed_usage=3600.0, decayed_at=NOW, created=NOW - 86400)],
        "users": [dict(id=1, name="root", token_hash=hash_token("admin-token-from-0001"), admin=True, unix_user="root",
                       default_lab_id=1, max_gpus=None, max_running_jobs=None, monthly_gpu_hours=None,
                       decayed_usage=0.0, decayed_at=NOW, created=NOW - 86400),
                  dict(id=2, name="alice", token_hash=hash_token(ALICE_TOKEN), admin=False, unix_user="alice",
                       default_lab_id=1, max_gpus=None, max_running_jobs=None, monthly_gpu_hours=None,
                       decayed_usage=3600.0, decayed_at=NOW, created=NOW - 86400)],
        "memberships": [dict(user_id=1, lab_id=1), dict(user_id=2, lab_id=1)],
        "nodes": [dict(id=1, name="gpu-01", token_hash=hash_token(NODE_TOKEN), hostname="gpu-01",
                       inventory={"hostname": "gpu-01.lan", "cpus": 32, "memory_mb": 256_000, "simulated": True,
                                  "unix_user": "nanum", "gpus": [_gpu(i) for i in range(4)]},
                       state="up", last_seen=NOW, desired_version=7, created=NOW - 86400)],
        "jobs": [_job(1, "completed", start=NOW - 7200, end=NOW - 3600, exit_code=0),
                 _job(2, "running", start=NOW - 600, allocation=[{"node": "gpu-01", "gpus": [0]}]),
                 _job(3, "pending")],
        "allocations": [dict(id=1, job_id=2, node_id=1, gpu_index=0)],
        "events": [dict(id=1, job_id=1, time=NOW - 7200, kind="started", message="on gpu-01"),
                   dict(id=2, job_id=1, time=NOW - 3600, kind="completed", message="exit code 0")],
        "usage": [dict(month="2026-11", kind="lab", name="vision", gpu_seconds=3600.0)],
    }
    meta = MetaData()
    meta.reflect(db.engine)
    with db.engine.begin() as conn:
        for table, values in rows.items():  # ids left to the database, as a server writes them: 1, 2, ...
            for row in values:
                conn.execute(meta.tables[table].insert(), {k: v for k, v in row.items() if k != "id"})


def _gpu(index: int) -> dict[str, object]:
    return {"index": index, "uuid": f"GPU-gpu-01-{index}", "model": "A100", "memory_mb": 81920}


def _job(job_id: int, state: str, *, start: float | None = None, end: float | None = None,
         exit_code: int | None = None, allocation: list[dict[str, object]] | None = None) -> dict[str, object]:
    return dict(id=job_id, name=f"train-{job_id}", user_id=2, lab_id=1, command=["python", "train.py"],
                workdir="/home/alice", env={"SEED": str(job_id)}, gpus=1, nodes=1, gpu_model=None, cpus=4,
                memory_mb=8192, time_limit_s=86400.0, priority=0, kind="batch", preemptible=True, state=state,
                reason=None, reason_code=None, estimated_start=None, borrowing=False, stop=None,
                allocation=allocation or [], lost_from=None, charged_until=start, submit_time=NOW - 9000,
                start_time=start, end_time=end, exit_code=exit_code, pid=4242 if state == "running" else None,
                runs=0 if state == "pending" else 1, attained_gpu_seconds=3600.0 if end else 0.0)


def test_a_database_from_the_first_schema_upgrades_to_head_keeping_its_rows_and_works(
    empty: Database, tmp_path: Path
) -> None:
    upgrade(empty, FIRST)
    _populate_first_schema(empty)
    upgrade(empty)
    assert current_revision(empty) == head_revision(empty)
    with empty.engine.connect() as conn:
        assert _schema_differences(conn) == []
        # On SQLite a batch migration rebuilds `jobs`: that must not cascade to the rows that point at it.
        assert conn.exec_driver_sql("SELECT job_id, gpu_index FROM allocations").all() == [(2, 0)]
        assert conn.exec_driver_sql("SELECT kind FROM events ORDER BY id").scalars().all() == ["started", "completed"]
    ctx = ServerContext.create(ServerSettings(home=tmp_path / "home"), empty)
    app = create_app(ctx, run_scheduler=False)
    with serve(app) as client:
        me = client.get("/api/v1/me", headers={"Authorization": f"Bearer {ALICE_TOKEN}"})
        assert me.status_code == 200 and me.json()["labs"] == ["vision"]
        jobs = client.get("/api/v1/jobs?all=true", headers={"Authorization": f"Bearer {ALICE_TOKEN}"}).json()
        assert [(j["id"], j["state"], j["exit_code"], j["command"], j["tier"]) for j in jobs] == [
            (1, "completed", 0, ["python", "train.py"], 0),  # jobs from before tiers are in tier 0
            (2, "running", None, ["python", "train.py"], 0),
            (3, "pending", None, ["python", "train.py"], 0),
        ]
        # The node's agent, with its old token, reports job 2 running and is told to keep it, on GPU 0.
        agent = FakeAgent(client, "gpu-01", NODE_TOKEN, gpus=4)
        agent.running[2] = JobLaunch(job_id=2, name="train-2", command=["python"], workdir="/", gpus=[0],
                                     unix_user="alice", checkpoint_dir="")
        reply = agent.beat()
        assert [(d.job_id, d.gpus, d.env) for d in reply.desired] == [(2, [0], {"SEED": "2"})]
        new = client.post("/api/v1/jobs", json={"command": ["python", "eval.py"], "workdir": "/tmp"},
                          headers={"Authorization": f"Bearer {ALICE_TOKEN}"})
        assert new.status_code == 201 and new.json()["id"] == 4
    app.state.scheduler.leadership.release()


def test_runs_charged_before_segments_were_settled_by_the_scheduler_are_not_charged_again(empty: Database) -> None:
    upgrade(empty, FIRST)
    _populate_first_schema(empty)
    upgrade(empty, "0017_tier")
    with empty.engine.begin() as conn:  # job 1's run, already in its lab's usage (3,600 GPU-seconds)
        conn.exec_driver_sql(
            "INSERT INTO segments (job_id, user_id, lab_id, gpus, start, \"end\", outcome, lost_gpu_seconds) "
            f"VALUES (1, 2, 1, 1, {NOW - 7200}, {NOW - 3600}, 'completed', 0)")
    upgrade(empty)
    assert settle(empty, 3600.0) == 0
    with empty.engine.connect() as conn:
        assert conn.exec_driver_sql("SELECT gpu_seconds FROM usage").scalars().all() == [3600.0]
