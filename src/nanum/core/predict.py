"""Run-time prediction: what a live scheduler can know about how long a job will run.

`HistoryPredictor` learns online from finished jobs: the mean of the most recent run times of the same user and
job name, else the same user and GPU count, else the same lab and GPU count, else everything seen. It never sees
a job's own future; the simulator feeds it only jobs that have already finished.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Hashable
from typing import Protocol

from nanum.core.model import Job


class Predictor(Protocol):
    def predict(self, job: Job) -> float | None:
        """Expected run time of `job` in seconds, or None when there is nothing to go on. Must not mutate."""
        ...


class HistoryPredictor:
    """Mean of the last `window` run times per key, most specific key first."""

    name = "history"

    def __init__(self, window: int = 20) -> None:
        self._window = window
        self._runs: dict[Hashable, deque[float]] = {}
        self._sums: dict[Hashable, float] = {}
        self._memo: dict[tuple[str, str, str, int], float | None] = {}  # forgotten at every observation

    @staticmethod
    def _keys(job: Job) -> tuple[Hashable, ...]:
        return (
            ("un", job.user, job.name) if job.name else ("u", job.user, job.gpus),
            ("ug", job.user, job.gpus),
            ("lg", job.lab, job.gpus),
            ("all",),
        )

    def observe(self, job: Job, run_time: float) -> None:
        """Learn that `job` ran for `run_time` seconds (to completion, not cut short by preemption)."""
        self._memo.clear()
        for key in set(self._keys(job)):
            runs = self._runs.setdefault(key, deque())
            runs.append(run_time)
            self._sums[key] = self._sums.get(key, 0.0) + run_time
            if len(runs) > self._window:
                self._sums[key] -= runs.popleft()

    def predict(self, job: Job) -> float | None:
        memo_key = (job.user, job.name, job.lab, job.gpus)
        if memo_key in self._memo:
            return self._memo[memo_key]
        found = None
        for key in self._keys(job):
            runs = self._runs.get(key)
            if runs:
                found = self._sums[key] / len(runs)
                break
        self._memo[memo_key] = found
        return found


def expected_runtime(job: Job, predictor: Predictor | None) -> float | None:
    """The run time the scheduler plans with: the prediction capped by the time limit, or either alone."""
    predicted = predictor.predict(job) if predictor is not None else None
    if predicted is None:
        return job.time_limit
    if job.time_limit is None:
        return predicted
    return min(predicted, job.time_limit)
