"""Bursts: jobs one user submits together with one request, and what their running members say about the rest."""

from __future__ import annotations

import pytest

from nanum.core import HistoryPredictor, JobId, Policy, schedule
from nanum.core.bursts import BURST_GAP, Bursts, Siblings
from tests.core.builders import job, nodes, running, snap

HOUR = 3600.0


def test_a_burst_is_a_chain_of_close_submissions_of_one_request() -> None:
    b = Bursts()
    # 1 begins a burst; 2 and 3 follow within BURST_GAP of the one before, though 3 is 18 s after 1.
    assert b.join(job(1, submit=0.0)) is None
    assert b.join(job(2, submit=9.0)) == 1
    assert b.join(job(3, submit=18.0)) == 1
    # Another user, another GPU count or another name begins its own, even at the same time.
    assert b.join(job(4, submit=19.0, user="bob")) is None
    assert b.join(job(5, submit=19.0, gpus=2)) is None
    assert b.join(job(6, submit=19.0, name="eval")) is None
    # A gap longer than BURST_GAP ends the burst.
    assert b.join(job(7, submit=18.0 + BURST_GAP + 1)) is None
    assert b.join(job(8, submit=18.0 + BURST_GAP + 2)) == 7


def test_sibling_service_is_the_most_any_running_sibling_received() -> None:
    head = job(1, submit=0.0)
    second = job(2, submit=5.0, burst=JobId(1), attained_gpu_seconds=600.0)  # ran 10 minutes before, requeued
    waiting = job(3, submit=6.0, burst=JobId(1))
    stranger = job(4, submit=6.0)
    held = Siblings.of((running(head, {"n0": (0,)}, start=1000.0), running(second, {"n0": (1,)}, start=1500.0)))
    # At 2000: the head has received 1000 s, the second 600 + 500 s.
    assert held.service(waiting, 2000.0) == pytest.approx(1100.0)
    assert held.service(stranger, 2000.0) is None
    # A running member asks about the others only.
    assert held.service(head, 2000.0) == pytest.approx(1100.0)
    assert held.service(second, 2000.0) == pytest.approx(1000.0)
    held.remove(running(second, {"n0": (1,)}, start=1500.0))
    assert held.service(waiting, 2000.0) == pytest.approx(1000.0)
    assert held.service(head, 2000.0) is None


def test_index_of_a_job_known_to_need_more_than_some_service() -> None:
    p = HistoryPredictor()
    for i, hours in enumerate((1, 1, 1, 10, 10)):
        p.observe(job(100 + i), hours * HOUR)
    new = job(1)
    # Unconditioned: 3 of 5 finish within an hour, spending an hour each: 0.6 per GPU-hour.
    assert p.gittins_index(new, 0.0) == pytest.approx(0.6 / HOUR)
    # Known to need more than 2 GPU-hours: only the 10 GPU-hour kind is left, 10 more for certain.
    assert p.gittins_index(new, 0.0, more_than=2 * HOUR) == pytest.approx(1 / (10 * HOUR))
    # Known to need more than every sample (20 GPU-hours): expected to need as much again.
    assert p.gittins_index(new, 0.0, more_than=20 * HOUR) == pytest.approx(1 / (40 * HOUR), rel=0.05)


def test_a_short_job_goes_before_a_long_burst_whose_members_already_ran_long() -> None:
    # Similar jobs of this user ran 1 minute or 8 hours. A burst of five came at t=0: two run on the two GPUs,
    # three wait. At t=2 h a new job of the same request comes alone; one GPU is now free.
    p = HistoryPredictor()
    for i, seconds in enumerate((60, 60, 60, 8 * HOUR, 8 * HOUR, 8 * HOUR)):
        p.observe(job(100 + i), seconds)
    burst = [job(1, submit=0.0)] + [job(i, submit=float(i), burst=JobId(1)) for i in range(2, 6)]
    alone = job(6, submit=2 * HOUR)
    cluster = nodes(1, gpus=2)
    runs = (running(burst[0], {"n0": (0,)}, start=0.0),)
    now = 2 * HOUR
    pending = (*burst[2:], alone)
    starts = schedule(snap(cluster, pending, runs, now=now), Policy(order="gittins"), p).starts
    # Its sibling has run 2 hours: the burst's waiting members are the 8-hour kind, the lone job may be short.
    assert [s.job_id for s in starts] == [6]
    # Without a running sibling nothing tells them apart, and the burst, submitted first, goes first.
    starts = schedule(snap(cluster, pending, now=now), Policy(order="gittins"), p).starts
    assert [s.job_id for s in starts][:1] == [3]
