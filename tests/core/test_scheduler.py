"""Table tests for one scheduling cycle: orders, placements, limits, backfill, reclaim, reasons."""

from __future__ import annotations

import pytest

from nanum.core import Code, HistoryPredictor, JobKind, Limits, NodeState, Policy, PolicyError, User, schedule
from nanum.core.backfill_rules import BACKFILLS
from nanum.core.policy import BACKFILL_RULES
from tests.core.builders import job, lab, node, nodes, running, snap


def started(decisions) -> list[int]:
    return [s.job_id for s in decisions.starts]


def reason(decisions, job_id: int):
    return decisions.pending_by_id()[job_id].reason


@pytest.mark.parametrize(
    ("order", "expected"),
    [
        pytest.param("fifo", [1], id="fifo-oldest-first"),
        pytest.param("priority", [3], id="priority-highest-first"),
        pytest.param("shortest", [2], id="shortest-limit-first"),
        pytest.param("las", [1], id="las-new-jobs-fifo"),
    ],
)
def test_order_picks_which_job_gets_the_only_gpu(order: str, expected: list[int]) -> None:
    pending = (
        job(1, time_limit=3600.0),
        job(2, time_limit=60.0),
        job(3, time_limit=7200.0, priority=100),
    )
    d = schedule(snap(nodes(1, gpus=1), pending), Policy(order=order, backfill="none"))
    assert started(d) == expected


def test_las_puts_jobs_with_much_attained_service_last() -> None:
    pending = (job(1, attained_gpu_seconds=50_000.0), job(2))
    assert started(schedule(snap(nodes(1, gpus=1), pending), Policy(order="las"))) == [2]


def test_fairshare_prefers_the_lab_that_used_least() -> None:
    labs = (lab("heavy"), lab("light"))
    labs = tuple(type(x)(name=x.name, decayed_usage=u) for x, u in zip(labs, (1e6, 10.0), strict=True))
    pending = (job(1, lab="heavy"), job(2, lab="light"))
    assert started(schedule(snap(nodes(1, gpus=1), pending, labs=labs), Policy(order="fairshare"))) == [2]


def test_shortest_uses_predictions_learned_from_finished_jobs() -> None:
    predictor = HistoryPredictor()
    predictor.observe(job(90, user="a", name="long"), 10_000.0)
    predictor.observe(job(91, user="b", name="quick"), 30.0)
    pending = (job(1, user="a", name="long"), job(2, user="b", name="quick"))
    d = schedule(snap(nodes(1, gpus=1), pending), Policy(order="shortest"), predictor)
    assert started(d) == [2]


@pytest.mark.parametrize(
    ("placement", "expected_node"),
    [
        pytest.param("binpack", "n1", id="binpack-fullest-node"),
        pytest.param("spread", "n0", id="spread-emptiest-node"),
    ],
)
def test_placement_chooses_node(placement: str, expected_node: str) -> None:
    cluster = nodes(2, gpus=4)
    hold = running(job(50), {"n1": (0, 1)})
    d = schedule(snap(cluster, (job(1),), (hold,)), Policy(placement=placement))
    assert d.starts[0].placements[0].node == expected_node


def test_topology_keeps_a_job_inside_one_nvlink_island() -> None:
    cluster = (node("n0", gpus=8, islands=2),)
    hold = running(job(50), {"n0": (0, 4)})  # one GPU taken in each island
    d = schedule(snap(cluster, (job(1, gpus=3),), (hold,)), Policy(placement="topology"))
    gpus = d.starts[0].placements[0].gpus
    assert len({g // 4 for g in gpus}) == 1


def test_gang_is_placed_on_all_its_nodes_or_not_at_all() -> None:
    cluster = nodes(3, gpus=4)
    hold = running(job(50, gpus=2), {"n2": (0, 1)})
    ok = schedule(snap(cluster, (job(1, gpus=4, nodes=2),), (hold,)), Policy())
    assert sorted(p.node for p in ok.starts[0].placements) == ["n0", "n1"]
    blocked = schedule(snap(cluster, (job(1, gpus=4, nodes=3),), (hold,)), Policy())
    assert blocked.starts == ()
    assert "needs 3 nodes with 4 free GPUs each; 2 have that now" in str(reason(blocked, 1))
    busier = (hold, running(job(51, gpus=4), {"n1": (0, 1, 2, 3)}), running(job(52, gpus=2), {"n2": (2, 3)}))
    one = schedule(snap(cluster, (job(1, gpus=1, nodes=3),), busier), Policy())
    assert "needs 3 nodes with 1 free GPU each; 1 has that now" in str(reason(one, 1))


def test_reason_names_the_largest_free_block() -> None:
    cluster = nodes(2, gpus=4)
    holds = (running(job(50, gpus=3), {"n0": (0, 1, 2)}), running(job(51, gpus=2), {"n1": (0, 1)}))
    d = schedule(snap(cluster, (job(1, gpus=4),), holds), Policy())
    assert reason(d, 1).code is Code.RESOURCES
    assert "needs 4 GPUs on one node; the largest free block is 2 (node n1)" in str(reason(d, 1))


def test_lab_and_user_limits_hold_and_say_so() -> None:
    labs = (lab("vision", max_gpus=2), lab("nlp", max_running_jobs=1))
    users = {"bob": User(name="bob", limits=Limits(max_gpus=1))}
    pending = (job(1, gpus=2, lab="vision"), job(2, lab="vision"), job(3, lab="nlp"), job(4, lab="nlp"),
               job(5, lab="x", user="bob"), job(6, lab="x", user="bob"))
    d = schedule(snap(nodes(2, gpus=8), pending, labs=labs, users=users), Policy())
    assert started(d) == [1, 3, 5]
    assert str(reason(d, 2)) == "lab vision is at max_gpus 2 (2 in use, this job needs 1)"
    assert str(reason(d, 4)) == "lab nlp is at max_running_jobs 1"
    assert reason(d, 6).code is Code.USER_LIMIT


def test_monthly_budget_stops_new_starts_with_the_numbers() -> None:
    spent = lab("nlp", monthly_gpu_hours=1000.0)
    spent = type(spent)(name="nlp", limits=spent.limits, used_gpu_hours=1000.5)
    d = schedule(snap(nodes(1), (job(1, lab="nlp"),), labs=(spent,), month="November"), Policy())
    assert d.starts == ()
    assert str(reason(d, 1)) == "lab nlp has used its 1,000 GPU-hours for November (1,000.5 used)"


def test_easy_backfill_starts_a_short_job_that_ends_before_the_reservation() -> None:
    cluster = nodes(1, gpus=4)
    hold = running(job(50, gpus=2, time_limit=1000.0), {"n0": (0, 1)}, start=0.0, end=1000.0)
    pending = (job(1, gpus=4, time_limit=500.0), job(2, time_limit=800.0), job(3, time_limit=5000.0))
    d = schedule(snap(cluster, pending, (hold,), now=100.0), Policy())
    assert started(d) == [2]
    head = d.pending_by_id()[1]
    assert head.reason.code is Code.RESERVED
    assert head.estimated_start == 1000.0
    assert str(head.reason) == "next in line; reserved to start when job 50 reaches its time limit"
    assert reason(d, 3).code is Code.BACKFILL
    # job 2 started in this cycle: only job 1 is still ahead of job 3
    assert str(reason(d, 3)) == "1 job ahead; starting now would delay job 1's reserved start"


def test_a_long_job_held_back_by_the_reservation_does_not_hold_back_a_short_one() -> None:
    cluster = nodes(1, gpus=4)
    hold = running(job(50, gpus=2, time_limit=1000.0), {"n0": (0, 1)}, start=0.0, end=1000.0)
    pending = (job(1, gpus=4), job(2, time_limit=5000.0), job(3, time_limit=800.0))  # 2 and 3 differ in length only
    d = schedule(snap(cluster, pending, (hold,), now=100.0), Policy())
    assert started(d) == [3]
    assert reason(d, 2).code is Code.BACKFILL


def test_without_backfill_later_jobs_wait_behind_the_head() -> None:
    cluster = nodes(1, gpus=4)
    hold = running(job(50, gpus=3), {"n0": (0, 1, 2)}, end=1000.0)
    pending = (job(1, gpus=4), job(2, time_limit=10.0))
    d = schedule(snap(cluster, pending, (hold,)), Policy(backfill="none"))
    assert d.starts == ()
    assert str(reason(d, 2)) == "1 job ahead; waiting behind job 1"


def test_partitioned_labs_block_only_their_own_queue() -> None:
    cluster = nodes(1, gpus=2, prefix="a", owner="a") + nodes(1, gpus=2, prefix="b", owner="b")
    pending = (job(1, gpus=2, lab="a"), job(2, gpus=2, lab="a"), job(3, gpus=2, lab="b"))
    d = schedule(snap(cluster, pending), Policy(lend=False, backfill="none"))
    assert started(d) == [1, 3]
    assert d.starts[1].placements[0].node == "b0"


def test_borrowers_run_on_idle_gpus_and_are_reclaimed_for_the_owner() -> None:
    cluster = nodes(1, gpus=4, prefix="a", owner="a") + nodes(1, gpus=4, prefix="b", owner="b")
    labs = (lab("a", guaranteed=4), lab("b", guaranteed=4))
    first = schedule(snap(cluster, (job(1, gpus=4, lab="b"), job(2, gpus=4, lab="b")), labs=labs), Policy())
    assert [(s.job_id, s.borrowing) for s in first.starts] == [(1, False), (2, True)]
    borrowed = first.starts[1]
    runs = (running(job(1, gpus=4, lab="b"), {"b0": (0, 1, 2, 3)}),
            running(job(2, gpus=4, lab="b"), {borrowed.placements[0].node: (0, 1, 2, 3)}, borrowing=True))
    second = schedule(snap(cluster, (job(3, gpus=2, lab="a"),), runs, labs=labs), Policy())
    assert [p.job_id for p in second.preemptions] == [2]
    assert reason(second, 3).code is Code.RECLAIMING


def test_victims_lose_the_least_work_since_their_checkpoint() -> None:
    cluster = nodes(2, gpus=2)
    labs = (lab("owner", guaranteed=2), lab("guest", guaranteed=0))
    fresh_ckpt = running(job(10, gpus=2, lab="guest"), {"n0": (0, 1)}, start=0.0, borrowing=True, checkpoint=90.0)
    no_ckpt = running(job(11, gpus=2, lab="guest"), {"n1": (0, 1)}, start=50.0, borrowing=True)
    d = schedule(snap(cluster, (job(1, gpus=2, lab="owner"),), (fresh_ckpt, no_ckpt), labs=labs), Policy())
    assert [p.job_id for p in d.preemptions] == [10]


def test_a_job_that_must_not_be_preempted_never_borrows() -> None:
    labs = (lab("a", guaranteed=1),)
    pending = (job(1, lab="a"), job(2, lab="a", preemptible=False))
    d = schedule(snap(nodes(1, gpus=4), pending, labs=labs), Policy())
    assert started(d) == [1]
    assert "must not be preempted never borrows" in str(reason(d, 2))


def test_owners_go_before_borrowers_in_the_same_cycle() -> None:
    labs = (lab("a", guaranteed=2), lab("b", guaranteed=0))
    pending = (job(1, gpus=2, lab="b"), job(2, gpus=2, lab="a"))
    d = schedule(snap(nodes(1, gpus=2), pending, labs=labs), Policy())
    assert started(d) == [2]


def test_impossible_requests_are_recognised() -> None:
    cluster = nodes(2, gpus=8)
    d = schedule(snap(cluster, (job(1, gpus=16), job(2, gpu_model="H100"), job(3))), Policy())
    assert reason(d, 1).code is Code.IMPOSSIBLE
    assert str(reason(d, 1)) == "needs 16 GPUs on one node; the largest node has 8 (n0)"
    assert str(reason(d, 2)) == "needs GPU model H100; the cluster has A100"
    assert started(d) == [3]


def test_jobs_that_only_a_down_node_could_run_wait_for_it() -> None:
    cluster = (node("big", gpus=8, state=NodeState.DOWN), node("small", gpus=2))
    d = schedule(snap(cluster, (job(1, gpus=8),)), Policy())
    assert reason(d, 1).code is Code.NODE_DOWN


def test_gpus_busy_outside_nanum_are_never_handed_out() -> None:
    cluster = (node("n0", gpus=2, busy_gpus=frozenset({0})),)
    d = schedule(snap(cluster, (job(1), job(2))), Policy())
    assert [s.placements[0].gpus for s in d.starts] == [(1,)]


def test_policy_strings_parse_and_bad_names_fail_with_the_choices() -> None:
    p = Policy.parse("las+spread+nobackfill")
    assert (p.order, p.placement, p.backfill) == ("las", "spread", "none")
    with pytest.raises(PolicyError, match="choose one of fifo"):
        Policy.parse("lottery")
    with pytest.raises(PolicyError, match="placements: binpack"):
        Policy.parse("fifo+random")
    with pytest.raises(PolicyError, match="unknown backfill rule 'conservative'; choose one of easy, none"):
        Policy(backfill="conservative")
    assert set(BACKFILL_RULES) == set(BACKFILLS)  # every rule a policy may name exists


def test_estimates_for_jobs_behind_the_head() -> None:
    cluster = nodes(1, gpus=2)
    hold = running(job(50, gpus=2, time_limit=100.0), {"n0": (0, 1)}, start=0.0, end=100.0)
    pending = (job(1, gpus=2, time_limit=100.0), job(2, gpus=2, time_limit=100.0))
    d = schedule(snap(cluster, pending, (hold,), now=10.0), Policy(estimate_depth=10))
    by_id = d.pending_by_id()
    assert by_id[1].estimated_start == 100.0
    assert by_id[2].estimated_start == 200.0
    assert str(by_id[2].reason) == "1 job ahead; expected to start when job 1 ends"


def test_notebooks_are_jobs_too() -> None:
    d = schedule(snap(nodes(1), (job(1, kind=JobKind.NOTEBOOK),)), Policy())
    assert started(d) == [1]


def test_the_default_policy_is_the_one_the_trace_study_chose() -> None:
    default = Policy.default()
    assert (default.order, default.placement, default.backfill, default.preempt) == ("gittins", "binpack", "easy", True)
    assert Policy.parse(default.label) == default


def test_a_run_past_its_expected_end_moves_the_estimate_of_the_job_waiting_on_it() -> None:
    cluster = nodes(1, gpus=4)
    late = running(job(50, gpus=4), {"n0": (0, 1, 2, 3)}, start=0.0, end=3600.0)  # planned 1 h, runs on
    for now, expected in ((3700.0, 7200.0), (7300.0, 14400.0)):
        d = schedule(snap(cluster, (job(1, gpus=4),), (late,), now=now), Policy())
        head = d.pending_by_id()[1]
        assert head.estimated_start == expected  # as long again as planned, doubling: never "in 0s"
        assert "(it has run past its first estimate)" in str(head.reason)
    capped = running(job(51, gpus=4, time_limit=5000.0), {"n0": (0, 1, 2, 3)}, start=0.0, end=3600.0)
    d = schedule(snap(cluster, (job(1, gpus=4),), (capped,), now=3700.0), Policy())
    assert d.pending_by_id()[1].estimated_start == 5000.0  # never past its time limit
    assert str(d.pending_by_id()[1].reason).endswith("when job 51 reaches its time limit")


def test_jobs_ahead_counts_only_jobs_of_the_same_partition_that_still_wait() -> None:
    cluster = (node("a0", 4, owner="a"), node("b0", 4, owner="b"))
    pending = (job(1, 4, lab="b"), job(2, 1, lab="a"), job(3, 4, lab="b"), job(4, 4, lab="a"), job(5, 4, lab="a"))
    hold = running(job(50, 2, lab="a"), {"a0": (0, 1)}, end=1000.0)
    d = schedule(snap(cluster, pending, (hold,), labs=(lab("a"), lab("b"))), Policy(lend=False))
    assert started(d) == [1, 2]
    assert str(reason(d, 3)).startswith("next in line")  # job 1 ahead of it started
    assert str(reason(d, 4)).startswith("next in line")  # job 2 started; job 3 is another partition's
    assert str(reason(d, 5)).startswith("1 job ahead")
    assert [d.pending_by_id()[j].ahead for j in (3, 4, 5)] == [0, 0, 1]  # what `nanum priority` ranks by
