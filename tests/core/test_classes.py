"""RunClasses keeps the running jobs' classes and victim ranking as a fresh computation at each `now` gives them."""

from __future__ import annotations

import random

import pytest

from nanum.core import Running
from nanum.core.classes import HORIZON, RunClasses, rise_time
from nanum.core.ordering import Las
from nanum.core.preempt import attained, class_victim_key, may_preempt
from tests.core.builders import job, running

LABS = ("a", "b", "c")


def _fresh(runs: list[Running], lab: str, below: int, now: float) -> list[Running]:
    """The ranking by definition: every run a job of `lab` may preempt, of a class below `below`, cheapest first."""
    order, probe = Las(), job(0, lab=lab)
    ranked = sorted(((order.level(r.job, attained(r, now)), r) for r in runs if may_preempt(probe, r)),
                    key=lambda lr: class_victim_key(*lr))
    return [r for level, r in ranked if level > below]


@pytest.mark.parametrize("seed", range(6))
def test_carried_ranking_matches_a_fresh_one_at_every_step(seed: int) -> None:
    rng = random.Random(seed)
    order, held = Las(), RunClasses(Las())
    live: dict[int, Running] = {}
    now, next_id = 0.0, 1
    for _ in range(150):
        now += rng.choice([0.0, 1.0, 60.0, 900.0, 3 * HORIZON])
        gone = [live.pop(j) for j in [j for j in live if rng.random() < 0.1]]
        moved = []
        for jid in [j for j in live if rng.random() < 0.1]:  # a checkpoint: a new object for the same run
            r = live[jid]
            live[jid] = running(r.job, {p.node: p.gpus for p in r.placements}, r.start_time, r.expected_end,
                                r.borrowing, checkpoint=now)
            moved.append((r, live[jid]))
        came = []
        for _ in range(rng.randint(0, 3)):
            j = job(next_id, gpus=rng.choice([1, 2, 4, 8]), lab=rng.choice(LABS), preemptible=rng.random() < 0.9,
                    attained_gpu_seconds=rng.choice([0.0, 5000.0, 70000.0]))
            live[next_id] = running(j, {"n0": (0,)}, now, borrowing=rng.random() < 0.3)
            came.append(live[next_id])
            next_id += 1
        runs = list(live.values())
        held.update(now, came, gone, moved)
        for lab in LABS:
            for below in (0, 1):
                assert list(held.victims(lab, below)) == _fresh(runs, lab, below, now)
        assert all(held.level(r) == order.level(r.job, attained(r, now)) for r in runs)


def test_time_never_goes_back() -> None:
    r = running(job(1, gpus=4), {"n0": (0,)}, 0.0)
    held = RunClasses.of(Las(), [r], 10 * 3600.0)  # 40 GPU-hours: class 2
    assert held.level(r) == 2
    with pytest.raises(ValueError, match="time went back"):
        held.update(3600.0)


def test_rise_time_is_within_a_second_of_the_threshold() -> None:
    r = running(job(1, gpus=2), {"n0": (0, 1)}, 100.0)  # 2 GPU-hours after 3600 s
    when = rise_time(Las(), r, 0, 100.0, 100.0 + HORIZON)
    assert when is not None and 3699.0 <= when < 3700.0
    assert rise_time(Las(), r, 0, 100.0, 3000.0) is None


@pytest.mark.timeout(20)
def test_a_run_about_to_change_class_is_not_looked_at_for_ever() -> None:
    # 4 GPUs, one GPU-second short of 2 GPU-hours: it changes class a quarter of a second after `now`, so the
    # time it surely keeps its class is `now` itself; looking again at that same time must not loop.
    run = running(job(1, 4, attained_gpu_seconds=7199.0), {"n0": (0, 1, 2, 3)}, start=100.0)
    held = RunClasses.of(Las(), [run], 100.0)
    held.update(100.0)
    assert held.level(run) == 0
    held.update(101.0)
    assert held.level(run) == 1
