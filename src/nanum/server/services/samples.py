"""Recording a node's readings: GPU rows at full rate, the node's latest reading, each job's tally and idle state.

Called about once a second with the readings of every node heard from meanwhile, all in one write transaction
(`nanum.server.monitoring.Monitoring.flush`), with a statement or two for each step, whatever the number of
nodes:

1. raw rows in `gpu_samples` (a reading resent after a dropped request is stored once);
2. the node's latest reading in `node_live`, with the GPUs on which a process runs that no job holding that
   GPU owns (`rogue`): the scheduler treats those as busy;
3. for each job holding GPUs here, each new reading: its tally (`nanum.monitor.efficiency.Tally`) and its idle
   state (`nanum.monitor.idle.observe`); the idle steps become events with their evidence, notices for the
   owner and, for a release, a stop (SIGTERM with the preempt file, so the job can checkpoint).
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Callable, Container, Iterable, Mapping
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any, NamedTuple

from pydantic import TypeAdapter
from sqlalchemy import Integer, any_, bindparam, select, text
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from nanum.jobref import ref_of
from nanum.monitor.efficiency import Tally
from nanum.monitor.idle import IdlePolicy, IdleState, Reading, Stage, Step, StepKind, observe
from nanum.protocol import GpuSample, JobSample, Sample
from nanum.server.context import ServerContext
from nanum.server.services import lifecycle, monitor_settings
from nanum.store import AllocationRow, GpuSampleRow, JobRow, JobStatsRow, NodeLiveRow, NodeRow, UserRow, table
from nanum.store.pgarray import PgArray

GPU_SAMPLES = table(GpuSampleRow)
_INSERTS: dict[str, Any] = {}


@dataclass(frozen=True, slots=True)
class Notice:
    """Something the owner of a job should hear about (after the transaction commits)."""

    kind: str
    job_id: int
    #: the job as its owner names it (`nanum.jobref`): `12_7` for an array's task.
    job_ref: str
    job_name: str
    user_id: int
    user: str
    message: str


@dataclass(slots=True)
class Recorded:
    notices: list[Notice] = field(default_factory=list)
    woken: set[str] = field(default_factory=set)
    rogue_changed: bool = False


def record(ctx: ServerContext, batch: Mapping[int, list[Sample]], now: float) -> Recorded:
    """Store the readings of several nodes (node id → its new readings) in one transaction; see the module
    docstring. Readings of a node removed since are dropped."""
    batch = {node_id: sorted(samples, key=lambda x: x.time) for node_id, samples in batch.items() if samples}
    out = Recorded()
    if not batch:
        return out
    with ctx.db.write() as s:
        # FOR KEY SHARE: a node removed meanwhile would fail the whole write on its readings' foreign keys.
        alive = select(NodeRow.id).where(_among(s, NodeRow.id, sorted(batch))).order_by(NodeRow.id)
        nodes = list(s.scalars(alive.with_for_update(read=True, key_share=True)))
        if not nodes:
            return out
        query = select(AllocationRow.node_id, AllocationRow.gpu_index, AllocationRow.job_id).where(
            _among(s, AllocationRow.node_id, nodes)
        )
        holders: dict[int, dict[int, int]] = {node_id: {} for node_id in nodes}
        here: dict[int, set[int]] = {node_id: set() for node_id in nodes}  # with the jobs that hold no GPU here
        for node_id, gpu, job_id in s.execute(query):
            here[node_id].add(job_id)
            if gpu is not None:
                holders[node_id][gpu] = job_id
        _insert_raw(s, [(node_id, batch[node_id], holders[node_id]) for node_id in nodes])
        out.rogue_changed = _update_live(
            s, {node_id: (batch[node_id][-1], holders[node_id], here[node_id]) for node_id in nodes})
        busy = [node_id for node_id in nodes if holders[node_id]]
        if busy:
            _record_jobs(s, {node_id: (batch[node_id], holders[node_id]) for node_id in busy}, now, out)
    return out


def _among(s: Session, column: Any, ids: list[int]) -> Any:
    """`column IN ids`; on PostgreSQL `column = ANY(array)`, whose text is the same whatever the number of ids (so
    neither SQLAlchemy nor psycopg builds it anew for each batch)."""
    if s.get_bind().dialect.name == "postgresql":
        return column == any_(bindparam(None, PgArray(ids), type_=postgresql.ARRAY(Integer)))
    return column.in_(ids)


def _insert_raw(s: Session, nodes: list[tuple[int, list[Sample], dict[int, int]]]) -> None:
    rows = [
        (node_id, g.index, sample.time, _holder(sample, holders, g.index), g.util, g.memory_mb, g.power_w,
         g.temperature_c)
        for node_id, samples, holders in nodes
        for sample in samples
        for g in sample.gpus
    ]  # fmt: skip
    if not rows:
        return
    conn = s.connection()
    if conn.dialect.name == "postgresql":
        node, gpu, at, job, util, memory, power, temperature = (list(column) for column in zip(*rows, strict=True))
        conn.execute(_INSERT_RAW_PG, {
            "node": PgArray(node), "gpu": PgArray(gpu), "at": PgArray(float(t) for t in at), "job": PgArray(job),
            "util": PgArray(float(u) for u in util), "memory": PgArray(memory),
            "power": PgArray(None if w is None else float(w) for w in power),
            "temperature": PgArray(None if c is None else float(c) for c in temperature)})
        return
    conn.execute(insert_ignoring_duplicates(s), [
        {"node_id": node, "gpu_index": gpu, "res": 0, "at": at, "job_id": job, "util": util, "util_max": util,
         "memory_mb": float(memory), "memory_max": memory, "power_w": power, "temperature_c": temperature, "n": 1}
        for node, gpu, at, job, util, memory, power, temperature in rows])


#: Raw readings on PostgreSQL in one statement whatever their number (compiled once), each column an array read by
#: `unnest`; a reading resent after a dropped request is stored once (as `insert_ignoring_duplicates`).
_INSERT_RAW_PG = text(
    "INSERT INTO gpu_samples (node_id, gpu_index, res, at, job_id, util, util_max, memory_mb, memory_max, power_w,"
    " temperature_c, n) SELECT node, gpu, 0, at, job, util, util, memory, memory, power, temperature, 1 FROM"
    " unnest(CAST(:node AS INTEGER[]), CAST(:gpu AS INTEGER[]), CAST(:at AS FLOAT8[]), CAST(:job AS INTEGER[]),"
    " CAST(:util AS FLOAT8[]), CAST(:memory AS INTEGER[]), CAST(:power AS FLOAT8[]), CAST(:temperature AS FLOAT8[]))"
    " AS r(node, gpu, at, job, util, memory, power, temperature)"
    " ON CONFLICT (node_id, gpu_index, res, at, job_id) DO NOTHING"
)


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


def outside_nanum(job_id: int | None, holder: int | None, here: Container[int]) -> bool:
    """Whether a process of `job_id` (None: no job owns it) on a GPU that `holder` holds is used outside nanum:
    nobody's process, or that of a job still on the node that was not given this GPU (it escaped its share).
    A process of a job that holds nothing on the node any more was read before that job ended: the reading
    reached the server (or was written) after the job's end had freed its GPUs, which may hold the next job
    already. Taken for a stranger's, it would keep a GPU from the queue until the node's next reading."""
    return job_id is None or (job_id != holder and job_id in here)


def rogue_gpus(gpus: Iterable[GpuSample], holders: dict[int, int], here: Container[int]) -> list[int]:
    """GPUs with a process used outside nanum (`outside_nanum`); `holders`: GPU index → the job holding it now,
    `here`: every job holding any part of the node now."""
    return sorted({g.index for g in gpus for p in g.processes if outside_nanum(p.job_id, holders.get(g.index), here)})


def _update_live(s: Session, nodes: dict[int, tuple[Sample, dict[int, int], set[int]]]) -> bool:
    """Each node's latest reading and its GPUs used outside nanum; True if those GPUs changed on any node. The
    stored readings themselves are not read back: only their times and rogue GPUs."""
    query = select(_LIVE.c.node_id, _LIVE.c.time, _LIVE.c.rogue).where(_among(s, _LIVE.c.node_id, list(nodes)))
    stored = {node_id: (at, rogue) for node_id, at, rogue in s.execute(query)}
    changed = False
    rows: list[dict[str, Any]] = []
    new: list[dict[str, Any]] = []
    for node_id, (last, holders, here) in nodes.items():
        rogue = rogue_gpus(last.gpus, holders, here)
        row = {"b_node_id": node_id, "time": last.time, "gpus": _GPUS.dump_python(last.gpus, exclude_none=True),
               "jobs": _JOBS.dump_python(last.jobs, exclude_none=True), "rogue": rogue}
        if node_id not in stored:
            new.append(row)
            changed |= bool(rogue)
        elif last.time >= stored[node_id][0]:
            rows.append(row)
            changed |= list(stored[node_id][1] or []) != rogue
    conn = s.connection()
    if rows:
        conn.execute(_UPDATE_LIVE, rows)
    if new:
        conn.execute(_LIVE.insert(), [{"node_id": row.pop("b_node_id"), **row} for row in new])
    return changed


_LIVE = table(NodeLiveRow)
_UPDATE_LIVE = _LIVE.update().where(_LIVE.c.node_id == bindparam("b_node_id"))
#: A reading's GPUs and jobs as stored, each list in one call (not one per item).
_GPUS, _JOBS = TypeAdapter(list[GpuSample]), TypeAdapter(list[JobSample])


# -- jobs ------------------------------------------------------------------------------------------------------


class _Job(NamedTuple):
    id: int
    name: str
    user_id: int
    lab_id: int
    kind: str
    user: str
    array_id: int | None
    array_task: int | None

    @property
    def ref(self) -> str:
        return ref_of(self.id, self.array_id, self.array_task)


def _record_jobs(s: Session, nodes: dict[int, tuple[list[Sample], dict[int, int]]], now: float, out: Recorded) -> None:
    """Fold each node's readings into the tallies and idle states of the running jobs holding its GPUs."""
    gpus_of: dict[int, dict[int, list[int]]] = {}  # node → job → its GPUs there
    for node_id, (_, holders) in nodes.items():
        mine: dict[int, list[int]] = defaultdict(list)
        gpus_of[node_id] = mine
        for gpu, job_id in holders.items():
            mine[job_id].append(gpu)
    ids = sorted({job_id for mine in gpus_of.values() for job_id in mine})
    query = (
        select(JobRow.id, JobRow.name, JobRow.user_id, JobRow.lab_id, JobRow.kind, UserRow.name, JobRow.array_id,
               JobRow.array_task)
        .join(UserRow, UserRow.id == JobRow.user_id)
        .where(_among(s, JobRow.id, ids), JobRow.state == "running", JobRow.stop.is_(None))
    )
    jobs = {row[0]: _Job(*row) for row in s.execute(query)}
    loaded = s.execute(select(*_STATS_READ).where(_among(s, JOB_STATS.c.job_id, list(jobs))))
    stats = {row.job_id: SimpleNamespace(**row._asdict()) for row in loaded}
    server, labs = monitor_settings.policies(s)
    new = [node_id for node_id, mine in gpus_of.items() if any(j in jobs and j not in stats for j in mine)]
    hardware = _hardware(s, new) if new else {}
    created: dict[int, SimpleNamespace] = {}
    folded: dict[int, SimpleNamespace] = {}
    for node_id, mine in gpus_of.items():
        samples = nodes[node_id][0]
        for job_id, gpus in mine.items():
            job = jobs.get(job_id)
            if job is None:  # not running, or asked to stop (by this batch too)
                continue
            row = stats.get(job_id)
            if row is None:
                row = stats[job_id] = created[job_id] = _new_stats(job_id, hardware.get(node_id, {}), gpus)
            folded[job_id] = row
            steps = _fold(row, node_id, samples, sorted(gpus), labs.get(job.lab_id, server), job.kind, now)
            for step in steps:
                if _apply(s, job, row, step, now, out):
                    del jobs[job_id]
                    break
    _write_stats(s, [r for j, r in folded.items() if j not in created], list(created.values()))


#: The columns of a job's tally that its readings change (`_fold`, `_apply`), with their types on PostgreSQL.
_STATS_WRITTEN = {
    "readings": "INTEGER", "util_sum": "FLOAT8", "util_peak": "FLOAT8", "memory_sum": "FLOAT8",
    "memory_peak": "INTEGER", "cpu_sum": "FLOAT8", "idle": "INTEGER", "first": "FLOAT8", "last": "FLOAT8",
    "util_now": "FLOAT8", "memory_now": "INTEGER", "cpu_now": "FLOAT8", "idle_stage": "TEXT", "idle_since": "FLOAT8",
    "idle_last_time": "FLOAT8", "idle_last_memory": "INTEGER", "idle_last_activity": "FLOAT8",
    "flagged_at": "FLOAT8", "marks": "JSON",
}  # fmt: skip
JOB_STATS = table(JobStatsRow)
_STATS_READ = (JOB_STATS.c.job_id, *(JOB_STATS.c[name] for name in _STATS_WRITTEN))
#: The tallies of many jobs in one statement on PostgreSQL, its text the same whatever their number (so compiled
#: once): each column a typed array, read by `unnest`. JSON goes as text.
_UPDATE_STATS_PG = text(
    "UPDATE job_stats SET "
    + ", ".join(f"{name} = CAST(v.{name} AS JSON)" if kind == "JSON" else f"{name} = v.{name}"
                for name, kind in _STATS_WRITTEN.items())
    + " FROM unnest(CAST(:job_id AS INTEGER[]), "
    + ", ".join(f"CAST(:{name} AS {'TEXT' if kind == 'JSON' else kind}[])" for name, kind in _STATS_WRITTEN.items())
    + f") AS v(job_id, {', '.join(_STATS_WRITTEN)}) WHERE job_stats.job_id = v.job_id"
)
#: Elsewhere (SQLite), one UPDATE run for each job (`executemany`).
_UPDATE_STATS = (
    JOB_STATS.update()
    .where(JOB_STATS.c.job_id == bindparam("b_job_id"))
    .values({name: bindparam(f"b_{name}") for name in _STATS_WRITTEN})
)


def _write_stats(s: Session, changed: list[SimpleNamespace], created: list[SimpleNamespace]) -> None:
    """Store the tallies folded here: one statement for the changed, one for the new."""
    conn = s.connection()
    if changed and conn.dialect.name == "postgresql":
        columns: dict[str, list[Any]] = {"job_id": PgArray(r.job_id for r in changed)}
        for name, kind in _STATS_WRITTEN.items():
            values = [getattr(r, name) for r in changed]
            columns[name] = PgArray(None if v is None else _AS[kind](v) for v in values)
        conn.execute(_UPDATE_STATS_PG, columns)
    elif changed:
        conn.execute(_UPDATE_STATS, [
            {"b_job_id": r.job_id, **{f"b_{name}": getattr(r, name) for name in _STATS_WRITTEN}} for r in changed])
    if created:
        conn.execute(JOB_STATS.insert(), [vars(r) for r in created])


#: How a value is sent in a column's array (an array holds one type: an integer-valued float must not go as one).
_AS: dict[str, Callable[[Any], Any]] = {"INTEGER": round, "FLOAT8": float, "TEXT": str, "JSON": json.dumps}


def _hardware(s: Session, nodes: list[int]) -> dict[int, dict[int, tuple[str, int]]]:
    """Node → GPU index → (model, memory in MB)."""
    return {
        node_id: {int(g["index"]): (str(g.get("model", "")), int(g.get("memory_mb", 0)))
                  for g in (inventory or {}).get("gpus", ())}
        for node_id, inventory in s.execute(select(NodeRow.id, NodeRow.inventory).where(_among(s, NodeRow.id, nodes)))
    }


def _new_stats(job_id: int, hardware: dict[int, tuple[str, int]], gpus: list[int]) -> SimpleNamespace:
    """A job's first tally (written by `_write_stats`)."""
    model, memory = hardware.get(min(gpus), ("", 0)) if gpus else ("", 0)
    return SimpleNamespace(
        job_id=job_id, readings=0, util_sum=0.0, util_peak=0.0, memory_sum=0.0, memory_peak=0, cpu_sum=0.0, idle=0,
        first=None, last=None, util_now=None, memory_now=None, cpu_now=None, idle_stage="active", idle_since=None,
        idle_last_time=None, idle_last_memory=None, idle_last_activity=None, flagged_at=None, marks={},
        gpu_model=model or None, gpu_memory_mb=memory or None,
    )


def _fold(
    row: SimpleNamespace, node_id: int, samples: list[Sample], gpus: list[int], policy: IdlePolicy, kind: str,
    now: float,
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


def tally_of(row: Any) -> Tally:
    """The tally in `row`: anything with `job_stats` tally columns as attributes (its ORM object, a plain row)."""
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


def idle_state_of(row: SimpleNamespace) -> IdleState:
    return IdleState(
        stage=Stage(row.idle_stage or "active"),
        idle_since=row.idle_since,
        last_time=row.idle_last_time,
        last_memory_mb=row.idle_last_memory,
        last_activity=row.idle_last_activity,
    )


def _store(row: SimpleNamespace, tally: Tally, state: IdleState) -> None:
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


def _apply(s: Session, job: _Job, row: SimpleNamespace, step: Step, now: float, out: Recorded) -> bool:
    """Make one idle step happen: an event with its evidence, a notice, and for a release the stop. True if the
    job was released."""
    if step.kind is StepKind.CLEAR:
        row.flagged_at = None
        lifecycle.event(s, job.id, now, step.kind.value, step.evidence)
        return False
    if step.kind is StepKind.FLAG:
        row.flagged_at = now
        message = f"job {job.ref} ({job.name}) looks idle and is flagged; it keeps its GPUs for now"
    else:
        message = f"job {job.ref} ({job.name}) was idle too long: asked to checkpoint and stop, its GPUs released"
    lifecycle.event(s, job.id, now, step.kind.value, step.evidence)
    out.notices.append(Notice(step.kind.value, job.id, job.ref, job.name, job.user_id, job.user,
                              f"{message} ({step.evidence})"))
    if step.kind is not StepKind.RELEASE:
        return False
    locked = s.scalars(select(JobRow).where(JobRow.id == job.id).with_for_update()).one()
    locked.reason = f"released after being idle ({step.evidence.split(';')[0]})"
    out.woken |= lifecycle.request_stop(s, locked, "cancel", now, locked.reason)
    return True
