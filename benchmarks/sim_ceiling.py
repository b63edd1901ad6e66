"""How far the default policy is from what it could reach with more knowledge of run times, on one setup.

The default (`gittins+binpack+backfill+preempt`) learns the service similar jobs needed online. This replays it
three ways on the paired settings of `sim_paired.py` (nominal; restart 55 s, 65 s; checkpoint 1,790 s, 1,810 s),
and on the Helios simulator's preemption model (a preempted job loses no work and pays 7 s to restart: a
checkpoint every second):

1. `online`: as `nanum sim` runs it (the history predictor, learning as jobs finish);
2. `known distributions`: the index computed from every job's true service of the whole trace, grouped by the
   predictor's keys and known from the first second: the most any policy can learn from what the trace says
   about a job before it runs (lab, GPU count; Philly has no user or job name). No policy that ranks by those
   keys can rank better;
3. `clairvoyant`: the index is 1 / the job's true remaining GPU-seconds, so the order is shortest remaining
   first, within the same two classes and the same preemption rule. A reference only.

    .venv/bin/python benchmarks/sim_ceiling.py [--setup philly-partitioned]

About 25 s per replay on a 2-core machine: 18 replays, under 10 minutes.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import sim_paired
import sim_study

from nanum.core import HistoryPredictor, Job, Policy
from nanum.core.policy import DEFAULT_POLICY
from nanum.core.predict import Predictor
from nanum.sim import SimOptions, parse_cluster
from nanum.sim.engine import Simulation
from nanum.sim.metrics import summarize

#: The Helios simulator's preemption: no work lost, a 7-second restart (its cost for one GPU; 30 s up to 8 GPUs).
PEER = ("peer model", 7.0, 1.0)


class KnownDistributions(HistoryPredictor):
    """Every job's true service, grouped by the predictor's keys, known before the replay starts; never updated."""

    def __init__(self, truth: list[tuple[Job, float]]) -> None:
        super().__init__(window=len(truth) + 1, service_window=len(truth) + 1)
        for job, run_time in truth:
            super().observe(job, run_time)

    def observe(self, job: Job, run_time: float) -> None:
        """Nothing new to learn: the whole trace is known."""


class Clairvoyant:
    """The true run time, and an index of 1 / the true remaining GPU-seconds."""

    name = "clairvoyant"

    def __init__(self, truth: dict[int, float]) -> None:
        self._truth = truth

    def predict(self, job: Job) -> float | None:
        return self._truth[job.id]

    def gittins_index(self, job: Job, attained: float, more_than: float = 0.0) -> float | None:
        return 1.0 / max(self._truth[job.id] * job.total_gpus - attained, 1.0)


class Replay(Simulation):
    knowledge = "online"

    def _make_predictor(self) -> Predictor | None:
        if self.knowledge == "known distributions":
            return KnownDistributions([(sj.core_job(), sj.work) for sj in self.jobs])
        if self.knowledge == "clairvoyant":
            return Clairvoyant({sj.index: sj.work for sj in self.jobs})
        return HistoryPredictor()


def measure(jobs: list[Any], setup: str, knowledge: str, restart: float, checkpoint: float) -> float:
    spec = parse_cluster(str(sim_study.ROOT / "examples" / sim_study.SETUPS[setup][1]))
    sim = type("R", (Replay,), {"knowledge": knowledge})(
        jobs, spec, Policy.parse(DEFAULT_POLICY, lend=spec.lend),
        SimOptions(restart_cost=restart, checkpoint_interval=checkpoint))
    return float(summarize(sim.run(), policy_text=DEFAULT_POLICY, trace=setup)["queue_delay"]["avg"])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--setup", default="philly-partitioned", choices=sorted(sim_study.SETUPS))
    args = parser.parse_args()
    jobs = sim_study.traces({sim_study.SETUPS[args.setup][0]})[sim_study.SETUPS[args.setup][0]]
    settings = (*sim_paired.SETTINGS, PEER)
    print(f"{args.setup}: average queueing delay (s) of {DEFAULT_POLICY}")
    print(f"{'run times known':22}" + "".join(f"{label:>12}" for label, _, _ in settings) + f"{'mean of 5':>11}")
    for knowledge in ("online", "known distributions", "clairvoyant"):
        row = [measure(jobs, args.setup, knowledge, restart, ckpt) for _, restart, ckpt in settings]
        paired = row[:len(sim_paired.SETTINGS)]
        cells = "".join(f"{q:>12,.1f}" for q in row)
        print(f"{knowledge:22}{cells}{sum(paired) / len(paired):>11,.1f}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
