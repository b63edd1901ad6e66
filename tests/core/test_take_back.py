"""Backfill over a reservation (`+backfill+preempt`): a job that would delay the first blocked job may start on the
GPUs reserved for it, and is preempted when that job can start; without `+preempt` EASY backfill holds them idle."""

from __future__ import annotations

from nanum.core import Code, Policy, schedule
from tests.core.builders import job, nodes, running, snap

LAS = Policy.parse("las+backfill+preempt")
EASY = Policy.parse("las+backfill")


def started(d) -> dict[int, bool]:
    return {s.job_id: s.over_reservation for s in d.starts}


def test_a_job_that_would_delay_the_reservation_starts_on_its_gpus_and_says_so() -> None:
    # n0 (4 GPUs): job 50 holds 2 until t=1000. Job 1 needs 4: reserved at 1000. Job 2 (1 GPU, 5,000 s) would
    # delay it; job 3 (1 GPU, 800 s) ends before it.
    hold = running(job(50, gpus=2, time_limit=1000.0), {"n0": (0, 1)}, start=0.0, end=1000.0)
    pending = (job(1, gpus=4), job(2, time_limit=5000.0), job(3, time_limit=800.0))
    d = schedule(snap(nodes(1), pending, (hold,)), LAS)
    assert started(d) == {2: True, 3: False}
    assert d.pending_by_id()[1].reason.code is Code.RESERVED
    assert d.preemptions == ()


def test_without_preemption_or_for_a_job_that_must_not_be_preempted_easy_backfill_holds_the_gpus() -> None:
    hold = running(job(50, gpus=2, time_limit=1000.0), {"n0": (0, 1)}, start=0.0, end=1000.0)
    d = schedule(snap(nodes(1), (job(1, gpus=4), job(2, time_limit=5000.0)), (hold,)), EASY)
    assert d.starts == () and d.pending_by_id()[2].reason.code is Code.BACKFILL
    stays = job(2, time_limit=5000.0, preemptible=False)
    d = schedule(snap(nodes(1), (job(1, gpus=4), stays), (hold,)), LAS)
    assert d.starts == () and d.pending_by_id()[2].reason.code is Code.BACKFILL


def test_when_the_reservation_is_due_the_first_blocked_job_takes_its_gpus_back() -> None:
    # t=1000: job 50 has ended; job 2, started over job 1's reservation, holds n0's GPU 2.
    over = running(job(2, time_limit=5000.0), {"n0": (2,)}, start=100.0, end=5100.0, over_reservation=True)
    d = schedule(snap(nodes(1), (job(1, gpus=4), job(4, gpus=4)), (over,), now=1000.0), LAS)
    assert [(p.job_id, p.for_job) for p in d.preemptions] == [(2, 1)]  # only the first blocked job takes back
    reason = d.pending_by_id()[1].reason
    assert reason.code is Code.PREEMPTING
    assert str(reason) == "taking back its reserved GPUs from job(s) 2, backfilled over its reservation"
    assert d.starts == ()  # n0's 3 free GPUs are held for job 1 while job 2 stops


def test_only_jobs_started_over_a_reservation_are_taken_back_and_only_when_that_lets_the_job_start() -> None:
    plain = running(job(2, time_limit=5000.0), {"n0": (2,)}, start=100.0, end=5100.0)
    d = schedule(snap(nodes(1), (job(1, gpus=4),), (plain,), now=1000.0), LAS)
    assert d.preemptions == () and d.pending_by_id()[1].reason.code is Code.RESERVED
    # Job 51 still holds 2 GPUs: stopping job 2 would not let job 1 start yet.
    over = running(job(2, time_limit=5000.0), {"n0": (2,)}, start=100.0, end=5100.0, over_reservation=True)
    still = running(job(51, gpus=2, time_limit=3000.0), {"n0": (0, 1)}, start=0.0, end=3000.0)
    d = schedule(snap(nodes(1), (job(1, gpus=4),), (over, still), now=1000.0), LAS)
    assert d.preemptions == () and d.pending_by_id()[1].reason.code is Code.RESERVED
