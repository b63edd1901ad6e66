"""Preemption by priority class (`+preempt`): a blocked job stops running jobs its order ranks in a lower class.

Tiresias (NSDI'19) schedules by discretised least attained service: jobs sit in queues by the GPU-seconds they
have received, a new job enters the top queue, a running job that crosses a threshold drops a queue, and a job
of a higher queue preempts jobs of lower ones. Short jobs so finish quickly without anyone predicting run times,
at the price of restarting long ones from their last checkpoint. Any queue order that defines classes
(`ClassOrder.level`) can drive it: `las` (2 and 20 GPU-hours) and `gittins` (4 GPU-hours) do.

Example: one 4-GPU node runs job L (4 GPUs, 3 GPU-hours received: class 1). Job S (1 GPU, new: class 0)
arrives and cannot start: L is preempted, S starts once L has stopped, and L waits in class 1, then resumes.

Limits, so that preemption never thrashes and guarantees hold:

- only a strictly lower class is preempted: jobs of one class never preempt each other;
- a job may preempt jobs of its own lab and jobs that borrow GPUs: an owner's job within its guarantee is never
  stopped for another lab's job;
- a job preempts only when it fits nowhere now (not when backfill merely holds free GPUs for a reservation);
- a job that would still borrow once its own lab's victims have stopped preempts only borrowers: its lab's jobs
  within the guarantee would start again before it, and be stopped again.

With backfill, jobs started over a reservation (`Running.over_reservation`) are preempted, whatever their class,
by their partition's first blocked job when that lets it start (nanum.core.scheduler).

Victims, cheapest first:

1. the lowest class first (the most service received);
2. least work lost: the latest of start and last checkpoint first;
3. fewest GPUs;
4. the youngest (highest job id), so the choice is deterministic.
"""

from __future__ import annotations

from typing import Protocol

from nanum.core.model import Job, Running


class ClassOrder(Protocol):
    """A queue order with priority classes, which `+preempt` needs."""

    def level(self, job: Job, attained: float) -> int:
        """The class of `job` once it has received `attained` GPU-seconds: 0 is the highest. Must be pure, and
        must not decrease as `attained` grows (a job only ever drops classes while it runs)."""
        ...


def attained(run: Running, now: float) -> float:
    """GPU-seconds a running job has received: its earlier runs plus this one so far."""
    return run.job.attained_gpu_seconds + max(now - run.start_time, 0.0) * run.job.total_gpus


def may_preempt(job: Job, victim: Running) -> bool:
    """Whether `job` may ever stop `victim`, class aside."""
    return victim.job.preemptible and (victim.borrowing or victim.job.lab == job.lab)


def class_victim_key(level: int, run: Running) -> tuple[float, ...]:
    """Cheapest victims first; see the module docstring."""
    saved = max(run.start_time, run.last_checkpoint or run.start_time)
    return (-level, -saved, run.job.total_gpus, -run.job.id)
