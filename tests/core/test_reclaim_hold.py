"""A reclaiming owner keeps the GPUs already free on the nodes it reclaims: borrowers cannot take them meanwhile."""

from __future__ import annotations

from nanum.core import Policy, schedule
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
