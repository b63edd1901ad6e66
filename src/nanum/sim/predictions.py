"""How good are run-time predictions? An online replay of a trace (`nanum report predictions`).

Jobs are taken in submit order. Before a job is submitted the predictor has learned exactly the jobs that had
finished by then (a job finishes no sooner than its submit time plus its run time; no future leaks in), so each
prediction is one the live server could have made. For every job with a prediction: the absolute error, and whether
the prediction is within 2x of the true run time (half to double), and the shares of jobs whose relative error
|estimate - truth| / truth is at most 10 %, 50 %, 100 % and 1000 % (`ERROR_BANDS`: the bands in which the Helios
artifact states its estimator's error distribution). The same for the user's time limit, where the trace has one
(the estimate a scheduler has without a predictor).

The predictor is the live one (`nanum.core.HistoryPredictor`): mean of the last run times of the same user and job
name, else user and GPUs, else lab and GPUs, else everyone.
"""

from __future__ import annotations

import heapq
import math
import statistics
from dataclasses import dataclass
from typing import Any

from nanum.core import HistoryPredictor, Job
from nanum.sim.cluster import ClusterSpec, NodeGroup
from nanum.sim.jobs import make_jobs
from nanum.sim.traces import TraceJob

#: Relative-error bands, percent: a job counts in a band when |estimate - truth| / truth is at most that.
ERROR_BANDS = (10, 50, 100, 1000)


@dataclass(frozen=True, slots=True)
class Accuracy:
    """One estimator over one trace: how many jobs it covered and how close it came."""

    name: str
    jobs: int
    covered: int
    median_abs_error_s: float | None
    within_2x_percent: float | None
    median_ratio: float | None  # estimate / truth: above 1 over-estimates
    #: percent of covered jobs (with a run time above 0) in each of `ERROR_BANDS`, keyed like "10%"
    error_within: dict[str, float] | None = None

    def as_dict(self) -> dict[str, Any]:
        return {"estimator": self.name, "jobs": self.jobs, "covered": self.covered,
                "covered_percent": round(100.0 * self.covered / self.jobs, 1) if self.jobs else None,
                "median_abs_error_s": self.median_abs_error_s, "within_2x_percent": self.within_2x_percent,
                "median_ratio": self.median_ratio, "error_within": self.error_within}


def evaluate(trace: list[TraceJob]) -> list[Accuracy]:
    """The live predictor and the users' time limits, replayed online over `trace`."""
    widest = max((t.num_gpus for t in trace), default=8)
    spec = ClusterSpec(name="predictions", groups=(NodeGroup(count=max(1, math.ceil(widest / 8)), gpus=8),))
    jobs = make_jobs(trace, spec.build_nodes(), lend=True)
    predictor = HistoryPredictor()
    finishing: list[tuple[float, int]] = []  # (submit + run time, index): learned once that time has passed
    core: dict[int, Job] = {}
    predicted: list[tuple[float, float]] = []
    limits: list[tuple[float, float]] = []
    for sj in jobs:
        now = sj.trace.submit_time
        while finishing and finishing[0][0] <= now:
            _, i = heapq.heappop(finishing)
            predictor.observe(core.pop(i), jobs[i].trace.duration)
        job = core[sj.index] = sj.core_job()
        truth = sj.trace.duration
        guess = predictor.predict(job)
        if guess is not None:
            predicted.append((guess, truth))
        if sj.trace.time_limit is not None:
            limits.append((sj.trace.time_limit, truth))
        heapq.heappush(finishing, (now + truth, sj.index))
    return [_accuracy("history predictor", len(jobs), predicted), _accuracy("time limit", len(jobs), limits)]


def _accuracy(name: str, jobs: int, pairs: list[tuple[float, float]]) -> Accuracy:
    if not pairs:
        return Accuracy(name, jobs, 0, None, None, None)
    errors = [abs(p - t) for p, t in pairs]
    ratios = [p / t for p, t in pairs if t > 0]
    within = sum(1 for r in ratios if 0.5 <= r <= 2.0)
    if not ratios:
        return Accuracy(name, jobs, len(pairs), round(statistics.median(errors), 1), None, None)
    bands = {f"{band}%": round(100.0 * sum(1 for r in ratios if abs(r - 1.0) * 100.0 <= band) / len(ratios), 1)
             for band in ERROR_BANDS}
    return Accuracy(name, jobs, len(pairs), round(statistics.median(errors), 1),
                    round(100.0 * within / len(ratios), 1), round(statistics.median(ratios), 3), bands)
