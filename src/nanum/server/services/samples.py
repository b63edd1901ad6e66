"""Recording a node's readings: GPU rows at full rate, the node's latest reading, each job's tally and idle state.

Called for every heartbeat that carries samples, in one short write transaction of its own, before the heartbeat
itself is handled (so a job released for idleness is already off the node's desired list in the reply):

1. raw rows in `gpu_samples` (a reading resent after a dropped request is stored once);
2. the node's latest reading in `node_live`, with the GPUs on which a process runs that no job holding that
   GPU owns (`rogue`): the scheduler treats those as busy;
3. for each job holding GPUs here, each new reading: its tally (`nanum.monitor.efficiency.Tally`) and its idle
   state (`nanum.monitor.idle.observe`); the idle steps become events with their evidence, notices for the
   owner and, for a release, a stop (SIGTERM with the preempt file, so the job can checkpoint).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from nanum.monitor.efficiency import Tally
from nanum.monitor.idle import IdlePolicy, IdleState, Reading, Stage, Step, StepKind, observe
from nanum.protocol import GpuSample, Sample
from nanum.server.context import ServerContext
from nanum.server.services import lifecycle, monitor_settings
from nanum.store import AllocationRow, GpuSampleRow, JobRow, JobStatsRow, NodeLiveRow, NodeRow, UserRow, table

GPU_SAMPLES = table(GpuSampleRow)
_INSERTS: dict[str, Any] = {}


@dataclass(frozen=True, slots=True)
class Notice:
    """Something the owner of a job should hear about (after the transaction commits)."""

    kind: str
    job_id: int
    job_name: str
    user_id: int
    user: str
    message: str


@dataclass(slots=True)
class Recorded:
    notices: list[Notice] = field(default_factory=list)
    woken: set[str] = field(default_factory=set)
    rogue_changed: bool = False


def record(ctx: ServerContext, node_id: int, samples: list[Sample], now: float) -> Recorded:
    """Store one heartbeat's readings; see the module docstring."""
    out = Recorded()
    if not samples:
        return out
    samples = sorted(samples, key=lambda x: x.time)
    with ctx.db.write() as s:
        query = select(AllocationRow.gpu_index, AllocationRow.job_id).where(
            AllocationRow.node_id == node_id, AllocationRow.gpu_index.is_not(None)  # jobs that hold no GPU here
        )
        holders = {gpu: job_id for gpu, job_id in s.execute(query) if gpu is not None}
        _insert_raw(s, node_id, samples, holders)
        out.rogue_changed = _update_live(s, node_id, samples[-1], holders)
        if holders:
            _record_jobs(s, node_id, samples, holders, now, out)
    return out


def _insert_raw(s: Session, node_id: int, samples: list[Sample], holders: dict[int, int]) -> None:
    rows = [
        {
            "node_id": node_id,
            "gpu_index": g.index,
            "res": 0,
            "at": sample.time,
            "job_id": _holder(sample, holders, g.index),
            "util": g.util,
            "util_max": g.util,
            "memory_mb": float(g.memory_mb),
            "memory_max": g.memory_mb,
            "power_w": g.power_w,
            "temperature_c": g.temperature_c,
            "n": 1,
        }
        for sample in samples
        for g in sample.gpus
    ]
    if rows:
        s.connection().execute(insert_ignoring_duplicates(s), rows)


def _holder(sample: Sample, holders: dict[int, int], gpu: int) -> int:
    """The job a reading of `gpu` belongs to: its holder, if the agent ran that job when it took the reading
    (a reading taken just before a job started, or after it ended, is nobody's)."""
    job = holders.get(gpu, 0)
    return job if job and any(j.job_id == job for j in sample.jobs) else 0


def insert_ignoring_duplicates(s: Session) -> Any:
    """INSERT into gpu_samples that skips rows already there (same node, GPU, resolution, time and job)."""
    dialect = s.get_bind().dialect.name
    stmt = _INSERTS.get(dialect)
    if stmt is None:
        insert: Any = (postgresql if dialect == "postgresql" else sqlite).insert(GPU_SAMPLES)
        stmt = _INSERTS[dialect] = insert.on_conflict_do_nothing(
            index_elements=["node_id", "gpu_index", "res", "at", "job_id"]
        )
    return stmt


def rogue_gpus(gpus: Iterable[GpuSample], holders: dict[int, int]) -> list[int]:
    """GPUs with a process that no job holding that GPU owns."""
    return sorted({g.index for g in gpus for p in g.processes if p.job_id is None or p.job_id != holders.get(g.index)})


def _update_live(s: Session, node_id: int, last: Sample, holders: dict[int, int]) -> bool:
    rogue = rogue_gpus(last.gpus, holders)
    gpus = [g.model_dump(exclude_none=True) for g in last.gpus]
    jobs = [j.model_dump(exclude_none=True) for j in last.jobs]
    row = s.get(NodeLiveRow, node_id)
    if row is None:
        s.add(NodeLiveRow(node_id=node_id, time=last.time, gpus=gpus, jobs=jobs, rogue=rogue))
        return bool(rogue)
    if last.time < row.time:
        return False
    changed = list(row.rogue or []) != rogue
    row.time, row.gpus, row.jobs, row.rogue = last.time, gpus, jobs, rogue
    return changed


# -- jobs ------------------------------------------------------------------------------------------------------


def _record_jobs(
    s: Session, node_id: int, samples: list[Sample], holders: dict[int, int], now: float, out: Recorded
) -> None:
    gpus_of: dict[int, list[int]] = defaultdict(list)
    for gpu, job_id in holders.items():
        gpus_of[job_id].append(gpu)
    jobs = s.execute(
        select(JobRow, UserRow.name).join(UserRow, UserRow.id == JobRow.user_id).where(JobRow.id.in_(list(gpus_of)))
    ).all()
    stats = {r.job_id: r for r in s.scalars(select(JobStatsRow).where(JobStatsRow.job_id.in_(list(gpus_of))))}
    server, labs = monitor_settings.policies(s)
    hardware = _hardware(s, node_id)
    for job, user in jobs:
        if job.state != "running" or job.stop is not None:
            continue
        row = stats.get(job.id) or _new_stats(s, job.id, hardware, gpus_of[job.id])
        policy = labs.get(job.lab_id, server)
        steps = _fold(row, node_id, samples, sorted(gpus_of[job.id]), policy, job.kind, now)
        for step in steps:
            _apply(s, job, user, row, step, now, out)


def _hardware(s: Session, node_id: int) -> dict[int, tuple[str, int]]:
    inventory = s.scalar(select(NodeRow.inventory).where(NodeRow.id == node_id)) or {}
    return {int(g["index"]): (str(g.get("model", "")), int(g.get("memory_mb", 0))) for g in inventory.get("gpus", ())}


def _new_stats(s: Session, job_id: int, hardware: dict[int, tuple[str, int]], gpus: list[int]) -> JobStatsRow:
    model, memory = hardware.get(min(gpus), ("", 0)) if gpus else ("", 0)
    row = JobStatsRow(
        job_id=job_id,
        readings=0,
        util_sum=0.0,
        util_peak=0.0,
        memory_sum=0.0,
        memory_peak=0,
        cpu_sum=0.0,
        idle=0,
        idle_stage="active",
        gpu_model=model or None,
        gpu_memory_mb=memory or None,
        marks={},
    )
    s.add(row)
    return row


def _fold(
    row: JobStatsRow, node_id: int, samples: list[Sample], gpus: list[int], policy: IdlePolicy, kind: str, now: float
) -> list[Step]:
    """Add the node's new readings of one job to its tally and idle state; return the idle steps."""
    mark = float((row.marks or {}).get(str(node_id), 0.0))
    tally, state, steps = tally_of(row), idle_state_of(row), []
    for sample in samples:
        reading = _reading(sample, row.job_id, gpus)
        if reading is None or not reading.alive or sample.time <= mark:
            continue
        utils = [g.util for g in sample.gpus if g.index in gpus]
        mems = [g.memory_mb for g in sample.gpus if g.index in gpus]
        tally = tally.add(
            time=sample.time,
            util=sum(utils) / len(utils),
            util_max=max(utils),
            memory=sum(mems) / len(mems),
            memory_max=max(mems),
            cpu=reading.cpu_percent,
            idle=max(utils) <= policy.util_percent,
        )
        state, new = observe(state, reading, policy, kind, min(now, sample.time))
        steps += new
        mark = sample.time
        row.util_now, row.memory_now, row.cpu_now = round(max(utils), 1), sum(mems), reading.cpu_percent
    row.marks = {**(row.marks or {}), str(node_id): mark}
    _store(row, tally, state)
    return steps


def _reading(sample: Sample, job_id: int, gpus: list[int]) -> Reading | None:
    mine = [g for g in sample.gpus if g.index in gpus]
    if not mine:
        return None
    job = next((j for j in sample.jobs if j.job_id == job_id), None)
    return Reading(
        time=sample.time,
        gpu_util=max(g.util for g in mine),
        gpu_memory_mb=sum(g.memory_mb for g in mine),
        cpu_percent=job.cpu_percent if job is not None else 0.0,
        alive=job is not None,
        last_activity=job.last_activity if job is not None else None,
    )


def tally_of(row: JobStatsRow) -> Tally:
    return Tally(
        readings=row.readings or 0,
        util_sum=row.util_sum or 0.0,
        util_peak=row.util_peak or 0.0,
        memory_sum=row.memory_sum or 0.0,
        memory_peak=row.memory_peak or 0,
        cpu_sum=row.cpu_sum or 0.0,
        idle=row.idle or 0,
        first=row.first,
        last=row.last,
    )


def idle_state_of(row: JobStatsRow) -> IdleState:
    return IdleState(
        stage=Stage(row.idle_stage or "active"),
        idle_since=row.idle_since,
        last_time=row.idle_last_time,
        last_memory_mb=row.idle_last_memory,
        last_activity=row.idle_last_activity,
    )


def _store(row: JobStatsRow, tally: Tally, state: IdleState) -> None:
    row.readings, row.util_sum, row.util_peak = tally.readings, tally.util_sum, tally.util_peak
    row.memory_sum, row.memory_peak, row.cpu_sum, row.idle = (
        tally.memory_sum,
        tally.memory_peak,
        tally.cpu_sum,
        tally.idle,
    )
    row.first, row.last = tally.first, tally.last
    row.idle_stage, row.idle_since, row.idle_last_time = state.stage.value, state.idle_since, state.last_time
    row.idle_last_memory, row.idle_last_activity = state.last_memory_mb, state.last_activity


def _apply(s: Session, job: JobRow, user: str, row: JobStatsRow, step: Step, now: float, out: Recorded) -> None:
    """Make one idle step happen: an event with its evidence, a notice, and for a release the stop."""
    if step.kind is StepKind.CLEAR:
        row.flagged_at = None
        lifecycle.event(s, job.id, now, step.kind.value, step.evidence)
        return
    if step.kind is StepKind.FLAG:
        row.flagged_at = now
        message = f"job {job.id} ({job.name}) looks idle and is flagged; it keeps its GPUs for now"
    else:
        message = f"job {job.id} ({job.name}) was idle too long: asked to checkpoint and stop, its GPUs released"
    lifecycle.event(s, job.id, now, step.kind.value, step.evidence)
    out.notices.append(Notice(step.kind.value, job.id, job.name, job.user_id, user, f"{message} ({step.evidence})"))
    if step.kind is StepKind.RELEASE:
        locked = s.scalars(select(JobRow).where(JobRow.id == job.id).with_for_update()).one()
        locked.reason = f"released after being idle ({step.evidence.split(';')[0]})"
        out.woken |= lifecycle.request_stop(s, locked, "cancel", now, locked.reason)
