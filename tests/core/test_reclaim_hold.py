"""A reclaiming owner keeps the GPUs already free on the nodes it reclaims: borrowers cannot take them meanwhile.
An owner with no borrower to reclaim from holds nothing and preempts nobody."""

from __future__ import annotations

import pytest

from nanum.core import Code, Policy, Reason, schedule
from tests.core.builders import job, lab, node, running, snap


def test_free_gpus_on_reclaimed_nodes_are_held_for_the_owner() -> None:
    cluster = (node("a0", 4, owner="a"), node("b0", 4, owner="b"))
    own = running(job(10, 4, lab="b"), {"b0": (0, 1, 2, 3)})
    borrower = running(job(11, 3, lab="b"), {"a0": (0, 1, 2)}, borrowing=True)
    owner_job, late_borrower = job(1, 4, lab="a"), job(2, 1, lab="b")
    decisions = schedule(snap(cluster, (owner_job, late_borrower), (own, borrower),
                              labs=(lab("a", 4), lab("b", 4))), Policy(lend=True))
    assert [(p.job_id, p.for_job) for p in decisions.preemptions] == [(11, 1)]
    # Without the hold, job 2 would borrow a0's free GPU 3 and be the next victim, cycle after cycle.
    assert decisions.starts == ()


# Lab a's 4-node job 1 cannot start (a0 has 2 free GPUs) and waits first; lab a's 2-node job 2 fits now on s0 and
# s1 but waits behind it (no backfill); lab d's 4-GPU job 3 comes last. Lab b borrows 2 GPUs either on the H100
# node, which no job of lab a may use, or on s2, where stopping it would make a third node fit job 2.
@pytest.mark.parametrize(("borrowed", "lend", "started"), [
    pytest.param("h0", False, [3], id="borrower-elsewhere-partitioned"),
    pytest.param("s2", False, [3], id="borrower-on-a-node-it-could-use-partitioned"),
    pytest.param("h0", True, [], id="borrower-elsewhere-pooled"),
    pytest.param("s2", True, [], id="borrower-on-a-node-it-could-use-pooled"),
])
def test_a_gang_that_fits_behind_the_first_blocked_job_reclaims_nothing(
    borrowed: str, lend: bool, started: list[int],
) -> None:
    cluster = (node("a0", owner="a"), node("s0"), node("s1"), node("s2"), node("h0", model="H100"))
    runs = (running(job(20, 2, lab="a"), {"a0": (0, 1)}),
            running(job(21, 2, lab="b"), {borrowed: (0, 1)}, borrowing=True))
    queue = (job(1, 4, lab="a", nodes=4, gpu_model="A100"), job(2, 4, lab="a", nodes=2, gpu_model="A100"),
             job(3, 4, lab="d"))
    d = schedule(snap(cluster, queue, runs, labs=(lab("a", 32), lab("b", 0), lab("d"))),
                 Policy(order="fifo", backfill="none", lend=lend))
    # Job 2 says what any job behind the first blocked one says, and no borrower is stopped for it.
    assert d.preemptions == ()
    assert d.pending_by_id()[2].reason == Reason(Code.QUEUED, "1 job ahead; waiting behind job 1")
    assert all(p.reason.code is not Code.RECLAIMING for p in d.pending)
    # It holds no GPU either. Partitioned, lab d owns no nodes, so its job 3 is not in lab a's partition and no
    # reservation or queue of lab a's keeps it from the shared nodes: it starts on GPUs job 2 would have held.
    # Pooled, it waits in the same strict order behind job 1.
    assert [s.job_id for s in d.starts] == started
    if not started:
        assert d.pending_by_id()[3].reason == Reason(Code.QUEUED, "2 jobs ahead; waiting behind job 1")


def test_a_borrower_on_a_node_that_left_the_cluster_frees_nothing_and_stops_no_cycle() -> None:
    # Node gone was removed while lab b's borrower still runs there (its agent has not yet reported it stopped).
    # Lab a's job 1 is within its guarantee but does not fit s0's 2 free GPUs; the only borrower is on the node
    # that left, so no reclaim can help it: the cycle explains it instead of failing on the unknown node.
    cluster = (node("s0"),)
    runs = (running(job(10, 2, lab="a"), {"s0": (0, 1)}),
            running(job(11, 2, lab="b"), {"gone": (0, 1)}, borrowing=True))
    d = schedule(snap(cluster, (job(1, 4, lab="a"),), runs, labs=(lab("a", 8), lab("b", 0))), Policy(lend=True))
    assert d.starts == () and d.preemptions == ()
    assert d.pending_by_id()[1].reason.code is not Code.RECLAIMING
