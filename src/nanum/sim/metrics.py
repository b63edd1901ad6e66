"""Metrics of one simulated run: JCT, queueing delay, utilisation, fairness, preemption cost, predictor error.

Definitions (DESIGN.md): JCT = end − submit; queueing delay = all time spent pending, also after a preemption
(JCT minus the time the job held GPUs); utilisation = allocated GPU-seconds / (GPUs × (last end − first submit)).
Slowdown is the bounded slowdown JCT / max(run time, 10 s), at least 1, so that one-second jobs do not dominate;
fairness is Jain's index of the labs' average slowdowns (1: every lab is slowed down alike). Lost GPU-hours are
the GPU time of runs thrown away by preemption (work since the last checkpoint, plus restart costs).
Predictor error compares what the scheduler planned with at a job's first start to its true run time.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from typing import Any

from nanum.sim.engine import SimResult
from nanum.sim.jobs import SimJob

SLOWDOWN_FLOOR = 10.0


def percentile(values: Sequence[float], q: float) -> float:
    """Linear-interpolated percentile (q in 0..100) of sorted or unsorted values; 0 for none."""
    if not values:
        return 0.0
    data = sorted(values)
    pos = (len(data) - 1) * q / 100.0
    lo, hi = math.floor(pos), math.ceil(pos)
    return data[lo] + (data[hi] - data[lo]) * (pos - lo)


def run_time(job: SimJob) -> float:
    return job.work + job.lost


def jct(job: SimJob) -> float:
    assert job.end is not None
    return job.end - job.trace.submit_time


def queue_delay(job: SimJob) -> float:
    return max(jct(job) - run_time(job), 0.0)


def slowdown(job: SimJob) -> float:
    return max(1.0, jct(job) / max(job.work, SLOWDOWN_FLOOR))


def jain(values: Sequence[float]) -> float:
    """Jain's fairness index: 1 when all values are equal, 1/n when one value holds everything."""
    if not values or not any(values):
        return 1.0
    return sum(values) ** 2 / (len(values) * sum(v * v for v in values))


def _dist(values: list[float]) -> dict[str, float]:
    return {
        "avg": round(statistics.fmean(values), 1) if values else 0.0,
        "p50": round(percentile(values, 50), 1),
        "p95": round(percentile(values, 95), 1),
        "p99": round(percentile(values, 99), 1),
    }


def per_lab(done: list[SimJob]) -> dict[str, dict[str, float]]:
    labs: dict[str, list[SimJob]] = {}
    for job in done:
        labs.setdefault(job.lab, []).append(job)
    return {
        lab: {
            "jobs": len(jobs),
            "avg_jct": round(statistics.fmean(jct(j) for j in jobs), 1),
            "avg_queue_delay": round(statistics.fmean(queue_delay(j) for j in jobs), 1),
            "avg_slowdown": round(statistics.fmean(slowdown(j) for j in jobs), 3),
            "gpu_hours": round(sum(run_time(j) * j.total_gpus for j in jobs) / 3600.0, 1),
        }
        for lab, jobs in sorted(labs.items())
    }


def predictor_error(jobs: list[SimJob], name: str) -> dict[str, Any]:
    pairs = [(j.predicted, j.work) for j in jobs if j.first_start is not None and j.predicted is not None]
    started = sum(1 for j in jobs if j.first_start is not None)
    if not pairs:
        return {"name": name, "jobs_with_prediction": 0, "jobs_started": started}
    ratios = [p / w for p, w in pairs]
    return {
        "name": name,
        "jobs_with_prediction": len(pairs),
        "jobs_started": started,
        "mape_percent": round(100 * statistics.fmean(abs(p - w) / w for p, w in pairs), 1),
        "median_ratio": round(statistics.median(ratios), 3),
        "within_2x_percent": round(100 * sum(1 for r in ratios if 0.5 <= r <= 2.0) / len(ratios), 1),
        "mean_abs_error_s": round(statistics.fmean(abs(p - w) for p, w in pairs), 1),
    }


def summarize(result: SimResult, *, policy_text: str = "", trace: str = "") -> dict[str, Any]:
    """summary.json for one run."""
    jobs = result.jobs
    done = [j for j in jobs if j.end is not None]
    unsched = [j for j in jobs if j.unschedulable]
    reasons: dict[str, int] = {}
    for j in unsched:
        reasons[j.unschedulable] = reasons.get(j.unschedulable, 0) + 1
    first = min((j.trace.submit_time for j in jobs), default=0.0)
    last = max((j.end for j in done if j.end is not None), default=first)
    span = max(last - first, 1e-9)
    busy = sum((s.end - s.start) * len(s.gpus) for s in result.segments)
    labs = per_lab(done)
    slowdowns = [lab["avg_slowdown"] for lab in labs.values()]
    jcts = [jct(j) for j in done]
    delays = [queue_delay(j) for j in done]
    return {
        "policy": result.policy.label,
        "policy_text": policy_text or result.policy.label,
        "lend": result.policy.lend,
        "reclaim": result.policy.reclaim,
        "cluster": result.cluster.name,
        "total_gpus": result.total_gpus,
        "trace": trace,
        "jobs": len(jobs),
        "finished": len(done),
        "unfinished": len(jobs) - len(done) - len(unsched),
        "unschedulable": {"count": len(unsched), "reasons": reasons},
        "jct": _dist(jcts),
        "queue_delay": _dist(delays),
        "makespan": round(last - first, 1),
        "utilisation": round(busy / (result.total_gpus * span), 4) if result.total_gpus else 0.0,
        "preemptions": sum(j.preemptions for j in jobs),
        "lost_gpu_hours": round(sum(j.lost * j.total_gpus for j in jobs) / 3600.0, 1),
        "fairness": {
            "jain_lab_slowdown": round(jain(slowdowns), 4),
            "max_lab_avg_slowdown": max(slowdowns, default=0.0),
        },
        "avg_slowdown": round(statistics.fmean(slowdown(j) for j in done), 3) if done else 0.0,
        "labs": labs,
        "predictor": predictor_error(jobs, result.options.predictor),
        "options": {
            "restart_cost_s": result.options.restart_cost,
            "checkpoint_interval_s": result.options.checkpoint_interval,
            "half_life_s": result.options.half_life,
        },
        "simulator": {
            "wall_seconds": round(result.wall_seconds, 2),
            "jobs_per_second": round(len(jobs) / result.wall_seconds, 1) if result.wall_seconds else 0.0,
            "cycles": result.cycles,
            "instants": result.instants,
            **{k.replace(" ", "_"): v for k, v in result.stats.items() if k != "preemptions"},
        },
    }
