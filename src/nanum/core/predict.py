"""Run-time prediction: what a live scheduler can know about how long a job will run.

`HistoryPredictor` learns online from finished jobs: the mean of the most recent run times of the same user and
job name, else the same user and GPU count, else the same lab and GPU count, else everything seen. It never sees
a job's own future; the simulator feeds it only jobs that have already finished.

It also keeps the distribution of the service (GPU-seconds) that recent similar jobs needed, and from it gives
the Gittins index of a job that has received some service: how likely the job is to finish per GPU-second still
spent on it, at the best stopping point. The rank is optimal for mean response time on one server when run
times are unknown but their distribution is (Gittins 1989; Aalto, Ayesta and Righter 2009). Example: similar jobs
needed 1, 1 and 10 GPU-hours. A new job finishes within 1 GPU-hour with probability 2/3 and spends
(1 + 1 + 1) / 3 = 1 GPU-hour on average doing so: index 2/3 per GPU-hour. A job that has already received 2
GPU-hours can only be the 10 GPU-hour kind: 8 more GPU-hours for certain, index 1/8.
"""

from __future__ import annotations

import bisect
import math
from collections import deque
from collections.abc import Hashable
from dataclasses import dataclass
from itertools import accumulate
from typing import Any, Protocol

from nanum.core.model import Job, JobId


class Predictor(Protocol):
    def predict(self, job: Job) -> float | None:
        """Expected run time of `job` in seconds, or None when there is nothing to go on. Must not mutate."""
        ...


@dataclass(frozen=True, slots=True)
class Prediction:
    """What `HistoryPredictor.predict` answers for a job, and which of its histories answered: `seconds` is None
    when none did (the scheduler then plans with the job's time limit)."""

    seconds: float | None
    basis: str


#: finished jobs kept per key for the service distribution, and how many a key needs before it is used.
SERVICE_WINDOW = 200
MIN_SAMPLES = 5
#: from how many samples left `gittins_index` computes with arrays rather than a Python loop (measured: 3.8 µs
#: against 5.0 µs at 24 samples, 6.5 µs against 5.9 µs at 32, 27.5 µs against 5.5 µs at 200).
VECTOR_FROM = 32
#: jobs whose service key is remembered before the memo starts afresh (it only saves time).
KEY_MEMO = 65536
_UNKNOWN: Hashable = object()


class HistoryPredictor:
    """Mean of the last `window` run times per key, most specific key first; the service distribution of the
    last `service_window` jobs per key for `gittins_index`."""

    name = "history"

    def __init__(self, window: int = 20, service_window: int = SERVICE_WINDOW) -> None:
        self._window, self._service_window = window, service_window
        self._runs: dict[Hashable, deque[float]] = {}
        self._sums: dict[Hashable, float] = {}
        self._memo: dict[tuple[str, str, str, int], float | None] = {}  # forgotten at every observation
        self._service: dict[Hashable, deque[float]] = {}  # GPU-seconds of the last jobs per key
        self._tables: dict[Hashable, tuple[list[float], list[float]]] = {}  # sorted service, prefix sums
        self._arrays: dict[Hashable, tuple[Any, Any]] = {}  # the same as arrays, for `_best_quantum`
        self._indices: dict[Hashable, dict[float | tuple[float, float], float]] = {}  # attained (, known) -> index
        # job -> the key its index comes from (a job's user, name, lab and GPUs never change). A key's sample
        # count only grows, so the choice changes only when some key reaches MIN_SAMPLES: then it is forgotten.
        self._chosen: dict[JobId, Hashable | None] = {}

    @staticmethod
    def _keys(job: Job) -> tuple[Hashable, ...]:
        return (
            ("un", job.user, job.name) if job.name else ("u", job.user, job.gpus),
            ("ug", job.user, job.gpus),
            ("lg", job.lab, job.gpus),
            ("all",),
        )

    @staticmethod
    def likeness(job: Job) -> Hashable:
        """All that `predict` and `gittins_index` read of a job (its keys above): jobs alike in it are predicted
        alike, and indexed alike at the same service received and known (`nanum.core.ordering.ordered`)."""
        return (job.user, job.name, job.lab, job.gpus, job.nodes)

    def observe(self, job: Job, run_time: float) -> None:
        """Learn that `job` ran for `run_time` seconds (to completion, not cut short by preemption)."""
        self._memo.clear()
        window, runs_of, sums = self._window, self._runs, self._sums
        for key in self._keys(job):  # distinct by their tags
            runs = runs_of.get(key)
            if runs is None:
                runs = runs_of[key] = deque()
            runs.append(run_time)
            sums[key] = sums.get(key, 0.0) + run_time
            if len(runs) > window:
                sums[key] -= runs.popleft()
        service_of, tables, arrays = self._service, self._tables, self._arrays
        for key in set(self._service_keys(job)):  # a job without a name has its ("ug", ...) key twice
            service = service_of.get(key)
            if service is None:
                service = service_of[key] = deque(maxlen=self._service_window)
            service.append(run_time * job.total_gpus)
            if len(service) == MIN_SAMPLES:
                self._chosen.clear()
            tables.pop(key, None)
            arrays.pop(key, None)
            self._indices.pop(key, None)
        self._chosen.pop(job.id, None)

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

    def explain(self, job: Job) -> Prediction:
        """`predict(job)` with the history it came from, e.g. "mean of the last 14 finished jobs of alice named
        train". Reads only: it neither fills nor trusts the memo, so it may be asked between cycles."""
        for key in self._keys(job):
            runs = self._runs.get(key)
            if runs:
                return Prediction(self._sums[key] / len(runs), f"mean of {_basis(key, len(runs), job)}")
        return Prediction(None, "no similar finished job")

    @staticmethod
    def _service_keys(job: Job) -> tuple[Hashable, ...]:
        return (
            ("un", job.user, job.name) if job.name else ("ug", job.user, job.total_gpus),
            ("ug", job.user, job.total_gpus),
            ("lg", job.lab, job.total_gpus),
            ("l", job.lab),
            ("all",),
        )

    def _service_key(self, job: Job) -> Hashable | None:
        """The most specific of the job's keys with at least `MIN_SAMPLES` finished jobs, else None."""
        for key in self._service_keys(job):
            runs = self._service.get(key)
            if runs is not None and len(runs) >= MIN_SAMPLES:
                return key
        return None

    def gittins_index(self, job: Job, attained: float, more_than: float = 0.0) -> float | None:
        """The Gittins index of `job` after `attained` GPU-seconds, per GPU-second (higher: run it first), from the
        most specific key with at least `MIN_SAMPLES` finished jobs; None with no such key.

        With S the service a similar job needs, the index is the best, over quanta q, of
        P(S - attained <= q | S > known) / E[min(S - attained, q) | S > known]; q ranges over the samples, and
        `known` is the larger of `attained` and `more_than`, what the job is known to need beyond its own service
        (a running sibling's, see nanum.core.bursts). A job known to need more than every sample is expected to
        need as much again as that."""
        known = attained if more_than <= attained else max(attained, _coarse(more_than))
        key = self._chosen.get(job.id, _UNKNOWN)
        if key is _UNKNOWN:
            if len(self._chosen) >= KEY_MEMO:
                self._chosen.clear()
            key = self._chosen[job.id] = self._service_key(job)
        if key is None:
            return None
        memo = self._indices.get(key)
        if memo is None:
            memo = self._indices[key] = {}
        memo_key = attained if known == attained else (attained, known)
        hit = memo.get(memo_key)
        if hit is not None:
            return hit
        if len(memo) >= KEY_MEMO:  # `known` moves with time: a key nobody observes anew must not grow forever
            memo.clear()
        table = self._tables.get(key)
        if table is None:
            ordered = sorted(self._service[key])
            table = self._tables[key] = (ordered, list(accumulate(ordered, initial=0.0)))
        ordered, prefix = table
        first = bisect.bisect_right(ordered, known)  # samples this job is known to need more than: ordered[first:]
        left = len(ordered) - first
        if not left:
            best = 1.0 / max(2 * known - attained, 1.0)  # more than them all: expect as much again
        else:
            # quantum = the k-th smallest remaining service: k of `left` jobs finish within it, and each job
            # spends its remaining service up to the quantum: (sum of the k smallest) + (left - k) * k-th smallest
            # - left * attained in all.
            best, offset = 0.0, prefix[first] + left * attained
            if left >= VECTOR_FROM:
                best = self._best_quantum(key, first, left, offset)
            else:
                for k, (service, total) in enumerate(zip(ordered[first:], prefix[first + 1:], strict=True), start=1):
                    spent = total - offset + (left - k) * service
                    value = k / (spent if spent > 1.0 else 1.0)
                    if value > best:
                        best = value
        memo[memo_key] = best
        return best

    def _best_quantum(self, key: Hashable, first: int, left: int, offset: float) -> float:
        """The loop of `gittins_index` over the `left` largest samples of `key`, as array arithmetic: the same
        operations in the same order, so the same value to the last bit, several times faster for long tables."""
        import numpy as np

        arrays = self._arrays.get(key)
        if arrays is None:
            ordered, prefix = self._tables[key]
            arrays = self._arrays[key] = (np.array(ordered), np.array(prefix))
        k = np.arange(1.0, left + 1.0)
        spent = arrays[1][first + 1:] - offset
        spent += (left - k) * arrays[0][first:]
        np.maximum(spent, 1.0, out=spent)
        return float((k / spent).max())


def _basis(key: Hashable, count: int, job: Job) -> str:
    """Which finished jobs `key` (one of `HistoryPredictor._keys`) stands for."""
    jobs = "the last finished job" if count == 1 else f"the last {count} finished jobs"
    gpus = f"{job.gpus} GPU" + ("" if job.gpus == 1 else "s") + (" per node" if job.nodes > 1 else "")
    tag = key[0] if isinstance(key, tuple) else ""
    if tag == "un":
        return f"{jobs} of {job.user} named {job.name}"
    if tag in ("u", "ug"):
        return f"{jobs} of {job.user} with {gpus}"
    if tag == "lg":
        return f"{jobs} of lab {job.lab} with {gpus}"
    return f"{jobs} of anyone"


def _coarse(service: float) -> float:
    """`service` rounded down to a sixteenth of an octave (at most 4.4 % less): a sibling's service grows at every
    cycle, and indices for coarse values can be remembered."""
    return 2.0 ** (math.floor(math.log2(service) * 16.0) / 16.0) if service >= 1.0 else 0.0


def gittins_index(job: Job, attained: float, predictor: Predictor | None, more_than: float = 0.0) -> float | None:
    """`predictor.gittins_index` where the predictor learns distributions, else None."""
    index = getattr(predictor, "gittins_index", None)
    if index is None:
        return None
    value: float | None = index(job, attained, more_than)
    return value


def expected_runtime(job: Job, predictor: Predictor | None) -> float | None:
    """The run time the scheduler plans with: the prediction capped by the time limit, or either alone."""
    predicted = predictor.predict(job) if predictor is not None else None
    if predicted is None:
        return job.time_limit
    if job.time_limit is None:
        return predicted
    return min(predicted, job.time_limit)


def planned_end(start: float, runtime: float | None, *, restart: float = 0.0, done: float = 0.0) -> float | None:
    """The one definition of a run's expected end: it starts at `start`, spends `restart` seconds restarting, then
    works what is left of its planned `runtime` after the `done` seconds it saved before. None: unknown."""
    return None if runtime is None else start + restart + max(runtime - done, 0.0)


def expected_end(job: Job, predictor: Predictor | None, start: float, *, restart: float = 0.0,
                 done: float = 0.0) -> float | None:
    """`planned_end` with the run time the scheduler plans with (`expected_runtime`)."""
    return planned_end(start, expected_runtime(job, predictor), restart=restart, done=done)


def overdue_end(start: float, expected_end: float, now: float, time_limit: float | None = None) -> float:
    """When a run that is still going at `now`, past its `expected_end`, is now expected to end: it takes as long
    again as planned (at least a minute), doubling until that lies ahead of `now`, and never past its time limit.
    So an estimate that waits on it moves on with it instead of reading "in 0s" for as long as it overruns.

    Example: planned for 1 h from 10:00, still running at 11:30: expected to end at 12:00, then at 14:00."""
    planned = max(expected_end - start, 60.0)
    end = start + planned
    while end <= now:
        planned *= 2
        end = start + planned
    if time_limit is not None and start + time_limit > now:
        end = min(end, start + time_limit)
    return end
