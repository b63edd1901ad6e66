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
- a job already preempted `MAX_CLASS_PREEMPTIONS` times is not preempted by class again: it keeps its GPUs until
  it ends (an owner reclaiming lent GPUs still stops it). Without the cap, a wide job that has just restarted is
  the cheapest victim by work lost, so each short job that arrives can stop it again, and each time it waits for
  its whole width to come free: on the ITP traces the cap cut queueing by 38 to 58 % (docs/simulation.md).
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


#: the most times a job is preempted before it is no longer preempted by class.
MAX_CLASS_PREEMPTIONS = 4


def class_victim(run: Running) -> bool:
    """Whether `run` may be preempted by class at all: its job is preemptible and was preempted fewer than
    `MAX_CLASS_PREEMPTIONS` times."""
    return run.job.preemptible and run.job.preemptions < MAX_CLASS_PREEMPTIONS


def may_preempt(job: Job, victim: Running) -> bool:
    """Whether `job` may ever stop `victim` by class, class aside."""
    return class_victim(victim) and (victim.borrowing or victim.job.lab == job.lab)


def class_victim_key(level: int, run: Running) -> tuple[float, ...]:
    """Cheapest victims first; see the module docstring."""
    saved = max(run.start_time, run.last_checkpoint or run.start_time)
    return (-level, -saved, run.job.total_gpus, -run.job.id)
