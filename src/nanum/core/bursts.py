"""Bursts: the jobs one user submits together with one request (a sweep, a loop of `nanum submit`), and what the
members that already run tell about those still waiting.

A job joins the burst of the same user's previous job with the same request (GPUs, nodes, GPU model, name) when it
comes at most `BURST_GAP` seconds after it; otherwise it begins a burst of its own. `Job.burst` is the id of the
burst's first job (None for that first job itself, and for a job alone).

Jobs of one burst run alike. In the Philly trace two thirds of the jobs came in bursts, and in the largest labs
the variance of log run times within a burst is 5 to 14 times smaller than among all of that lab's jobs of that
size. So once members of a burst have run for a while, the members still waiting will likely run about as long:
the `gittins` order ranks a waiting member as a job known to need more than `SIBLING_SHARE` of the service of its
most-served running sibling, instead of as a new job that could be short. Example: a lab submits 250 one-GPU jobs
of 3 to 9 hours, seconds apart, on its 64 GPUs. 64 start; an hour later the 186 still waiting are known to need
more than half an hour each, and a 60-second job submitted then starts before them. On Philly's partitioned labs
this cut average queueing by 1.9 % (five paired settings, docs/simulation.md).
"""

from __future__ import annotations

from collections.abc import Iterable

from nanum.core.model import Job, JobId, Running

#: the longest gap between two submissions of one burst, in seconds.
BURST_GAP = 10.0
#: what a waiting job is known to need, as a share of its most-served running sibling's GPU-seconds: members of a
#: burst run alike but not alike to the second (within about a factor of two in the Philly trace).
SIBLING_SHARE = 0.5

Request = tuple[str, int, int, str | None, str]


def request(job: Job) -> Request:
    """What two jobs must share to be of one burst, besides coming close together: user and request."""
    return (job.user, job.gpus, job.nodes, job.gpu_model, job.name)


def joins(last: tuple[JobId, JobId | None, float] | None, submit_time: float) -> JobId | None:
    """The one burst rule: the `burst` of a job submitted at `submit_time`, given `last` = (id, burst, submit
    time) of the same user's latest job with the same `request` (None: there is none). It joins that job's burst
    when it came at most `BURST_GAP` seconds after it; None when it begins one. The simulator (`Bursts`) and the
    server (at submit) both ask it."""
    if last is None or submit_time - last[2] > BURST_GAP:
        return None
    return last[0] if last[1] is None else last[1]


def burst_of(job: Job) -> JobId:
    """The id that names `job`'s burst: its first job's."""
    return job.id if job.burst is None else job.burst


class Bursts:
    """Assigns jobs to bursts as they are submitted, in submit order (a driver that replays a trace uses it)."""

    def __init__(self) -> None:
        self._last: dict[Request, tuple[JobId, JobId | None, float]] = {}  # request -> its latest job (see `joins`)

    def join(self, job: Job) -> JobId | None:
        """The `burst` of `job`, submitted after every job passed before: its first job's id, None if it is first."""
        key = request(job)
        burst = joins(self._last.get(key), job.submit_time)
        self._last[key] = (job.id, burst, job.submit_time)
        return burst


class Siblings:
    """The running members of every burst, for the most service one of them has received by a given time.

    A member that started at s with a earlier GPU-seconds on g GPUs has received a + (now - s) * g by `now`; all
    members of a burst have the same g, so the most-served one is the one with the largest a - s * g at any time.
    A `CycleCache` keeps one current by its running-set diff; without one a cycle builds it (`of`)."""

    def __init__(self) -> None:
        self._members: dict[JobId, dict[JobId, float]] = {}  # burst -> job -> a - s * g
        self._best: dict[JobId, float] = {}  # burst -> the largest of those, once asked

    @classmethod
    def of(cls, running: Iterable[Running]) -> Siblings:
        """What `add` of every run gives, in one pass (a cycle without a cache builds it for every running job)."""
        held = cls()
        members = held._members
        for run in running:
            job = run.job
            burst = job.id if job.burst is None else job.burst  # `burst_of`
            group = members.get(burst)
            if group is None:
                group = members[burst] = {}
            group[job.id] = job.attained_gpu_seconds - run.start_time * job.total_gpus
        return held

    def add(self, run: Running) -> None:
        job = run.job
        burst = burst_of(job)
        self._members.setdefault(burst, {})[job.id] = job.attained_gpu_seconds - run.start_time * job.total_gpus
        self._best.pop(burst, None)

    def remove(self, run: Running) -> None:
        burst = burst_of(run.job)
        members = self._members.get(burst)
        if members is not None and members.pop(run.job.id, None) is not None:
            self._best.pop(burst, None)
            if not members:
                del self._members[burst]

    def service(self, job: Job, now: float) -> float | None:
        """The most GPU-seconds a running sibling of `job` (not `job` itself) has received by `now`; None if none
        runs. Members have `job`'s request, so its GPU count."""
        burst = job.id if job.burst is None else job.burst  # `burst_of`, written out: asked for every waiting job
        members = self._members.get(burst)
        if members is None or (len(members) == 1 and job.id in members):
            return None
        best = self._best.get(burst)
        if best is None:
            best = self._best[burst] = max(members.values())
        if job.id in members:  # a running job asks about its siblings: only ever in tests and tools
            best = max(v for k, v in members.items() if k != job.id)
        return best + now * job.total_gpus
