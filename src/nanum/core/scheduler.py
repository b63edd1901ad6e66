"""One scheduling cycle: from a Snapshot to Decisions. The live server and the simulator both call `schedule`.

The cycle, in order:

1. order the pending queue with the policy's queue order;
2. pass one: in that order, every job that would *not* borrow goes through `consider` below;
3. pass two: the jobs that would borrow, in the same order, on the GPUs left over;
4. every job left pending has a reason with numbers and, where one can be computed, an estimated start.

`consider` takes one job through numbered steps; the first that settles the job ends its turn:

1. admit: budgets and limits (`nanum.core.quota.Admission`), and a job that must not be preempted never borrows;
2. could ever fit: a request no up node could hold, whatever runs there, waits with the reason;
3. stuck: a job of the same shape, borrowing and class already fit nowhere and no step could help it;
4. place: it fits now (behind the first blocked job of its partition, as the policy's backfill rule allows) and
   starts;
5. the policy's steps for a blocked job (`Policy.steps`, `nanum.core.steps`): reclaim, take back, preempt;
6. blocked: the first blocked job of a partition reserves its start, and the job says why it waits.

A partition is the whole cluster when owners lend their idle GPUs, else each lab's own nodes (plus shared ones).
The state all steps share, with its caches, is `nanum.core.cycle.CycleState`.
"""

from __future__ import annotations

from nanum.core.backfill_rules import BACKFILLS
from nanum.core.cache import CycleCache
from nanum.core.cycle import CycleState, Partition, Shape, partition_of
from nanum.core.decision import Code, Decisions, Reason
from nanum.core.explain import explain
from nanum.core.model import Job, Placement, Snapshot
from nanum.core.ordering import OrderContext, ordered
from nanum.core.policy import Policy
from nanum.core.predict import Predictor
from nanum.core.quota import impossible, would_borrow
from nanum.core.steps import STEPS, Step

__all__ = ["partition_of", "schedule"]


def schedule(
    snapshot: Snapshot, policy: Policy, predictor: Predictor | None = None, cache: CycleCache | None = None,
    *, explain: bool = True,
) -> Decisions:
    """Decide which pending jobs start where, which running jobs yield, and why the rest wait.

    Pure and deterministic: the same snapshot, policy and predictor state always give the same decisions.
    `cache` (see `CycleCache`) only makes repeated calls cheaper; the decisions are the same without it.
    `explain=False` leaves out the `Pending` records (reasons and start estimates) for a driver that reads none,
    such as the simulator: writing them costs a good part of a long queue's cycle. The starts and preemptions are
    the same, since the reservations backfill plans around are still made."""
    c = CycleState(snapshot, policy, predictor, cache, BACKFILLS[policy.backfill], explain)
    steps = tuple(STEPS[name] for name in policy.steps)
    # 1. Order the queue.
    ctx = OrderContext(snapshot.now, snapshot.labs, snapshot.users, c.total_gpus, predictor, snapshot.running,
                       cache.siblings if cache is not None else None)
    queue = ordered(snapshot.pending, c.order, ctx)
    # 2. Owners first: jobs within their lab's guarantee (or in labs without one).
    usage, labs = c.usage, snapshot.labs
    borrowers: list[Job] = []
    for job in queue:
        if would_borrow(job, usage, labs):
            borrowers.append(job)
        else:
            consider(c, steps, job, False)
    # 3. Then borrowers, on what is left.
    for job in borrowers:
        consider(c, steps, job, True)
    # 4. Reasons and estimates were collected along the way.
    return c.decisions()


def consider(c: CycleState, steps: tuple[Step, ...], job: Job, borrows: bool) -> None:
    """Start, preempt for, or explain `job` (see the module docstring). In pass one (`borrows` False) the job would
    not borrow; in pass two it is known to borrow: its lab's usage has only grown since pass one."""
    # 1. Admit.
    why = c.admission.refuse(job, c.usage)
    if why is None and borrows and not job.preemptible:
        why = _never_borrows(c, job)
    if why is not None:
        c.wait(job, why)
        return
    # 2. Could it ever fit?
    shape = c.shape(job)
    if shape.never:
        why = impossible(job, c.snap.nodes, c.snap.labs, c.policy.lend)
        c.wait(job, why or Reason(Code.NODE_DOWN, "every node that could run it is down or draining"))
        return
    part = c.partitions.get(shape.part)
    if part is None:
        part = c.partitions[shape.part] = Partition()
    # 3. Stuck like a job before it?
    stuck = (shape, borrows, c.classes.level(job, job.attained_gpu_seconds) if c.classes else 0)
    if stuck in c.stuck:
        _blocked(c, job, shape, part, False)
        return
    # 4. Place it, with backfill.
    placement, fits_now, over = _try_place(c, job, shape, part, borrows)
    if placement is not None:
        c.start(job, placement, borrows, part, over)
        return
    # 5. The policy's steps for a blocked job.
    first = part.head is None
    for step in steps:
        if step(c, job, shape, first=first, borrows=borrows, borrowing=borrows):
            return
    # 6. Blocked: reserve, estimate, explain.
    if not fits_now and c.place(job, shape) is None:
        c.stuck.add(stuck)
    _blocked(c, job, shape, part, fits_now)


def _never_borrows(c: CycleState, job: Job) -> Reason:
    """Why `job`, which would borrow, does not: it must not be preempted."""
    lab = c.snap.labs[job.lab]
    return Reason(Code.LAB_LIMIT, (
        f"lab {job.lab} is at its guarantee of {lab.guaranteed_gpus} GPUs "
        f"({c.usage.lab_gpus[job.lab]} in use); a job that must not be preempted never borrows"))


def _try_place(
    c: CycleState, job: Job, shape: Shape, part: Partition, borrows: bool
) -> tuple[tuple[Placement, ...] | None, bool, bool]:
    """Where `job` starts now (or None), whether it would fit were it not for a reservation, and whether it starts
    over one. Behind its partition's first blocked job, the policy's backfill rule decides
    (`nanum.core.backfill_rules`)."""
    if part.head is None:
        found = c.place(job, shape)
        return found, found is not None, False
    return c.backfill.place(c, job, shape, part, borrows)


def _blocked(c: CycleState, job: Job, shape: Shape, part: Partition, fits_now: bool) -> None:
    """Reserve `job`'s start if it is its partition's first blocked job (or estimate it), then say why it waits:
    behind the jobs of its partition considered before it that wait too (owners' before borrowers')."""
    first, _, shown = (False, None, None) if part.settled else c.reserve(job, shape, part)
    if c.explain:
        explain(c, job, shape, part, c.waiting[shape.part], fits_now, first, shown)
