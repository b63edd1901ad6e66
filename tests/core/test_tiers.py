"""Admin tiers: in every queue order a higher tier goes first; inside a tier the order decides as before, a user's
priority never moves a job across tiers, and a tier preempts nothing by itself."""

from __future__ import annotations

from dataclasses import replace

import pytest

from nanum.core import Lab, Policy, schedule
from nanum.core.ordering import ORDERS
from tests.core.builders import job, nodes, running, snap

HOUR = 3600.0


@pytest.mark.parametrize("order", sorted(ORDERS))
def test_a_higher_tier_goes_first_in_every_order(order: str) -> None:
    # Job 1 is what every order puts first: submitted first, priority 100, short, fresh, from an idle lab. Job 2 is
    # what every order puts last: later, priority 0, no time limit, 30 GPU-hours received, from a heavy lab.
    cluster = nodes(1, gpus=2)
    hold = running(job(90, 2, lab="idle", user="x"), {"n0": (0, 1)}, end=1000.0)
    favourite = job(1, lab="idle", priority=100, time_limit=60.0)
    last = job(2, lab="heavy", user="v", attained_gpu_seconds=30 * HOUR)
    labs = (Lab(name="idle"), Lab(name="heavy", decayed_usage=1000 * HOUR))
    for tier, first, second in ((0, 1, 2), (1, 2, 1)):
        pending = (favourite, replace(last, tier=tier))
        reasons = {j: str(p.reason) for j, p in schedule(snap(cluster, pending, (hold,), labs=labs),
                                                         Policy.parse(order)).pending_by_id().items()}
        assert reasons[first].startswith("next in line") and reasons[second].startswith("1 job ahead"), reasons


def test_a_users_priority_reorders_their_jobs_within_a_tier_only() -> None:
    cluster = nodes(1, gpus=1)
    hold = running(job(90, user="x"), {"n0": (0,)}, end=1000.0)
    # alice's job 1 is in tier 1; her job 3 has priority 100 but stays in tier 0, behind bob's earlier job 2
    pending = (job(1, user="alice", tier=1), job(2, user="bob"), job(3, user="alice", priority=100),
               job(4, user="alice"))
    d = schedule(snap(cluster, pending, (hold,)), Policy.default())
    reasons = {j: str(p.reason) for j, p in d.pending_by_id().items()}
    assert reasons[1].startswith("next in line") and reasons[2].startswith("1 job ahead")
    assert reasons[3].startswith("2 jobs ahead") and reasons[4].startswith("3 jobs ahead")


def test_a_higher_tier_does_not_preempt_a_job_of_its_own_class() -> None:
    victim = running(job(10, 4, user="x"), {"n0": (0, 1, 2, 3)}, start=90.0, end=5000.0)
    urgent = job(1, 4, tier=9)
    d = schedule(snap(nodes(1), (urgent,), (victim,)), Policy.parse("gittins+preempt+backfill"))
    assert not d.preemptions
    assert str(d.pending_by_id()[1].reason).startswith("next in line")
