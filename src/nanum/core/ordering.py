"""Queue orders: which pending job the cycle considers first. One small class per order, found by name.

Each order gives a sort key; ties always fall back to submit time and then job id, so a cycle is deterministic.
`ordered` puts a queue in an order's sequence. Most of a long queue is jobs alike in everything the key reads but
their submission (a sweep: one user's jobs of one request, in one burst); an order that can say which jobs those
are (`grouping`) has its key computed once per group, and the sequence is exactly the sorted one.
Every key starts with `-job.tier`: a job an admin put in a higher tier (0..9) goes before every job of a lower
tier, whatever the order, and inside a tier the order's own rule below decides. A tier orders the queue only (its
head gets the partition's backfill reservation); it is no preemption class: `level` ignores it, so a higher tier
does not by itself preempt anything.

- `fifo`: submit time.
- `priority`: Slurm-style multifactor, highest first: a weighted sum of normalised factors
  (age up to 7 days, the lab's fair-share factor, the job's priority 0..100, its size as a share of the cluster).
- `fairshare`: the lab with the least decayed usage against its weight first, then the user likewise.
- `las`: Tiresias' discretised least-attained-service: jobs in queues by GPU-seconds already received
  (thresholds 2 and 20 GPU-hours), FIFO inside a queue. A requeued job that already ran long waits behind new ones.
- `gittins`: two classes, short (below 4 GPU-hours received) and long, and inside a class the highest Gittins
  index first: the job most likely to finish per GPU-second spent, from the service distribution of similar
  finished jobs (`HistoryPredictor.gittins_index`; see nanum.core.predict). A waiting job whose burst siblings
  already run is known to need more than half of what the most-served of them received (nanum.core.bursts).
  The lab's fair-share scales the index by at most ±`GITTINS_FAIRSHARE` halvings (a lab over its share waits a
  little longer), and between equal indices (and without a distribution) the lab with the higher fair-share factor
  goes first, then FIFO. A user's priority reorders that user's own jobs among their places in the queue
  (`by_user_priority`).
- `shortest`: shortest expected run time first (the predictor's estimate capped by the time limit), as Helios' QSSF;
  a job with neither runs after all jobs with an estimate.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Hashable, Iterable, Mapping
from dataclasses import dataclass, field
from operator import attrgetter
from typing import ClassVar, Protocol

from nanum.core.bursts import SIBLING_SHARE, Siblings
from nanum.core.fairshare import lab_factor, lab_totals, user_factor
from nanum.core.model import Job, Lab, Running, User
from nanum.core.predict import Predictor, expected_runtime, gittins_index

INF = float("inf")
#: chosen by the trace study (docs/simulation.md): 1 and 10 GPU-hours preempted more and queued longer.
LAS_THRESHOLDS = (7200.0, 72000.0)
#: `gittins` needs no middle class: the index already ranks jobs inside a class (docs/simulation.md).
GITTINS_THRESHOLDS = (14400.0,)
PRIORITY_WEIGHTS = {"age": 1000.0, "fairshare": 10000.0, "priority": 10000.0, "size": 1000.0}
MAX_AGE = 7 * 24 * 3600.0
#: how far a lab's fair-share factor F (0..1) moves its jobs' Gittins indices under `gittins`: ×2^(k·(F − ½)), so
#: ×0.92 for a lab far over its share and ×1.09 for an idle one. Chosen by the paired study (docs/simulation.md):
#: on Philly pooled-half k = 1 cost 3 % queueing, and k = ½ left the worst lab slowed down a little more.
GITTINS_FAIRSHARE = 0.25


@dataclass(frozen=True, slots=True)
class OrderContext:
    """What orders may read besides the job. Fair-share factors are computed once per cycle, on first use."""

    now: float
    labs: Mapping[str, Lab]
    users: Mapping[str, User]
    total_gpus: int
    predictor: Predictor | None
    #: the running jobs, for `sibling_service`; `siblings`, when given, already holds their bursts.
    running: tuple[Running, ...] = ()
    siblings: Siblings | None = None
    _factors: dict[tuple[str, str], float] = field(default_factory=dict, compare=False, repr=False)
    _scales: dict[str, tuple[float, float]] = field(default_factory=dict, compare=False, repr=False)
    _held: list[Siblings] = field(default_factory=list, compare=False, repr=False)
    _totals: list[tuple[float, float]] = field(default_factory=list, compare=False, repr=False)

    def sibling_service(self, job: Job) -> float | None:
        """The most GPU-seconds one of `job`'s running burst siblings has received (nanum.core.bursts)."""
        siblings = self.siblings
        if siblings is None:
            if not self._held:
                self._held.append(Siblings.of(self.running))
            siblings = self._held[0]
        return siblings.service(job, self.now)

    def lab_factor(self, lab: str) -> float:
        hit = self._factors.get(("lab", lab))
        if hit is None:
            if not self._totals:  # all labs' usage and weights, summed once per cycle
                self._totals.append(lab_totals(self.labs))
            hit = self._factors[("lab", lab)] = lab_factor(lab, self.labs, self._totals[0])
        return hit

    def lab_scale(self, lab: str) -> tuple[float, float]:
        """What `gittins` multiplies the lab's jobs' indices by, 2^(GITTINS_FAIRSHARE·(F − ½)), and F itself: one
        look-up per job, as the sort key is computed for every pending job every cycle."""
        hit = self._scales.get(lab)
        if hit is None:
            factor = self.lab_factor(lab)
            hit = self._scales[lab] = (2.0 ** (GITTINS_FAIRSHARE * (factor - 0.5)), factor)
        return hit

    def user_factor(self, user: str) -> float:
        hit = self._factors.get(("user", user))
        if hit is None:
            hit = self._factors[("user", user)] = user_factor(user, self.users)
        return hit


class QueueOrder(Protocol):
    name: ClassVar[str]
    #: whether sort keys read the labs' or users' usage (fair-share factors): a driver may leave usage out of its
    #: snapshots for orders that do not (the simulator does, when no budget needs it either).
    reads_usage: ClassVar[bool]
    #: whether sort keys read the users' usage too (not only the labs').
    reads_users: ClassVar[bool]

    def sort_key(self, job: Job, ctx: OrderContext) -> tuple[float, ...]:
        """Smaller keys go first, and every key ends with (submit time, id). Must be pure: the same job and context
        give the same key."""
        ...

    # Optional: `grouping(ctx)`, a function giving jobs whose keys are equal but for their last two fields (submit
    # time, id) one value, or None when the order cannot tell them in this context; and `arrange(queue)`, a last
    # step over the sorted queue (`ordered` calls both).


#: Every key's last two fields: a group keeps its jobs in this order (`ordered`).
_SUBMITTED = attrgetter("submit_time", "id")


def ordered(jobs: Iterable[Job], order: QueueOrder, ctx: OrderContext) -> list[Job]:
    """`jobs` in `order`'s sequence: sorted by its key, then `arrange`d where the order has that last step.

    Where the order groups jobs (`grouping`), the key is computed once per group: its members, in submission order,
    take the group's place. The result is the same as sorting by the key (the key's other fields are equal inside a
    group, and its last two are the submission order), at a fraction of the cost on a queue of sweeps: 19,000
    waiting jobs were a 47 ms tick, half of it computing their keys."""
    queue = list(jobs)
    if len(queue) < 2:  # a lone job needs no key (most cycles of a driver that cycles at every arrival)
        return queue
    grouping = getattr(order, "grouping", None)
    alike: Callable[[Job], Hashable] | None = grouping(ctx) if grouping is not None else None
    if alike is None:
        queue.sort(key=lambda j: order.sort_key(j, ctx))
    else:
        queue.sort(key=_SUBMITTED)
        heads: dict[Hashable, tuple[float, ...]] = {}
        runs: dict[tuple[float, ...], list[Job]] = {}
        for job in queue:
            group = alike(job)
            head = heads.get(group)
            if head is None:
                head = heads[group] = order.sort_key(job, ctx)[:-2]
            run = runs.get(head)
            if run is None:
                runs[head] = [job]
            else:
                run.append(job)
        if len(runs) > 1:
            queue = [job for head in sorted(runs) for job in runs[head]]
    arrange = getattr(order, "arrange", None)
    return queue if arrange is None else list(arrange(queue))


def _likeness(ctx: OrderContext) -> Callable[[Job], Hashable] | None:
    """How the context's predictor tells jobs it predicts alike (`HistoryPredictor.likeness`); None where it cannot
    say (a predictor may know each job apart)."""
    if ctx.predictor is None:
        return _nothing
    alike: Callable[[Job], Hashable] | None = getattr(ctx.predictor, "likeness", None)
    return alike


def _nothing(job: Job) -> None:
    return None


class Fifo:
    name: ClassVar[str] = "fifo"
    reads_usage: ClassVar[bool] = False
    reads_users: ClassVar[bool] = False

    def sort_key(self, job: Job, ctx: OrderContext) -> tuple[float, ...]:
        return (-job.tier, job.submit_time, job.id)

    def grouping(self, ctx: OrderContext) -> Callable[[Job], Hashable]:
        return _TIER


def priority_factors(job: Job, ctx: OrderContext) -> dict[str, float]:
    """The normalised factors (each 0..1) of the multifactor priority, as `nanum priority` shows them."""
    return {
        "age": min(max(ctx.now - job.submit_time, 0.0) / MAX_AGE, 1.0),
        "fairshare": ctx.lab_factor(job.lab),
        "priority": min(max(job.priority, 0), 100) / 100.0,
        "size": min(job.total_gpus / ctx.total_gpus, 1.0) if ctx.total_gpus else 0.0,
    }


_W_AGE, _W_FS, _W_PRIO, _W_SIZE = (PRIORITY_WEIGHTS[k] for k in ("age", "fairshare", "priority", "size"))


def priority_score(job: Job, ctx: OrderContext) -> float:
    """The weighted sum of `priority_factors`, written out: it is computed for every pending job every cycle."""
    size = min(job.gpus * job.nodes / ctx.total_gpus, 1.0) if ctx.total_gpus else 0.0
    age = ctx.now - job.submit_time
    return (
        _W_AGE * (0.0 if age <= 0 else 1.0 if age >= MAX_AGE else age / MAX_AGE)
        + _W_FS * ctx.lab_factor(job.lab)
        + _W_PRIO * min(max(job.priority, 0), 100) / 100.0
        + _W_SIZE * size
    )


class Priority:
    name: ClassVar[str] = "priority"
    reads_usage: ClassVar[bool] = True
    reads_users: ClassVar[bool] = False

    def sort_key(self, job: Job, ctx: OrderContext) -> tuple[float, ...]:
        return (-job.tier, -priority_score(job, ctx), job.submit_time, job.id)


class FairShare:
    name: ClassVar[str] = "fairshare"
    reads_usage: ClassVar[bool] = True
    reads_users: ClassVar[bool] = True

    def sort_key(self, job: Job, ctx: OrderContext) -> tuple[float, ...]:
        return (-job.tier, -ctx.lab_factor(job.lab), -ctx.user_factor(job.user), job.submit_time, job.id)

    def grouping(self, ctx: OrderContext) -> Callable[[Job], Hashable]:
        return _TIER_LAB_USER


class Las:
    name: ClassVar[str] = "las"
    reads_usage: ClassVar[bool] = False
    reads_users: ClassVar[bool] = False

    def sort_key(self, job: Job, ctx: OrderContext) -> tuple[float, ...]:
        return (-job.tier, self.level(job, job.attained_gpu_seconds), job.submit_time, job.id)

    def grouping(self, ctx: OrderContext) -> Callable[[Job], Hashable] | None:
        return _TIER_ATTAINED

    def level(self, job: Job, attained: float) -> int:
        """The LAS queue: 0 below 2 GPU-hours received, 1 below 20, else 2 (the classes `+preempt` uses; the
        tier is not part of them)."""
        return bisect.bisect_right(LAS_THRESHOLDS, attained)  # thresholds passed (they are sorted)


class Gittins(Las):
    """Two classes, short and long (4 GPU-hours received), ordered inside a class by the Gittins index.

    The classes keep preemption rare: a job only preempts jobs of a lower class, so a new job stops only jobs that
    have already received 4 GPU-hours. Inside a class the index puts first the jobs that, judging by similar
    finished jobs, are likely to end soon. `las`'s middle class (2 to 20 GPU-hours) makes long jobs preempt each
    other as they cross 20 GPU-hours; with the index ranking inside classes, dropping it cut queueing on Philly's
    partitioned labs by 8 % with 28 % fewer preemptions (docs/simulation.md).

    A waiting job whose burst siblings already run is ranked as a job known to need more than half of what the
    most-served of them has received (nanum.core.bursts): a sweep of long jobs does not hide a short job
    submitted after it.

    Lab fair-share scales the index (`OrderContext.lab_scale`): a lab over its share yields to a lighter lab's job
    of the same kind, but not to a job much less likely to end soon, which would cost everyone queueing."""

    name: ClassVar[str] = "gittins"
    reads_usage: ClassVar[bool] = True

    def level(self, job: Job, attained: float) -> int:
        """0 below 4 GPU-hours received, else 1."""
        return bisect.bisect_right(GITTINS_THRESHOLDS, attained)

    def sort_key(self, job: Job, ctx: OrderContext) -> tuple[float, ...]:
        attained = job.attained_gpu_seconds
        sibling = ctx.sibling_service(job)
        more_than = 0.0 if sibling is None else SIBLING_SHARE * sibling
        index = gittins_index(job, attained, ctx.predictor, more_than)
        scale, factor = ctx.lab_scale(job.lab)
        return (-job.tier, self.level(job, attained), -(index or 0.0) * scale, -factor, job.submit_time, job.id)

    def grouping(self, ctx: OrderContext) -> Callable[[Job], Hashable] | None:
        """Jobs of one tier, service received and lab, alike to the predictor, in one burst and of one size: the
        index reads the predictor's history for such jobs and the burst's running siblings."""
        if getattr(ctx.predictor, "gittins_index", None) is None:  # no index: the tier, service and lab decide
            return _TIER_ATTAINED_LAB
        alike = _likeness(ctx)
        if alike is None:
            return None
        return lambda job: (job.tier, job.attained_gpu_seconds, job.lab, job.id if job.burst is None else job.burst,
                            job.gpus * job.nodes, alike(job))

    def arrange(self, queue: list[Job]) -> list[Job]:
        """`by_user_priority`: a user's priorities reorder that user's own jobs of the same tier."""
        return by_user_priority(queue)


def by_user_priority(queue: list[Job]) -> list[Job]:
    """`queue` with each user's jobs of one tier moved among that user's own places in that tier, highest priority
    first (ties keep their order). A user's priority never moves a job ahead of other users' jobs, only ahead of
    the user's own, and never across tiers: an admin's tier outranks the owner's priority.

    Example: alice's jobs 1 (priority 0) and 3 (priority 50) hold places 1 and 3, bob's job 2 place 2: the queue
    becomes 3, 2, 1. Had an admin put job 1 in tier 1, it would stay first."""
    if len({job.priority for job in queue}) == 1:
        return queue
    places: dict[tuple[str, int], list[int]] = {}
    for pos, job in enumerate(queue):
        spots = places.get((job.user, job.tier))
        if spots is None:
            places[(job.user, job.tier)] = [pos]
        else:
            spots.append(pos)
    out = list(queue)
    for spots in places.values():
        if len(spots) > 1:
            mine = sorted((queue[pos] for pos in spots), key=_priority, reverse=True)  # stable: ties keep their order
            for pos, job in zip(spots, mine, strict=True):
                out[pos] = job
    return out


_priority = attrgetter("priority")
_TIER = attrgetter("tier")
_TIER_LAB_USER = attrgetter("tier", "lab", "user")
_TIER_ATTAINED = attrgetter("tier", "attained_gpu_seconds")
_TIER_ATTAINED_LAB = attrgetter("tier", "attained_gpu_seconds", "lab")


class Shortest:
    name: ClassVar[str] = "shortest"
    reads_usage: ClassVar[bool] = False
    reads_users: ClassVar[bool] = False

    def sort_key(self, job: Job, ctx: OrderContext) -> tuple[float, ...]:
        runtime = expected_runtime(job, ctx.predictor)
        return (-job.tier, INF if runtime is None else runtime, job.submit_time, job.id)

    def grouping(self, ctx: OrderContext) -> Callable[[Job], Hashable] | None:
        alike = _likeness(ctx)
        if alike is None:
            return None
        return lambda job: (job.tier, job.time_limit, alike(job))


ORDERS: dict[str, type[QueueOrder]] = {o.name: o for o in (Fifo, Priority, FairShare, Las, Gittins, Shortest)}
