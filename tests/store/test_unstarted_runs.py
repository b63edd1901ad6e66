"""Upgrading repairs jobs an older nanum left `running` without holding a GPU or node (a `--gpus 0` job): no agent
ever ran them, so nothing else could end them."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import select

from nanum.store import AllocationRow, Database, JobRow, upgrade
from tests.store.test_schema import _seed


def test_upgrading_cancels_or_requeues_jobs_stuck_running_without_a_node(tmp_path: Path) -> None:
    db = Database(f"sqlite:///{tmp_path / 'old.db'}")
    upgrade(db, "0008_node_inventory")
    node, stuck, cancelled, _ = _seed(db)
    with db.write() as s:
        s.get_one(JobRow, cancelled).stop = "cancel"
        third = s.get_one(JobRow, stuck)
        healthy = JobRow(**{c.key: getattr(third, c.key) for c in JobRow.__table__.columns if c.key != "id"})
        s.add(healthy)
        s.flush()
        s.add(AllocationRow(job_id=healthy.id, node_id=node, gpu_index=0))
        healthy_id = healthy.id
    upgrade(db)
    with db.read() as s:
        states = {job_id: state for job_id, state in s.execute(select(JobRow.id, JobRow.state))}
        assert states == {stuck: "pending", cancelled: "cancelled", healthy_id: "running"}
        assert s.get_one(JobRow, stuck).reason_code == "queued"
    db.dispose()
