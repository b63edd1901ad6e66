"""The Gittins index learned from finished jobs, and the `gittins` order that uses it inside LAS classes."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nanum.core import HistoryPredictor, Policy, schedule
from tests.core.builders import job, nodes, running, snap

HOUR = 3600.0


def learned(*hours: float, gpus: int = 1, user: str = "u") -> HistoryPredictor:
    predictor = HistoryPredictor()
    for i, h in enumerate(hours):
        predictor.observe(job(1000 + i, gpus=gpus, user=user), h * HOUR / gpus)
    return predictor


def test_index_of_the_worked_example() -> None:
    # Similar jobs needed 1, 1, 1, 1, 1, 1, 10, 10, 10 and 10 GPU-hours (1-GPU jobs).
    p = learned(1, 1, 1, 1, 1, 1, 10, 10, 10, 10)
    new = job(1)
    # New: within 1 GPU-hour 6 of 10 finish, spending 1 GPU-hour each on average: 0.6 per GPU-hour.
    assert p.gittins_index(new, 0.0) == pytest.approx(0.6 / HOUR)
    # After 2 GPU-hours only the 10 GPU-hour kind is left: 8 more for certain.
    assert p.gittins_index(new, 2 * HOUR) == pytest.approx(1 / (8 * HOUR))
    # Outlived every sample: expected to need as much again as it received.
    assert p.gittins_index(new, 20 * HOUR) == pytest.approx(1 / (20 * HOUR))


def test_no_index_before_enough_similar_jobs_finished() -> None:
    assert learned(1, 1, 1, 1).gittins_index(job(1), 0.0) is None
    assert learned(1, 1, 1, 1, 1).gittins_index(job(1), 0.0) is not None


def test_index_uses_the_most_specific_history() -> None:
    p = learned(1, 1, 1, 1, 1, user="alice")
    for i in range(5):
        p.observe(job(2000 + i, user="bob"), 9 * HOUR)
    assert p.gittins_index(job(1, user="alice"), 0.0) == pytest.approx(1 / HOUR)
    assert p.gittins_index(job(2, user="bob"), 0.0) == pytest.approx(1 / (9 * HOUR))


def test_the_index_forgets_jobs_older_than_its_service_window() -> None:
    # Five 10 GPU-hour jobs, then five 1 GPU-hour ones: a window of five knows only the recent kind.
    recent = HistoryPredictor(service_window=5)
    everything = HistoryPredictor(service_window=10)
    for i, hours in enumerate([10.0] * 5 + [1.0] * 5):
        for p in (recent, everything):
            p.observe(job(1000 + i), hours * HOUR)
    assert recent.gittins_index(job(1), 0.0) == pytest.approx(1 / HOUR)
    assert everything.gittins_index(job(1), 0.0) == pytest.approx(0.5 / HOUR)


@settings(deadline=None)  # a slow machine is not a wrong index
@given(st.lists(st.floats(1.0, 1e6), min_size=5, max_size=60), st.floats(0.0, 2e6))
def test_index_is_positive_and_at_most_one_over_the_shortest_remaining(runs: list[float], attained: float) -> None:
    p = HistoryPredictor()
    for i, r in enumerate(runs):
        p.observe(job(100 + i), r)
    index = p.gittins_index(job(1), attained)
    assert index is not None and index > 0
    remaining = [r - attained for r in runs if r > attained]
    if remaining:
        # every unfinished job still needs at least min(remaining): no quantum finishes jobs faster than that
        assert index <= (1 / min(remaining)) * (1 + 1e-9)


def test_gittins_order_runs_the_job_likely_to_end_soon_first_within_a_class() -> None:
    # alice's jobs end in an hour, bob's take ten; bob submitted first. One GPU is free.
    p = learned(1, 1, 1, 1, 1, user="alice")
    for i in range(5):
        p.observe(job(2000 + i, user="bob"), 10 * HOUR)
    pending = (job(1, user="bob"), job(2, user="alice"))
    cluster = nodes(1, gpus=1)
    assert [s.job_id for s in schedule(snap(cluster, pending), Policy(order="gittins"), p).starts] == [2]
    assert [s.job_id for s in schedule(snap(cluster, pending), Policy(order="las"), p).starts] == [1]


def test_gittins_keeps_classes_first_and_is_fifo_in_a_class_without_history() -> None:
    p = learned(1, 1, 1, 1, 1, user="alice")
    # alice's job has received 5 GPU-hours (the long class): a new job of bob (short class, no history) goes first.
    pending = (job(1, user="alice", attained_gpu_seconds=5 * HOUR), job(2, user="bob"))
    cluster = nodes(1, gpus=1)
    assert [s.job_id for s in schedule(snap(cluster, pending), Policy(order="gittins"), p).starts] == [2]
    fresh = (job(1, user="carol"), job(2, user="dave"))
    assert [s.job_id for s in schedule(snap(cluster, fresh), Policy(order="gittins"), HistoryPredictor()).starts] == [1]


@pytest.mark.parametrize(
    ("victim_hours", "order", "expected"),
    [
        pytest.param(3, "las", [(10, 1)], id="las-stops-a-job-past-2-GPU-hours"),
        pytest.param(3, "gittins", [], id="gittins-keeps-a-job-below-4-GPU-hours"),
        pytest.param(5, "gittins", [(10, 1)], id="gittins-stops-a-long-job"),
        pytest.param(50, "gittins", [(10, 1)], id="gittins-has-no-third-class"),
    ],
)
def test_gittins_preempts_only_long_jobs_for_short_ones(victim_hours: float, order: str,
                                                         expected: list[tuple[int, int]]) -> None:
    victim = running(job(10, 4, attained_gpu_seconds=victim_hours * HOUR), {"n0": (0, 1, 2, 3)}, start=90.0)
    policy = Policy.parse(f"{order}+preempt+nobackfill", lend=False)
    d = schedule(snap(nodes(1), (job(1, 1),), (victim,)), policy)
    assert [(p.job_id, p.for_job) for p in d.preemptions] == expected


@pytest.mark.parametrize(("order", "expected"), [("las", [(10, 1)]), ("gittins", [])])
def test_long_gittins_jobs_never_preempt_each_other(order: str, expected: list[tuple[int, int]]) -> None:
    # A job back from preemption with 5 GPU-hours meets one running with 30: las' classes 1 and 2, one class here.
    victim = running(job(10, 4, attained_gpu_seconds=30 * HOUR), {"n0": (0, 1, 2, 3)}, start=90.0)
    back = job(1, 4, attained_gpu_seconds=5 * HOUR)
    d = schedule(snap(nodes(1), (back,), (victim,)), Policy.parse(f"{order}+preempt+nobackfill", lend=False))
    assert [(p.job_id, p.for_job) for p in d.preemptions] == expected


def test_a_users_priority_reorders_only_that_users_own_jobs() -> None:
    cluster = nodes(1, gpus=1)
    hold = running(job(90, user="x"), {"n0": (0,)}, end=1000.0)
    pending = (job(1, user="alice"), job(2, user="bob"), job(3, user="alice", priority=50))
    d = schedule(snap(cluster, pending, (hold,)), Policy.default())
    assert str(d.pending_by_id()[3].reason).startswith("next in line")  # alice's priority 50 takes her first place
    assert str(d.pending_by_id()[2].reason).startswith("1 job ahead")  # bob keeps his place
    assert str(d.pending_by_id()[1].reason).startswith("2 jobs ahead")


def test_a_heavily_used_labs_job_yields_to_a_light_labs_job_of_the_same_size() -> None:
    from nanum.core import Lab

    cluster = nodes(1, gpus=1)
    hold = running(job(90, lab="heavy"), {"n0": (0,)}, end=1000.0)
    labs = (Lab(name="heavy", decayed_usage=100 * HOUR), Lab(name="light", decayed_usage=HOUR))
    pending = (job(1, lab="heavy"), job(2, lab="light"))  # the heavy lab's job was submitted first
    for predictor in (None, learned(1, 1, 1, 1, 1, 1, 10, 10, 10, 10)):  # without history, and with one
        d = schedule(snap(cluster, pending, (hold,), labs=labs), Policy.default(), predictor)
        assert str(d.pending_by_id()[2].reason).startswith("next in line")
        assert str(d.pending_by_id()[1].reason).startswith("1 job ahead")


def test_fair_share_moves_a_gittins_index_by_a_bounded_factor() -> None:
    from nanum.core import Lab, OrderContext
    from nanum.core.ordering import Gittins

    labs = {"heavy": Lab(name="heavy", decayed_usage=1000.0), "idle": Lab(name="idle")}
    ctx = OrderContext(0.0, labs, {}, 8, learned(1, 1, 1, 1, 1, 1, 10, 10, 10, 10))
    order = Gittins()
    assert 2 ** -0.125 <= ctx.lab_scale("heavy")[0] < 1 < ctx.lab_scale("idle")[0] <= 2 ** 0.125
    fresh_heavy = order.sort_key(job(1, lab="heavy"), ctx)
    fresh_idle = order.sort_key(job(2, lab="idle"), ctx)
    served_idle = order.sort_key(job(3, lab="idle", attained_gpu_seconds=2 * HOUR), ctx)  # index 1/8 of a fresh job's
    assert fresh_idle < fresh_heavy < served_idle  # fair-share decides between like jobs, never against the index


@settings(deadline=None)
@given(st.lists(st.tuples(st.sampled_from("abc"), st.integers(0, 100), st.integers(0, 2)), max_size=12))
def test_a_users_priority_never_takes_another_users_place_nor_crosses_a_tier(jobs: list[tuple[str, int, int]]) -> None:
    from nanum.core.ordering import by_user_priority

    queue = [job(i, user=user, priority=prio, tier=tier) for i, (user, prio, tier) in enumerate(jobs)]
    out = by_user_priority(queue)
    # every user keeps the places they had, in each tier
    assert [(j.user, j.tier) for j in out] == [(j.user, j.tier) for j in queue]
    for user, tier in {(j.user, j.tier) for j in queue}:
        mine = [j for j in out if (j.user, j.tier) == (user, tier)]
        assert [j.priority for j in mine] == sorted((j.priority for j in mine), reverse=True)
        assert sorted(j.id for j in mine) == sorted(j.id for j in queue if (j.user, j.tier) == (user, tier))


@settings(max_examples=60, deadline=None)
@given(services=st.lists(st.floats(1.0, 1e7), min_size=5, max_size=200),
       attained=st.floats(0.0, 2e7), more_than=st.floats(0.0, 2e7))
def test_long_service_tables_give_the_same_index_as_the_loop_to_the_last_bit(
    services: list[float], attained: float, more_than: float,
) -> None:
    """The index over a long table is computed as array arithmetic; it must equal the plain loop exactly, or the
    default order would differ between tables of 31 and 32 finished jobs."""
    import nanum.core.predict as predict

    def index(vector_from: int) -> float | None:
        saved, predict.VECTOR_FROM = predict.VECTOR_FROM, vector_from
        try:
            predictor = HistoryPredictor()
            for seconds in services:
                predictor.observe(job(99, user="u"), seconds)
            return predictor.gittins_index(job(1, user="u"), attained, more_than)
        finally:
            predict.VECTOR_FROM = saved

    assert index(1) == index(10**9)
