"""Upgrading repairs jobs an older nanum left `running` without holding a GPU or node (a `--gpus 0` job): no agent
ever ran them, so nothing else could end them."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import MetaData, Table, func, select

from nanum.store import Database, JobRow, upgrade
from tests.store.test_schema import _seed


def test_upgrading_cancels_or_requeues_jobs_stuck_running_without_a_node(tmp_path: Path) -> None:
    db = Database(f"sqlite:///{tmp_path / 'old.db'}")
    upgrade(db, "0008_node_inventory")
    node, stuck, cancelled, _ = _seed(db)
    with db.write() as s:  # the tables as they were at 0008, not as the models are now
        conn = s.connection()
        jobs, allocations = (Table(name, MetaData(), autoload_with=conn) for name in ("jobs", "allocations"))
        conn.execute(jobs.update().where(jobs.c.id == cancelled).values(stop="cancel"))
        columns = [c for c in jobs.c if c.key != "id"]
        conn.execute(jobs.insert().from_select([c.key for c in columns],
                                               select(*columns).where(jobs.c.id == stuck)))
        healthy_id = conn.execute(select(func.max(jobs.c.id))).scalar_one()
        conn.execute(allocations.insert().values(job_id=healthy_id, node_id=node, gpu_index=0))
    upgrade(db)
    with db.read() as s:
        states = {job_id: state for job_id, state in s.execute(select(JobRow.id, JobRow.state))}
        assert states == {stuck: "pending", cancelled: "cancelled", healthy_id: "running"}
        assert s.get_one(JobRow, stuck).reason_code == "queued"
    db.dispose()
