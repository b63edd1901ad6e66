"""Preemption by priority class (`+preempt`, Tiresias' discretised LAS): table tests for who stops whom."""

from __future__ import annotations

from dataclasses import replace

import pytest

from nanum.core import Code, Policy, PolicyError, schedule
from tests.core.builders import job, lab, node, nodes, running, snap

HOUR = 3600.0
LAS = Policy.parse("las+preempt+nobackfill", lend=False)


def preempted(decisions) -> list[tuple[int, int]]:
    return [(p.job_id, p.for_job) for p in decisions.preemptions]


@pytest.mark.parametrize(
    ("victim_attained", "expected"),
    [
        pytest.param(2 * HOUR, [(10, 1)], id="lower-class-is-preempted"),
        pytest.param(0.0, [], id="same-class-never"),
        pytest.param(20 * HOUR, [(10, 1)], id="lowest-class-is-preempted"),
    ],
)
def test_a_new_job_preempts_only_a_lower_class(victim_attained: float, expected: list[tuple[int, int]]) -> None:
    long = running(job(10, 4, attained_gpu_seconds=victim_attained), {"n0": (0, 1, 2, 3)}, start=90.0)
    d = schedule(snap(nodes(1), (job(1, 1),), (long,)), LAS)  # now=100: 10 s × 4 GPUs more
    assert preempted(d) == expected
    assert d.starts == ()
    code = d.pending_by_id()[1].reason.code
    assert code is (Code.PREEMPTING if expected else Code.RESOURCES)


def test_service_received_in_this_run_counts() -> None:
    # Started at t=0 with nothing received; at t=2000 it has 8,000 GPU-seconds: class 1 (over two GPU-hours).
    long = running(job(10, 4), {"n0": (0, 1, 2, 3)}, start=0.0)
    d = schedule(snap(nodes(1), (job(1, 1),), (long,), now=2000.0), LAS)
    assert preempted(d) == [(10, 1)]


def test_victims_lowest_class_first_then_least_work_lost() -> None:
    two = nodes(3, gpus=1)
    runs = (
        running(job(10, 1, attained_gpu_seconds=2 * HOUR), {"n0": (0,)}, start=10.0),
        running(job(11, 1, attained_gpu_seconds=20 * HOUR), {"n1": (0,)}, start=10.0),
        running(job(12, 1, attained_gpu_seconds=20 * HOUR), {"n2": (0,)}, start=50.0),
    )
    d = schedule(snap(two, (job(1, 1),), runs), LAS)
    assert preempted(d) == [(12, 1)]  # class 2 before class 1; of the two, the one started last loses least


def test_other_labs_jobs_within_their_guarantee_are_never_preempted() -> None:
    cluster = (node("a0", 4, owner="a"), node("b0", 4, owner="b"))
    theirs = running(job(10, 4, lab="b", attained_gpu_seconds=20 * HOUR), {"b0": (0, 1, 2, 3)})
    mine = running(job(11, 4, lab="a", attained_gpu_seconds=20 * HOUR), {"a0": (0, 1, 2, 3)})
    pooled = Policy.parse("las+preempt", lend=True)
    labs = (lab("a", 4), lab("b", 4))
    d = schedule(snap(cluster, (job(1, 4, lab="a"),), (theirs, mine), labs=labs), pooled)
    assert preempted(d) == [(11, 1)]
    borrowed = running(job(12, 4, lab="b", attained_gpu_seconds=20 * HOUR), {"a0": (0, 1, 2, 3)}, borrowing=True)
    d = schedule(snap(cluster, (job(2, 4, lab="b"),), (theirs, borrowed), labs=labs), pooled)
    assert preempted(d) == [(12, 2)]  # lab b's new job may stop its own borrowing job
    other = running(job(13, 4, lab="a", attained_gpu_seconds=20 * HOUR), {"a0": (0, 1, 2, 3)})
    d = schedule(snap(cluster, (job(3, 4, lab="b"),), (theirs, other), labs=labs), pooled)
    assert preempted(d) == [(10, 3)]  # never lab a's job on its own node: lab b stops its own long job


def test_the_freed_gpus_are_held_for_the_preemptor() -> None:
    long = running(job(10, 2, attained_gpu_seconds=2 * HOUR), {"n0": (0, 1)})
    d = schedule(snap(nodes(1), (job(1, 4), job(2, 1, attained_gpu_seconds=2 * HOUR)), (long,)), LAS)
    assert preempted(d) == [(10, 1)]
    assert d.starts == ()  # job 2 (class 1) does not take n0's free GPUs meant for job 1


def test_policy_words() -> None:
    assert Policy.parse("las+preempt").preempt and Policy.parse("las+preempt").label == "las+binpack+backfill+preempt"
    assert not Policy.parse("las").preempt
    with pytest.raises(PolicyError, match="has no priority classes"):
        Policy.parse("fifo+preempt")


def test_a_job_waiting_behind_the_head_does_not_answer_for_a_later_one_of_its_shape() -> None:
    # Without backfill, job 2 (2 GPUs) waits behind the gang 1 though n0 has 2 GPUs free, and preempts nothing
    # since it fits. Job 3 (3 GPUs) then preempts job 10 and holds n0's free GPUs. Job 4, of job 2's shape, now fits
    # nowhere, so it preempts job 12 on n1.
    runs = (
        running(job(10, 1, attained_gpu_seconds=2 * HOUR), {"n0": (0,)}, start=90.0),
        running(job(11, 1), {"n0": (1,)}, start=90.0),
        running(job(12, 2, attained_gpu_seconds=2 * HOUR), {"n1": (0, 1)}, start=90.0),
        running(job(13, 2), {"n1": (2, 3)}, start=90.0),
    )
    d = schedule(snap(nodes(2), (job(1, 4, nodes=2), job(2, 2), job(3, 3), job(4, 2)), runs), LAS)
    assert preempted(d) == [(10, 3), (12, 4)]


def test_a_job_that_would_still_borrow_does_not_stop_its_labs_jobs_within_the_guarantee() -> None:
    # Lab a is guaranteed 6 GPUs and uses them: L (4, long) and S (2, new). Job 1 needs 6. Stopping L would let it
    # fit, but it would still borrow (2 + 6 > 6), while L, within the guarantee, would start again first, to be
    # stopped again at the next cycle, and so on for ever. With 8 guaranteed it would no longer borrow: it may.
    cluster = (node("a0", 8, owner="a"),)
    runs = (running(job(10, 4, lab="a", attained_gpu_seconds=20 * HOUR), {"a0": (0, 1, 2, 3)}, start=90.0),
            running(job(11, 2, lab="a"), {"a0": (4, 5)}, start=90.0))
    pooled = Policy.parse("las+preempt", lend=True)
    d = schedule(snap(cluster, (job(1, 6, lab="a"),), runs, labs=(lab("a", 6),)), pooled)
    assert preempted(d) == []
    d = schedule(snap(cluster, (job(1, 6, lab="a"),), runs, labs=(lab("a", 8),)), pooled)
    assert preempted(d) == [(10, 1)]
    borrowed = (replace(runs[0], borrowing=True), runs[1])  # a borrower comes back behind it: it may be stopped
    d = schedule(snap(cluster, (job(1, 6, lab="a"),), borrowed, labs=(lab("a", 6),)), pooled)
    assert preempted(d) == [(10, 1)]
