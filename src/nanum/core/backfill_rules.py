"""Backfill rules: what a later job of a partition may do while its first blocked job waits, named by the policy.

The first job of a partition that cannot start holds a reservation (`nanum.core.backfill.reserve`); for every
later job of that partition the cycle asks the policy's backfill rule (`Policy.backfill`, one of `BACKFILLS`):

- `easy` (the default, as Slurm's backfill plugin): a later job starts now if it is expected to end before the
  reservation, or if it fits around it (taking no more than the spare GPUs of the reserved nodes). With
  `+preempt`, a preemptible job that would delay the reservation starts over it, and the first blocked job takes
  the GPUs back when it can start (`nanum.core.steps.take_back`).
- `none`: strict order; every later job of the partition waits behind the first blocked one.

Each rule answers two questions: where the job starts now (`place`), and, when it does not start, why it waits
behind the first blocked job (`waits`; None when the reason is a lack of free GPUs, explained by the cycle). The
answer leaves out the job's place in the queue, which the cycle puts before it, so that the jobs of a long queue
share it (`nanum.core.explain`).
"""

from __future__ import annotations

from nanum.core.cycle import BackfillRule, CycleState, Partition, Shape
from nanum.core.decision import Code, Reason
from nanum.core.model import Job, Placement
from nanum.core.predict import planned_end


class Easy:
    def place(self, c: CycleState, job: Job, shape: Shape, part: Partition,
              borrows: bool) -> tuple[tuple[Placement, ...] | None, bool, bool]:
        found = c.place(job, shape)
        head = part.reservations[0] if part.reservations else None
        if found is None or head is None or not head.caps:
            return found, found is not None, False
        end = planned_end(c.snap.now, c.runtime(job))
        if end is not None and end <= head.start:
            return found, True, False  # ends before the reservation: may use any free GPU
        around = c.place(job, shape, head.caps)
        mine = part.head is not None and job.lab == part.head.lab
        if around is None and c.policy.preempt and job.preemptible and (borrows or mine):
            return found, True, True  # would delay the reservation: starts, and yields when it is due
        return around, True, False

    def waits(self, c: CycleState, part: Partition, blocker: str, fits_now: bool) -> Reason | None:
        if not fits_now:
            return None
        delayed = f"job {blocker}'s reserved start" if part.shown else f"job {blocker}"
        return Reason(Code.BACKFILL, f"starting now would delay {delayed}")


class NoBackfill:
    def place(self, c: CycleState, job: Job, shape: Shape, part: Partition,
              borrows: bool) -> tuple[tuple[Placement, ...] | None, bool, bool]:
        return None, False, False

    def waits(self, c: CycleState, part: Partition, blocker: str, fits_now: bool) -> Reason | None:
        return Reason(Code.QUEUED, f"waiting behind job {blocker}")


#: every backfill rule a policy may name.
BACKFILLS: dict[str, BackfillRule] = {"easy": Easy(), "none": NoBackfill()}
