"""Skipping cycles and partitions that can decide nothing leaves every decision as it was.

The reference replay (`skip = False`) runs a cycle at every change and shows the core every pending job and every
checkpoint. The default skips a cycle when no pending job fits, reclaims or outranks a running job, (labs on their
own nodes) shows the core only the partitions where one could, and shows checkpoints only to a cycle that preempts.
Both must write the same jobs.csv and allocations.csv.
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from nanum.core import Decisions, Policy, Snapshot
from nanum.sim import SimOptions, Simulation, TraceJob
from nanum.sim.cluster import cluster_from_dict
from nanum.sim.engine import SimResult
from nanum.sim.metrics import summarize
from nanum.sim.report import write_run

#: two labs on their own nodes and one shared node, so that partitions meet on the shared one.
NODES = [{"lab": "a", "count": 2, "gpus": 4}, {"lab": "b", "count": 2, "gpus": 4}, {"count": 1, "gpus": 4}]


def busy_trace(n: int, seed: int) -> list[TraceJob]:
    """Bursts of jobs long enough to cross the LAS classes (2 and 20 GPU-hours), so class preemption happens."""
    rng = random.Random(seed)
    t, jobs = 0.0, []
    for i in range(n):
        t += rng.expovariate(1 / 900) if i % 40 else 12 * 3600
        jobs.append(TraceJob(job_id=str(i), submit_time=round(t), num_gpus=rng.choice([1, 1, 2, 4, 8]),
                             duration=rng.choice([120, 900, 1800, 3600, 3 * 3600, 10 * 3600]), lab=rng.choice("abc"),
                             user=f"u{rng.randint(1, 3)}"))
    return jobs


def replay(policy: str, lend: bool, skip: bool, out: Path) -> tuple[SimResult, int]:
    spec = cluster_from_dict({"lend": lend, "nodes": NODES})
    sim = Simulation(busy_trace(160, seed=7), spec, Policy.parse(policy, lend=lend), SimOptions(restart_cost=30))
    sim.core.skip = skip
    decide, hidden = sim.core.decide, [0]

    def counting(snap: Snapshot) -> Decisions:
        hidden[0] += len(sim.pending) - len(snap.pending)
        return decide(snap)

    sim.core.decide = counting
    result = sim.run()
    write_run(result, summarize(result), out, plots=False)
    return result, hidden[0]


@pytest.mark.parametrize("policy, lend", [("las+backfill+preempt", False), ("las+backfill+preempt", True),
                                          ("fifo+backfill", False), ("las+nobackfill+preempt", False)])
def test_skipping_decides_exactly_like_a_cycle_at_every_change(policy: str, lend: bool, tmp_path: Path) -> None:
    every, shown_all = replay(policy, lend, skip=False, out=tmp_path / "every")
    skipped, hidden = replay(policy, lend, skip=True, out=tmp_path / "skip")
    for name in ("jobs.csv", "allocations.csv"):
        assert (tmp_path / "skip" / name).read_text() == (tmp_path / "every" / name).read_text(), name
    assert skipped.cycles < every.cycles and shown_all == 0
    assert (hidden > 0) == (not lend)  # partitions left out of cycles only when labs keep to their own nodes
    if "preempt" in policy:
        assert summarize(every)["preemptions"] > 0
