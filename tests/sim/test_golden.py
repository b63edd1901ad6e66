"""Golden traces with hand-checked schedules, one per behaviour: FIFO vs backfill vs shortest, gangs, reclaim.

Each expected schedule is worked out in the comments from the rules in docs/simulation.md; every run is also
written to disk and proven sound by the allocations checker.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from nanum.core import Policy
from nanum.sim import SimOptions, parse_cluster, read_trace, simulate
from nanum.sim.check import check_run
from nanum.sim.engine import SimResult
from nanum.sim.metrics import summarize
from nanum.sim.report import write_run

GOLDEN = Path(__file__).parent / "golden"
EXACT = SimOptions(predictor="none", restart_cost=10.0, checkpoint_interval=30.0)


def run(trace: str, cluster: str, policy: str, tmp_path: Path) -> tuple[SimResult, dict[str, tuple[float, float]]]:
    jobs, report = read_trace(GOLDEN / trace)
    assert not report.problems
    spec = parse_cluster(str(GOLDEN / cluster) if cluster.endswith(".toml") else cluster)
    result = simulate(jobs, spec, Policy.parse(policy, lend=spec.lend), EXACT)
    out = tmp_path / policy
    write_run(result, summarize(result, policy_text=policy), out, plots=False)
    assert check_run(out) == []
    return result, {j.trace.job_id: (j.first_start, j.end) for j in result.jobs if j.end is not None}


# backfill.csv on one 4-GPU node (time limits = run times):
#   A t=0 2 GPUs 100 s · B t=0 4 GPUs 50 s · C t=10 2 GPUs 20 s · D t=20 1 GPU 200 s
@pytest.mark.parametrize(
    "policy, expected",
    [
        # Strict FIFO: B waits for A (t=100); C and D wait behind B; both start when B ends at 150.
        pytest.param("fifo+nobackfill", {"A": (0, 100), "B": (100, 150), "C": (150, 170), "D": (150, 350)},
                     id="fifo"),
        # EASY: B reserved for t=100; C (ends at 30 < 100) backfills at 10; D (ends at 220) would delay B.
        pytest.param("fifo+backfill", {"A": (0, 100), "B": (100, 150), "C": (10, 30), "D": (150, 350)},
                     id="fifo+backfill"),
        # Shortest limit first: B (50 s) takes the node at 0; at 50 C (20 s) and A (100 s) start; D when C ends.
        pytest.param("shortest+backfill", {"B": (0, 50), "C": (50, 70), "A": (50, 150), "D": (70, 270)},
                     id="shortest"),
        # Nobody was ever preempted and there is one lab: LAS and fair-share fall back to FIFO order.
        pytest.param("las+backfill", {"A": (0, 100), "B": (100, 150), "C": (10, 30), "D": (150, 350)}, id="las"),
        pytest.param("fairshare+backfill", {"A": (0, 100), "B": (100, 150), "C": (10, 30), "D": (150, 350)},
                     id="fairshare"),
    ],
)
def test_backfill_golden(policy: str, expected: dict[str, tuple[float, float]], tmp_path: Path) -> None:
    result, times = run("backfill.csv", "1x4", policy, tmp_path)
    assert times == expected
    summary = summarize(result)
    submits = {"A": 0, "B": 0, "C": 10, "D": 20}
    assert summary["finished"] == 4 and summary["preemptions"] == 0
    assert summary["jct"]["avg"] == pytest.approx(sum(expected[j][1] - s for j, s in submits.items()) / 4, abs=0.1)
    assert summary["queue_delay"]["avg"] == pytest.approx(
        sum(expected[j][0] - s for j, s in submits.items()) / 4, abs=0.1)


def test_gangs_and_impossible_jobs(tmp_path: Path) -> None:
    # 2 nodes × 4 GPUs. wide (8) = 2 × 4 runs 0-100; six (6) = 2 × 3 waits for both nodes; huge (12) = 3 × 4
    # can never run (2 nodes) and is reported; one (1 GPU) waits behind six, then fits beside it.
    result, times = run("gangs.csv", "2x4", "fifo+nobackfill", tmp_path)
    assert times == {"wide": (0, 100), "six": (100, 150), "one": (100, 130)}
    shapes = {j.trace.job_id: (j.gpus, j.nodes) for j in result.jobs}
    assert shapes == {"wide": (4, 2), "six": (3, 2), "huge": (4, 3), "one": (1, 1)}
    summary = summarize(result)
    assert summary["unschedulable"] == {"count": 1, "reasons": {
        "needs 3 nodes with 4 GPUs each; only 2 such nodes exist": 1}}
    assert summary["finished"] == 3


def test_pooled_labs_reclaim_with_checkpoints(tmp_path: Path) -> None:
    # Labs a and b own one 2-GPU node each. J1 (b) runs on b's node; J2 (b) borrows a's idle node at 0.
    # At 40 J3 (a, 1 GPU) reclaims: J2 is preempted, keeps its checkpoint at 30 (loses 10 s), J3 runs 40-90.
    # J2 restarts at 90, pays 10 s restart, redoes the remaining 70 s: ends at 170 after 20 s of lost work.
    result, times = run("reclaim.csv", "two-labs.toml", "fifo+backfill", tmp_path)
    assert times == {"J1": (0, 100), "J2": (0, 170), "J3": (40, 90)}
    j2 = next(j for j in result.jobs if j.trace.job_id == "J2")
    assert (j2.preemptions, j2.lost, j2.attained) == (1, 20.0, 2 * (40 + 80))
    summary = summarize(result)
    assert summary["preemptions"] == 1
    assert summary["lost_gpu_hours"] == pytest.approx(round(20 * 2 / 3600, 1))
    assert summary["labs"]["b"]["avg_queue_delay"] == pytest.approx(25.0)  # J2 waited 40-90


def test_partitioned_labs_never_borrow(tmp_path: Path) -> None:
    # The same trace with lend = false: J2 waits for b's own node (t=100); J3 runs on a's node at once.
    jobs, _ = read_trace(GOLDEN / "reclaim.csv")
    spec = parse_cluster(str(GOLDEN / "two-labs.toml"))
    result = simulate(jobs, spec, Policy.parse("fifo+backfill", lend=False), EXACT)
    times = {j.trace.job_id: (j.first_start, j.end) for j in result.jobs}
    assert times == {"J1": (0, 100), "J2": (100, 200), "J3": (40, 90)}
    assert summarize(result)["preemptions"] == 0


def test_las_preempts_the_moment_a_new_job_arrives(tmp_path: Path) -> None:
    # One 4-GPU node. L (4 GPUs) has received 4 × 3,600 GPU-seconds by t=3600: class 1 (over 2 GPU-hours).
    # S (class 0) arrives then and preempts it at once; L, checkpointed at 3600, restarts when S ends (3700),
    # pays 10 s and finishes its remaining 6,400 s at 10,110.
    result, times = run("las.csv", "1x4", "las+backfill+preempt", tmp_path)
    assert times == {"L": (0, 10110), "S": (3600, 3700)}
    assert [(j.preemptions, j.lost) for j in result.jobs] == [(1, 10.0), (0, 0.0)]


def test_victims_lose_least_work_by_their_real_checkpoints() -> None:
    # Two 1-GPU nodes. V1 runs from 0, V2 from 100; both checkpoint every 1,800 s and are in class 1 by t=9000,
    # when S arrives. V1 checkpointed at 9000 (loses nothing), V2 at 7300 (would lose 1,700 s): V1 is the victim.
    from nanum.sim import TraceJob

    trace = [TraceJob(job_id="V1", submit_time=0, duration=20000, num_gpus=1),
             TraceJob(job_id="V2", submit_time=100, duration=20000, num_gpus=1),
             TraceJob(job_id="S", submit_time=9000, duration=100, num_gpus=1)]
    options = SimOptions(predictor="none", restart_cost=10.0, checkpoint_interval=1800.0)
    result = simulate(trace, parse_cluster("2x1"), Policy.parse("las+backfill+preempt"), options)
    got = {j.trace.job_id: (j.preemptions, j.lost, j.end) for j in result.jobs}
    assert got == {"V1": (1, 10.0, 9100 + 10 + 11000), "V2": (0, 0.0, 20100), "S": (0, 0.0, 9100)}
