"""The event loop: cached cycles equal fresh ones, predictions are learned online, limits and budgets hold."""

from __future__ import annotations

import random

import pytest

from nanum.core import Decisions, Policy, Snapshot, schedule
from nanum.sim import SimOptions, Simulation, TraceJob, parse_cluster, simulate
from nanum.sim.cluster import cluster_from_dict
from nanum.sim.metrics import summarize

TWO_LABS = {"lend": True, "nodes": [{"lab": "a", "count": 2, "gpus": 4}, {"lab": "b", "count": 2, "gpus": 4}]}


def synthetic(n: int, seed: int) -> list[TraceJob]:
    rng = random.Random(seed)
    t, jobs = 0.0, []
    for i in range(n):
        t += rng.expovariate(1 / 40)
        jobs.append(TraceJob(job_id=str(i), submit_time=round(t), duration=rng.choice([30, 60, 300, 900, 3600]),
                             num_gpus=rng.choice([1, 1, 1, 2, 4, 8]), lab=rng.choice("ab"),
                             user=f"u{rng.randint(1, 4)}"))
    return jobs


@pytest.mark.parametrize("text, lend", [("fifo+backfill", True), ("las+backfill", True), ("shortest+nobackfill", False),
                                        ("fairshare+backfill", True), ("las+backfill+preempt", False)])
def test_every_cycle_with_the_cache_decides_like_a_fresh_cycle(text: str, lend: bool) -> None:
    spec = cluster_from_dict({**TWO_LABS, "lend": lend})
    sim = Simulation(synthetic(400, seed=3), spec, Policy.parse(text, lend=lend), SimOptions(restart_cost=5))
    cached = sim.core.decide

    def both(snap: Snapshot) -> Decisions:
        fresh = schedule(snap, sim.policy, sim.predictor)
        assert cached(snap) == Decisions(fresh.starts, fresh.preemptions, ())  # the simulator reads no reasons
        return fresh

    sim.core.decide = both
    result = sim.run()
    assert result.cycles > 100 and sim.core.cache.reuses > result.cycles // 2
    assert sum(j.end is not None for j in result.jobs) == 400


def test_predictions_are_learned_only_from_finished_jobs() -> None:
    trace = [TraceJob(job_id="1", submit_time=0, duration=100, num_gpus=1, lab="a"),
             TraceJob(job_id="2", submit_time=50, duration=50, num_gpus=1, lab="a"),
             TraceJob(job_id="3", submit_time=200, duration=10, num_gpus=1, lab="a")]
    result = simulate(trace, parse_cluster("1x4"), Policy.parse("fifo"))
    assert [j.predicted for j in result.jobs] == [None, None, 75.0]  # job 3 sees the mean of jobs 1 and 2
    error = summarize(result)["predictor"]
    assert (error["jobs_with_prediction"], error["mape_percent"], error["median_ratio"]) == (1, 650.0, 7.5)


def test_a_job_wider_than_its_partition_is_reported_not_dropped() -> None:
    trace = [TraceJob(job_id="w", submit_time=0, duration=10, num_gpus=16, lab="a")]
    partitioned = simulate(trace, cluster_from_dict({**TWO_LABS, "lend": False}), Policy.parse("fifo", lend=False))
    assert summarize(partitioned)["unschedulable"] == {
        "count": 1, "reasons": {"needs 4 nodes with 4 GPUs each; only 2 such nodes exist": 1}}
    pooled = simulate(trace, cluster_from_dict(TWO_LABS), Policy.parse("fifo"))
    assert pooled.jobs[0].end == 10 and pooled.jobs[0].nodes == 4


def test_time_limit_ends_a_job_early() -> None:
    trace = [TraceJob(job_id="t", submit_time=0, duration=500, num_gpus=1, time_limit=300)]
    job = simulate(trace, parse_cluster("1x1"), Policy.parse("fifo")).jobs[0]
    assert (job.end, job.status) == (300, "timeout")


def test_budget_blocks_until_the_next_period() -> None:
    spec = cluster_from_dict({"lend": False, "nodes": [{"count": 1, "gpus": 2}],
                              "labs": {"a": {"monthly_gpu_hours": 1}}})
    trace = [TraceJob(job_id="1", submit_time=0, duration=7200, num_gpus=1, lab="a"),
             TraceJob(job_id="2", submit_time=4000, duration=10, num_gpus=1, lab="a")]
    result = simulate(trace, spec, Policy.parse("fifo", lend=False))
    assert result.jobs[1].first_start == 30 * 86400  # used 1.1 GPU-hours by t=4000: waits for period 2


def test_fairshare_ranks_by_the_usage_labs_accrued() -> None:
    # Lab a held the only GPU for 10 hours; then a and b submit a job each at once: b's goes first.
    trace = [TraceJob(job_id="a0", submit_time=0, duration=36000, num_gpus=1, lab="a"),
             TraceJob(job_id="a1", submit_time=36000, duration=100, num_gpus=1, lab="a"),
             TraceJob(job_id="b1", submit_time=36000, duration=100, num_gpus=1, lab="b")]
    jobs = simulate(trace, parse_cluster("1x1"), Policy.parse("fairshare")).jobs
    assert [(j.trace.job_id, j.first_start) for j in jobs] == [("a0", 0), ("a1", 36100), ("b1", 36000)]


def test_progress_is_reported() -> None:
    seen: list[tuple[int, int]] = []
    simulate(synthetic(50, seed=1), cluster_from_dict(TWO_LABS), Policy.parse("fifo"),
             progress=lambda done, total: seen.append((done, total)))
    assert seen[-1] == (50, 50)
