"""Why a job waits: the reason with numbers, and where one can be computed, the estimated start.

Every job left pending gets one `Reason`, from the first that applies:

1. it holds a reservation (the first blocked job of its partition) or an estimate: "reserved to start when job 7
   is expected to end" (`RESERVED`, `QUEUED`), its estimated start beside it;
2. the policy's backfill rule keeps it behind its partition's first blocked job (`nanum.core.backfill_rules`):
   under `easy` it fits now, but starting it would delay that job's reservation (`BACKFILL`); under `none` it
   waits behind that job (`QUEUED`);
3. it does not fit: what it needs against what is free (`RESOURCES`), e.g. "needs 4 GPUs on one node; the largest
   free block is 2 (node n3); with --gpus 2 it would fit now".

Each reason opens with the job's place in its partition's queue: "next in line", or "N jobs ahead", counting the
jobs of its partition the cycle considered before it (in queue order, owners within their guarantee before
borrowers) that wait too. Jobs that start in the cycle, and other partitions' jobs, are not ahead of it.

A reason holds no time relative to the cycle ("in 2h 10m"): it is stored and shown until its wording changes, and
such a time would be stale the moment it is read. When the job should start is its estimated start, which every
view shows as a time of day or counts down itself.
"""

from __future__ import annotations

from nanum.core.backfill import Reservation
from nanum.core.cycle import CycleState, Keys, Partition, Shape
from nanum.core.decision import Code, Reason, gpus, pending, reason
from nanum.core.model import Job
from nanum.core.placement import fits


def explain(c: CycleState, job: Job, shape: Shape, part: Partition, ahead: int, fits_now: bool, first: bool,
            res: Reservation | None) -> None:
    """Record why `job` waits (see the module docstring); `ahead` jobs of its partition wait before it."""
    if res is not None:
        when = "reserved to start" if first else "expected to start"
        code = Code.RESERVED if first else Code.QUEUED
        c.wait(job, Reason(code, f"{place(ahead)}; {when} when {res.cause}"), res.start, ahead)
        return
    key = (shape, c.state.version, fits_now, first)
    why = c.why.get(key)
    if why is None:
        why = c.why[key] = _why(c, job, shape, part, fits_now, first)
    # Most of a long queue ends here: the reason its shape shares, after its own place (`c.wait`, written out).
    c.pending.append(pending(job.id, reason(why.code, f"{place(ahead)}; {why.message}"), None, ahead))
    c.waiting[shape.part] += 1


def _why(c: CycleState, job: Job, shape: Shape, part: Partition, fits_now: bool, first: bool) -> Reason:
    """Why a job without an estimate waits, less its place in the queue: the same for every such job of its shape
    until the free GPUs change (the first blocked job of a partition never changes within a cycle)."""
    blocker = part.head.ref if part.head is not None else job.ref
    if not first and (behind := c.backfill.waits(c, part, blocker, fits_now)) is not None:
        return behind
    return Reason(Code.RESOURCES, no_room(c, job, shape.keys))


def place(ahead: int) -> str:
    """A job's place in its partition's queue: "next in line", "1 job ahead", "3 jobs ahead"."""
    return "next in line" if ahead == 0 else "1 job ahead" if ahead == 1 else f"{ahead} jobs ahead"


def no_room(c: CycleState, job: Job, keys: Keys) -> str:
    """What `job` needs against what is free now."""
    wanted = job.gpu_model or " or ".join(sorted(job.gpu_models))
    model = f" of model {wanted}" if wanted else ""
    if job.nodes > 1:
        have = sum(1 for nf in c.state.candidates(keys, job.gpus, True) if fits(nf, job, None))
        free = f"{job.gpus} free GPU" + ("" if job.gpus == 1 else "s")
        return f"needs {job.nodes} nodes with {free}{model} each; {have} {'has' if have == 1 else 'have'} that now"
    block, where = c.state.largest_block(keys)
    if block >= job.gpus:
        return (f"needs {gpus(job.gpus)}{model} with {job.cpus} CPUs and {job.memory_mb} MiB on one node; "
                "no node has all of that free")
    if where is None:
        return f"needs {gpus(job.gpus)}{model} on one node; no GPU{model} is free"
    return (f"needs {gpus(job.gpus)}{model} on one node; the largest free block is {block} "
            f"(node {where.node.name}); with --gpus {block} it would fit now")

