"""`Incremental`: when a cycle is due, and what a driver that rebases on whole snapshots (the server) learns."""

from __future__ import annotations

from nanum.core import Decisions, Incremental, NodeState, Placement, Policy, Start
from tests.core.builders import job, lab, node, nodes, running, snap


def test_a_cycle_is_due_only_when_a_pending_job_could_act() -> None:
    cluster = nodes(1, 4)
    core = Incremental(Policy.parse("fifo+backfill", lend=True), None, cluster, {"a": lab("a")})
    held = running(job(1, 4, lab="a"), {"n0": (0, 1, 2, 3)})
    core.observe(arrived=(held.job,), started=(held,))
    assert core.due(10.0) is False  # changed, but nothing is pending
    core.observe(arrived=(job(2, 2, lab="a"),))
    assert core.due(10.0) is False  # pending, but 0 GPUs are free and no one borrows
    core.observe(stopped=(held.job.id,))
    assert core.due(20.0) is True
    assert [j.id for j in core.pending_shown()] == [2]


def test_an_owner_under_its_guarantee_is_due_while_others_borrow() -> None:
    cluster = (node("n0", 4, owner="a"),)
    labs = {"a": lab("a", guaranteed=4), "b": lab("b", guaranteed=0)}
    core = Incremental(Policy.parse("fifo+backfill", lend=True), None, cluster, labs)
    borrower = running(job(1, 4, lab="b"), {"n0": (0, 1, 2, 3)}, borrowing=True)
    core.observe(arrived=(borrower.job, job(2, 1, lab="a")), started=(borrower,))
    assert core.due(5.0) is True  # nothing is free, but lab a may reclaim


def test_sync_counts_free_gpus_of_up_nodes_after_the_cycle_starts() -> None:
    cluster = (node("n0", 4), node("n1", 4, state=NodeState.DOWN))
    core = Incremental(Policy.parse("fifo", lend=True), None, (), {}, explain=True)
    waiting = job(2, 3)
    snapshot = snap(cluster, pending=(waiting,), running=(running(job(1, 1), {"n0": (0,)}),))
    core.sync(snapshot)
    core.applied(snapshot, Decisions((Start(job_id=waiting.id, placements=(Placement("n0", (1, 2, 3)),)),), (), ()))
    assert core.free_gpus() == 0 and not core.pending and len(core.running) == 2
    core.sync(snapshot)  # the start did not happen after all: the snapshot still has it pending
    assert core.free_gpus() == 3 and list(core.pending) == [2]


def test_sync_observes_only_what_changed() -> None:
    cluster = nodes(2, 4)
    core = Incremental(Policy.parse("fifo+backfill", lend=True), None, (), {"a": lab("a")}, explain=True)
    held, other = running(job(1, 4, lab="a"), {"n0": (0, 1, 2, 3)}), running(job(2, 4, lab="a"), {"n1": (0, 1, 2, 3)})
    waiting = job(3, 2, lab="a")
    core.sync(snap(cluster, pending=(waiting,), running=(held, other)))
    assert core.due(1.0) is False  # 0 GPUs free
    core.sync(snap(cluster, pending=(waiting,), running=(held, other)))  # the same objects: nothing changed
    assert core.free_gpus() == 0 and core.due(1.5) is False and core.running[held.job.id] is held
    core.sync(snap(cluster, pending=(waiting,), running=(held,)))  # job 2 ended
    assert core.free_gpus() == 4 and core.due(2.0) is True
    core.sync(snap(cluster, pending=(), running=(held,)))  # job 3 was cancelled
    assert core.pending == {} and core.due(3.0) is False
