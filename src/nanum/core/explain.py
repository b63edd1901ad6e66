"""Why a job waits: the reason with numbers, and where one can be computed, the estimated start.

Every job left pending gets one `Reason`, from the first that applies:

1. it holds a reservation (the first blocked job of its partition) or an estimate: "reserved to start in 2h 10m
   when job 7 is expected to end" (`RESERVED`, `QUEUED`);
2. the policy's backfill rule keeps it behind its partition's first blocked job (`nanum.core.backfill_rules`):
   under `easy` it fits now, but starting it would delay that job's reservation (`BACKFILL`); under `none` it
   waits behind that job (`QUEUED`);
3. it does not fit: what it needs against what is free (`RESOURCES`), e.g. "needs 4 GPUs on one node; the largest
   free block is 2 (node n3); with --gpus 2 it would fit now".

Each reason opens with the job's place in its partition's queue: "next in line", or "N jobs ahead", counting the
jobs of its partition the cycle considered before it (in queue order, owners within their guarantee before
borrowers) that wait too. Jobs that start in the cycle, and other partitions' jobs, are not ahead of it.
"""

from __future__ import annotations

from nanum.core.backfill import Reservation
from nanum.core.cycle import CycleState, Keys, Partition, Shape
from nanum.core.decision import Code, Reason
from nanum.core.model import Job
from nanum.core.placement import fits


def explain(c: CycleState, job: Job, shape: Shape, part: Partition, ahead: int, fits_now: bool, first: bool,
            res: Reservation | None) -> bool:
    """Record why `job` waits (see the module docstring); `ahead` jobs of its partition wait before it."""
    now = c.snap.now
    blocker = part.head.id if part.head is not None else job.id
    place = "next in line" if ahead == 0 else "1 job ahead" if ahead == 1 else f"{ahead} jobs ahead"
    if res is not None:
        when = f"{'reserved to start' if first else 'expected to start'} in {human(res.start - now)}"
        code = Code.RESERVED if first else Code.QUEUED
        return c.wait(job, Reason(code, f"{place}; {when} when {res.cause}"), res.start, ahead)
    if not first and (behind := c.backfill.waits(c, part, blocker, place, fits_now)) is not None:
        return c.wait(job, behind, None, ahead)
    room = c.room.get((shape, c.state.version))
    if room is None:
        room = c.room[(shape, c.state.version)] = no_room(c, job, shape.keys)
    return c.wait(job, Reason(Code.RESOURCES, f"{place}; {room}"), None, ahead)


def no_room(c: CycleState, job: Job, keys: Keys) -> str:
    """What `job` needs against what is free now."""
    wanted = job.gpu_model or " or ".join(sorted(job.gpu_models))
    model = f" of model {wanted}" if wanted else ""
    if job.nodes > 1:
        have = sum(1 for nf in c.state.candidates(keys, job.gpus, True) if fits(nf, job, None))
        return f"needs {job.nodes} nodes with {job.gpus} free GPUs{model} each; {have} have that now"
    block, where = c.state.largest_block(keys)
    if block >= job.gpus:
        return (f"needs {gpus(job.gpus)}{model} with {job.cpus} CPUs and {job.memory_mb} MiB on one node; "
                "no node has all of that free")
    if where is None:
        return f"needs {gpus(job.gpus)}{model} on one node; no GPU{model} is free"
    return (f"needs {gpus(job.gpus)}{model} on one node; the largest free block is {block} "
            f"(node {where.node.name}); with --gpus {block} it would fit now")


def gpus(count: int) -> str:
    return "1 GPU" if count == 1 else f"{count} GPUs"


def human(seconds: float) -> str:
    """3d 4h, 2h 10m, 5m 3s, 40s."""
    s = max(round(seconds), 0)
    d, h, m = s // 86400, s % 86400 // 3600, s % 3600 // 60
    if d:
        return f"{d}d {h}h"
    if h:
        return f"{h}h {m}m"
    if m:
        return f"{m}m {s % 60}s"
    return f"{s}s"
