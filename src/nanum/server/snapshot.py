"""Reading the cluster from the store into one `nanum.core.Snapshot` for a scheduling cycle.

Nodes come from the agents' inventories; a node is up only if it was heard from within the node timeout (by the
time stored, or the later one this server noted and has not written yet: `nanum.server.lastseen`). Running
jobs carry their allocations and an expected end (start + time limit or predicted run time, planned once when the
run is first seen, as the simulator plans it at the start). GPUs still held by a
job that is no longer running (a stopped gang waiting for its last part) count as busy, and so do free GPUs on
which the node's latest reading found a process that no nanum job owns (`node_live.rogue`). Labs and users carry
their limits, this month's GPU-hours and decayed usage, both including the running jobs' uncharged time.

`Plan` keeps, beside the snapshot, what applying decisions needs: node ids, and the reason and estimate each
pending job shows now, so only the ones that changed are written back. A `SnapshotCache` the scheduler keeps from
tick to tick holds the core jobs and runs, and brings them up to date from the job rows written since the last
tick only (`JobRows.written`); it hands back the very same core objects (jobs, runs, nodes, the node tuple)
wherever their rows did not change, so the core's caches see at once what did (`Incremental.sync`, `CycleCache`):
a tick makes core objects for what changed, not for the whole cluster. A read that fails leaves the cache to be
filled afresh by the next one. Decayed usage counts half after
`half_life` seconds (the server's setting); running jobs carry their last checkpoint, so reclaim loses least work.
"""

from __future__ import annotations

import bisect
import json
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from operator import itemgetter
from types import SimpleNamespace
from typing import Any

from sqlalchemy import Text, bindparam, cast, select
from sqlalchemy.orm import Session

from nanum.core import (
    HistoryPredictor,
    Job,
    Lab,
    Limits,
    Node,
    NodeState,
    Running,
    Snapshot,
    User,
    decay,
    expected_end,
)
from nanum.core.fairshare import DEFAULT_HALF_LIFE
from nanum.server.jobrows import JobRows
from nanum.server.services import charging, eligibility
from nanum.server.services.lifecycle import month_of, month_start
from nanum.server.views import FLEET_COLUMNS, core_job, core_lab, core_node
from nanum.store import JobRow, LabRow, NodeLiveRow, NodeRow, UsageRow, UserRow

#: What a core job is made of: the columns `views.core_job` reads, and its runs. A row whose part here is unchanged
#: keeps its core job from tick to tick.
JOB_COLUMNS = (
    JobRow.id,
    JobRow.runs,
    JobRow.user_id,
    JobRow.lab_id,
    JobRow.name,
    JobRow.burst,
    JobRow.gpus,
    JobRow.nodes,
    JobRow.gpu_model,
    JobRow.cpus,
    JobRow.memory_mb,
    JobRow.time_limit_s,
    JobRow.priority,
    JobRow.tier,
    JobRow.kind,
    JobRow.submit_time,
    JobRow.preemptible,
    JobRow.attained_gpu_seconds,
    JobRow.gpu_memory_mb,
    JobRow.environment,
    # JSON read as text: parsed only for a job not already in the cache (`_core_job`), not for every row each tick
    cast(JobRow.constraints, Text).label("constraints"),
    cast(JobRow.environment_spec, Text).label("environment_spec"),
    cast(JobRow.datasets, Text).label("datasets"),
)
_JSON_COLUMNS = ("constraints", "environment_spec", "datasets")
RUN_COLUMNS = (JobRow.start_time, JobRow.charged_until, JobRow.borrowing, JobRow.last_checkpoint,
               JobRow.over_reservation)
USER_COLUMNS = (UserRow.id, UserRow.name, UserRow.disabled, UserRow.max_gpus, UserRow.max_running_jobs,
                UserRow.monthly_gpu_hours, UserRow.decayed_usage, UserRow.decayed_at)
LAB_COLUMNS = (LabRow.id, LabRow.name, LabRow.guaranteed_gpus, LabRow.weight, LabRow.max_gpus, LabRow.max_running_jobs,
               LabRow.monthly_gpu_hours, LabRow.decayed_usage, LabRow.decayed_at)
PENDING_COLUMNS = (JobRow.reason, JobRow.reason_code, JobRow.estimated_start,
                   # what `eligibility.blocked` needs to tell which of them the core may see
                   JobRow.after.is_not(None).label("has_after"), JobRow.array_id, JobRow.array_task,
                   JobRow.array_limit)
ROW_COLUMNS = (*JOB_COLUMNS, *RUN_COLUMNS, *PENDING_COLUMNS, JobRow.state)
CORE_WIDTH = len(JOB_COLUMNS)


#: Core jobs of the last tick by id: the row it was made from, the part of that row the job is made of (its
#: `JOB_COLUMNS`), and the job. A row written for something else (its shown reason) keeps the job.
JobCache = dict[int, tuple[Any, tuple[Any, ...], Job]]
#: GPU-seconds by (kind, name): ("lab", LAB) or ("user", USER).
Seconds = defaultdict[tuple[str, str], float]


@dataclass(slots=True)
class SnapshotCache:
    """Core objects of the last tick, reused while their rows are unchanged (see the module docstring)."""

    jobs: JobCache = field(default_factory=dict)
    #: per node: (inventory as stored, state, busy GPUs, fleet columns) and the node made from them
    nodes: dict[str, tuple[tuple[Any, ...], Node]] = field(default_factory=dict)
    node_tuple: tuple[Node, ...] = ()
    #: per running job: what its `Running` is made of, and the run
    runs: dict[int, tuple[tuple[Any, ...], Running]] = field(default_factory=dict)
    #: the pending and running jobs' rows, read as they change
    rows: JobRows = field(default_factory=lambda: JobRows(ROW_COLUMNS))
    #: the running jobs' GPU-seconds not yet charged, summed as they change
    uncharged: UnchargedSums = field(default_factory=lambda: UnchargedSums())


@dataclass(slots=True)
class Plan:
    snapshot: Snapshot
    node_ids: dict[str, int]
    #: the pending jobs' rows by id, with the reason and estimate each shows now (`reason`, `reason_code`,
    #: `estimated_start`)
    pending_rows: Mapping[int, Any] = field(default_factory=dict)
    #: Pending jobs held back by dependencies or array limits: not the core's to schedule, but predicted all the same.
    waiting: tuple[Job, ...] = ()


def build(
    s: Session,
    now: float,
    timeout: float,
    predictor: HistoryPredictor,
    cache: SnapshotCache | None = None,
    half_life: float = DEFAULT_HALF_LIFE,
    seen: Callable[[int, float | None], float | None] | None = None,
) -> Plan:
    """`seen(node id, stored last_seen)`: when the node was last heard from (`LastSeen.since`; default: as stored)."""
    # Plain rows, not ORM objects: loading every user and lab as an object was most of a tick's read at 300 nodes.
    conn = s.connection()
    users = {u.id: u for u in conn.execute(_USERS)}
    labs = {lab.id: lab for lab in conn.execute(_LABS)}
    cache = cache if cache is not None else SnapshotCache()
    node_rows = sorted(conn.execute(_NODES), key=itemgetter(1))  # by name, in code points on either database
    rows = cache.rows
    full = rows.mark is None  # a first read takes every row; later ones only those written since
    try:
        return _build(s, now, timeout, predictor, cache, half_life, users, labs, node_rows, full, seen)
    except BaseException:
        rows.forget()  # what this read took may not all have reached the cache: the next one reads everything
        raise


def _build(s: Session, now: float, timeout: float, predictor: HistoryPredictor, cache: SnapshotCache,
           half_life: float, users: dict[int, Any], labs: dict[int, Any], node_rows: Any, full: bool,
           seen: Callable[[int, float | None], float | None] | None) -> Plan:
    names = {r.id: r.name for r in node_rows}
    rows = cache.rows
    running_rows, pending_rows = rows.read(s, names)
    held = rows.held
    # dependencies, array limits, disabled accounts: not the core's to schedule
    blocked = eligibility.blocked(s, pending_rows, {u.id for u in users.values() if u.disabled})
    names_of = {u.id: u.name for u in users.values()}, {lab.id: lab.name for lab in labs.values()}
    jobs = _jobs(cache, running_rows + pending_rows if full else None, names_of)
    waiting_rows = [r for r in pending_rows if r.id in blocked]
    pending_rows = [r for r in pending_rows if r.id not in blocked]
    running = _runs(cache, full, predictor)
    busy: dict[str, set[int]] = defaultdict(set)
    for job_id, places in held.items():
        if job_id not in rows.running:
            for p in places:
                busy[p.node].update(p.gpus)
    _busy_outside(s, names, running, busy, now - timeout)
    nodes = _nodes(cache, node_rows, now, timeout, busy, seen)
    owned = _owned_gpus(nodes)
    usage = _month_usage(s, now)
    ended = _ended_uncharged(s, now, half_life, usage)
    uncharged = cache.uncharged.update(rows.running, cache.jobs, None if full else rows.written, now)
    snapshot = Snapshot(
        now=now,
        nodes=nodes,
        pending=tuple(jobs[r.id][2] for r in pending_rows),
        running=running,
        labs=_labs(labs.values(), usage, ended, uncharged, now, half_life, owned),
        users=_users(users.values(), usage, ended, uncharged, now, half_life),
        month=time.strftime("%B", time.gmtime(now)),
    )
    waiting = tuple(jobs[r.id][2] for r in waiting_rows)
    return Plan(snapshot, {r.name: r.id for r in node_rows}, rows.pending, waiting)


def followed_jobs(s: Session, cache: SnapshotCache) -> list[Job]:
    """The core job of every pending and running job (those held back by dependencies too), brought up to date from
    the rows written since the last call as `build` does, and nothing else: no nodes, placements, usage or runs.
    What a server that does not schedule needs to publish the jobs' run-time predictions
    (`nanum.server.scheduler.Scheduler`): reading the whole cluster for them, its nodes most of all, was 7–8 % of
    each serving process at 1,000 nodes. `cache` is kept for this alone: its runs and nodes are never brought up to
    date, so a tick must not build from it."""
    conn = s.connection()
    names = dict(iter(conn.execute(_USER_NAMES))), dict(iter(conn.execute(_LAB_NAMES)))
    rows = cache.rows
    full = rows.mark is None
    try:
        running, pending = rows.read(s, None)
        jobs = _jobs(cache, running + pending if full else None, names)
    except BaseException:
        rows.forget()  # as `build`: what this read took may not all have reached the cache
        raise
    return [entry[2] for entry in jobs.values()]


def _jobs(cache: SnapshotCache, every: list[Any] | None, names: tuple[Mapping[int, str], Mapping[int, str]]
          ) -> JobCache:
    """The core job of every pending and running row (`cache.jobs`), brought up to date from the rows the last
    read took: `every` row after a first read, else only those written since the tick before. A row written for
    something else (the reason it shows, its pids) keeps its job."""
    rows = cache.rows
    last = cache.jobs
    if every is None:
        found, written = last, [(job_id, rows.running.get(job_id) or rows.pending.get(job_id))
                                for job_id in rows.written]
    else:
        found, written = {}, [(r.id, r) for r in every]
        cache.jobs = found
    users, labs = names
    for job_id, row in written:
        if row is None:  # no longer pending or running
            found.pop(job_id, None)
            continue
        kept = last.get(job_id)
        if kept is not None and kept[0] is row:
            found[job_id] = kept
            continue
        key = row[:CORE_WIDTH]  # what the core job is made of (`JOB_COLUMNS`), not the reason it shows
        job = kept[2] if kept is not None and kept[1] == key else _core_job(row, users[row.user_id],
                                                                             labs[row.lab_id])
        found[job_id] = (row, key, job)
    return found


def _nodes(cache: SnapshotCache, rows: Any, now: float, timeout: float, busy: dict[str, set[int]],
           seen: Callable[[int, float | None], float | None] | None = None) -> tuple[Node, ...]:
    """The core nodes, each reused from the last tick while its row and busy GPUs are the same; and the very
    same tuple when every node is."""
    last, found = cache.nodes, {}
    for r in rows:
        key = (r.inventory, _state(r, now, timeout, seen), frozenset(busy.get(r.name, ())),
               r[_FLEET_AT:])  # compared, never hashed: JSON values do
        held = last.get(r.name)
        if held is None or held[0] != key:
            held = (key, core_node(r.name, json.loads(r.inventory), key[1], key[2], r))
        found[r.name] = held
    cache.nodes = found
    nodes = tuple(node for _, node in found.values())
    if len(nodes) != len(cache.node_tuple) or any(a is not b for a, b in zip(nodes, cache.node_tuple, strict=True)):
        cache.node_tuple = nodes
    return cache.node_tuple


def _runs(cache: SnapshotCache, full: bool, predictor: HistoryPredictor) -> tuple[Running, ...]:
    """The running jobs (`cache.runs`), brought up to date from the rows the last read took (`full`: all of them,
    else those written since the tick before): a run is made again only where its row or GPUs changed (an
    allocation taken or freed stamps its job's row: `nanum.store.revs`). Call after `_jobs`.

    A run's expected end is planned once, when it is first seen with its start time, as the simulator plans it
    when it starts the run: what the predictor learns later does not move it. Else every run of a kind would
    change (and go through the core again) whenever a job of that kind ends, at every tick of a busy fleet."""
    rows, last, jobs = cache.rows, cache.runs, cache.jobs
    held = rows.held
    found = {} if full else last
    for job_id in rows.running if full else rows.written:
        row = rows.running.get(job_id)
        if row is None:  # no longer running
            found.pop(job_id, None)
            continue
        job = jobs[job_id][2]
        start = row.start_time or 0.0
        kept = last.get(job_id)
        if kept is not None and kept[0][0] is job and kept[0][2] == start:
            end = kept[0][4]
        else:
            end = expected_end(job, predictor, start)
        key = (job, held.get(job_id, ()), start, row.borrowing, end, row.last_checkpoint, row.over_reservation)
        if kept is None or kept[0] != key:
            kept = (key, Running(job=job, placements=key[1], start_time=start, borrowing=row.borrowing,
                                 expected_end=key[4], last_checkpoint=row.last_checkpoint,
                                 over_reservation=row.over_reservation))
        found[job_id] = kept
    cache.runs = found
    return tuple(map(_second, found.values()))


_second = itemgetter(1)


def _busy_outside(
    s: Session, names: dict[int, str], running: tuple[Running, ...], busy: dict[str, set[int]], since: float
) -> None:
    """Add the free GPUs on which a fresh reading found a process that no job owns (someone bypassing nanum)."""
    rogue = s.connection().execute(_ROGUE_SINCE, {"since": since}).all()
    if not any(gpus for _, gpus in rogue):
        return
    held = {(p.node, g) for run in running for p in run.placements for g in p.gpus}
    for node_id, gpus in rogue:
        name = names.get(node_id)
        if name is not None:
            busy[name].update(g for g in gpus if (name, g) not in held)


def _state(row: Any, now: float, timeout: float,
           seen: Callable[[int, float | None], float | None] | None = None) -> NodeState:
    if row.state == "draining":
        return NodeState.DRAINING
    last = row.last_seen if seen is None else seen(row.id, row.last_seen)
    fresh = last is not None and now - last <= timeout
    return NodeState.UP if fresh and row.state == "up" else NodeState.DOWN


def _month_usage(s: Session, now: float) -> Seconds:
    """This month's GPU-seconds stored, by (kind, name)."""
    rows = s.connection().execute(_MONTH_USAGE, {"month": month_of(now)})
    out: Seconds = defaultdict(float)
    out.update(((kind, name), seconds) for kind, name, seconds in rows)
    return out


def _ended_uncharged(s: Session, now: float, half_life: float, usage: Seconds
                     ) -> Seconds:
    """Runs that ended but are not yet charged to their lab and user (`charging.unsettled`): this month's part of
    each is added to `usage`, and what each adds to decayed usage by `now` is returned, by (kind, name)."""
    decayed: Seconds = defaultdict(float)
    month = month_of(now)
    for r in charging.unsettled(s):
        used = r.gpus * (r.end - r.start)
        this_month = charging.in_month(r, month)
        for key in (("lab", r.lab), ("user", r.user)):
            decayed[key] += decay(used, now - r.end, half_life)
            usage[key] += this_month
    return decayed


def _uncharged(running: tuple[Running, ...], rows: Mapping[int, Any], now: float) -> tuple[Seconds, Seconds]:
    """GPU-seconds of the running jobs not yet charged, in all and of them this month, by (kind, name) as in
    `_month_usage`. `rows`: the running jobs' rows by job id (a run without one is an error, not a wrong sum).
    Summed over every run: the definition that `UnchargedSums`, which ticks use, keeps from tick to tick (its tests
    compare the two)."""
    first = month_start(now)
    pairs: defaultdict[tuple[str, str], list[float]] = defaultdict(lambda: [0.0, 0.0])
    for run in running:
        job = run.job
        row = rows[job.id]
        start = row.charged_until or row.start_time or now
        gpus = job.total_gpus
        spent = pairs[(job.lab, job.user)]
        spent[0] += gpus * max(now - start, 0.0)
        spent[1] += gpus * max(now - max(start, first), 0.0)
    total: Seconds = defaultdict(float)
    month: Seconds = defaultdict(float)
    for (lab, user), (in_all, this_month) in pairs.items():
        for key in (("lab", lab), ("user", user)):
            total[key] += in_all
            month[key] += this_month
    return total, month


Pair = tuple[str, str]  # (lab, user)


@dataclass(slots=True)
class UnchargedSums:
    """What `_uncharged` answers, kept from tick to tick so that a tick costs the runs that changed, not all of
    them (with 8,000 jobs running, summing them all was a fifth of an idle tick).

    A run of `g` GPUs uncharged since `s` adds `g * (now - s)`: per (lab, user) pair it is enough to keep the sums
    of `g` and of `g * s`, and the same for this month's part (`s` no earlier than the month's start). Times are
    counted from the month's start, so the sums stay small enough to add and take away without losing a second.
    A run that seems to start after `now` (another server's clock ahead of this one's) adds nothing; the few such
    runs are found among the starts kept in order. A new month, or a first read, sums every run afresh."""

    first: float | None = None  # the start of the month the sums count from
    #: job id → its pair, GPUs, and start (its last charge, else its start)
    runs: dict[int, tuple[Pair, int, float]] = field(default_factory=dict)
    #: pair → [runs, Σ g, Σ g·(s − first), Σ g·(max(s, first) − first)]
    sums: dict[Pair, list[float]] = field(default_factory=dict)
    starts: list[tuple[float, int]] = field(default_factory=list)  # (s, job id) of every run, in order

    def update(self, rows: Mapping[int, Any], jobs: JobCache, written: list[int] | None, now: float
               ) -> tuple[Seconds, Seconds]:
        """`_uncharged` at `now` for the running jobs' `rows` (by id; their core jobs in `jobs`), after the rows
        `written` since the last update (None: sum them all afresh)."""
        first = month_start(now)
        if written is None or first != self.first:
            self.first, self.runs, self.sums, self.starts = first, {}, {}, []
            written = list(rows)
        for job_id in written:
            self._drop(job_id)
            row = rows.get(job_id)
            start = None if row is None else row.charged_until or row.start_time
            if start is not None:
                job = jobs[job_id][2]
                self._add(job_id, (job.lab, job.user), job.total_gpus, start)
        return self._totals(now)

    def _add(self, job_id: int, pair: Pair, gpus: int, start: float) -> None:
        first = self.first
        assert first is not None
        self.runs[job_id] = (pair, gpus, start)
        sums = self.sums.get(pair)
        if sums is None:
            sums = self.sums[pair] = [0, 0.0, 0.0, 0.0]
        sums[0] += 1
        sums[1] += gpus
        sums[2] += gpus * (start - first)
        sums[3] += gpus * max(start - first, 0.0)
        bisect.insort(self.starts, (start, job_id))

    def _drop(self, job_id: int) -> None:
        known = self.runs.pop(job_id, None)
        if known is None:
            return
        pair, gpus, start = known
        first = self.first
        assert first is not None
        sums = self.sums[pair]
        sums[0] -= 1
        if not sums[0]:
            del self.sums[pair]
        else:
            sums[1] -= gpus
            sums[2] -= gpus * (start - first)
            sums[3] -= gpus * max(start - first, 0.0)
        del self.starts[bisect.bisect_left(self.starts, (start, job_id))]

    def _totals(self, now: float) -> tuple[Seconds, Seconds]:
        first = self.first
        assert first is not None
        since = now - first
        late: defaultdict[Pair, float] = defaultdict(float)  # what the runs that start after `now` took away
        for start, job_id in self.starts[bisect.bisect_right(self.starts, (now, float("inf"))):]:
            pair, gpus, _ = self.runs[job_id]
            late[pair] += gpus * (start - now)
        total: Seconds = defaultdict(float)
        month: Seconds = defaultdict(float)
        for pair, (_, held, in_all, this_month) in self.sums.items():
            more = late.get(pair, 0.0)
            spent, spent_month = held * since - in_all + more, held * since - this_month + more
            for key in (("lab", pair[0]), ("user", pair[1])):
                total[key] += spent
                month[key] += spent_month
        return total, month


def _labs(
    rows: Any,
    usage: Seconds,
    ended: Seconds,
    uncharged: tuple[Seconds, Seconds],
    now: float,
    half_life: float,
    owned: Counter[str] | None = None,
) -> dict[str, Lab]:
    """The labs with their usage. Once any node has an owner, a lab without a guarantee of its own is guaranteed
    the GPUs it owns (none when it owns no node), as in the simulator: owners lend their idle GPUs, and reclaim
    them from borrowers when their own jobs need them."""
    extra, month = uncharged
    out = {}
    for lab in rows:
        key = ("lab", lab.name)
        core = core_lab(
            lab,
            (usage[key] + month[key]) / 3600.0,
            decay(lab.decayed_usage, now - lab.decayed_at, half_life) + extra[key] + ended[key],
        )
        if owned is not None and core.guaranteed_gpus is None:
            core = replace(core, guaranteed_gpus=owned[lab.name])
        out[lab.name] = core
    return out


def _owned_gpus(nodes: tuple[Node, ...]) -> Counter[str] | None:
    """GPUs per owning lab (down nodes too: the owner still has them); None when no node has an owner."""
    if all(node.owner is None for node in nodes):
        return None
    owned = Counter[str]()
    for node in nodes:
        if node.owner is not None:
            owned[node.owner] += len(node.gpus)
    return owned


def _users(
    rows: Any,
    usage: Seconds,
    ended: Seconds,
    uncharged: tuple[Seconds, Seconds],
    now: float,
    half_life: float,
) -> dict[str, User]:
    extra, month = uncharged
    return {
        u.name: User(
            name=u.name,
            limits=Limits(
                max_gpus=u.max_gpus, max_running_jobs=u.max_running_jobs, monthly_gpu_hours=u.monthly_gpu_hours
            ),
            used_gpu_hours=(usage[("user", u.name)] + month[("user", u.name)]) / 3600.0,
            decayed_usage=(decay(u.decayed_usage, now - u.decayed_at, half_life) + extra[("user", u.name)]
                           + ended[("user", u.name)]),
        )
        for u in rows
    }


def learn(s: Session, predictor: HistoryPredictor, after: float, limit: int = 5000) -> float:
    """Feed the predictor the jobs that completed after `after`; returns the new watermark."""
    rows = s.connection().execute(_COMPLETED_SINCE, {"after": after, "limit": limit}).all()
    for row in reversed(rows):
        if row.start_time is not None:
            predictor.observe(_core_job(row, row.user_name, row.lab_name), row.end_time - row.start_time)
    return max((r.end_time for r in rows), default=after)


#: Statements of every tick, built once (building one costs about as much as running it).
_USERS = select(*USER_COLUMNS)
_LABS = select(*LAB_COLUMNS)
_USER_NAMES = select(UserRow.id, UserRow.name)
_LAB_NAMES = select(LabRow.id, LabRow.name)
_NODES = (
    select(NodeRow.id, NodeRow.name, cast(NodeRow.inventory, Text).label("inventory"), NodeRow.state,
           NodeRow.last_seen, *FLEET_COLUMNS)  # the FLEET_COLUMNS last: a row's `[_FLEET_AT:]`
    .where(NodeRow.inventory.is_not(None))
)  # sorted by name here (`build`): PostgreSQL sorting a thousand wide rows took half of this read's time
_FLEET_AT = 5
_COMPLETED_SINCE = (
    select(*JOB_COLUMNS, JobRow.start_time, JobRow.end_time, UserRow.name.label("user_name"),
           LabRow.name.label("lab_name"))
    .join(UserRow, UserRow.id == JobRow.user_id)
    .join(LabRow, LabRow.id == JobRow.lab_id)
    .where(JobRow.state == "completed", JobRow.end_time > bindparam("after"))
    .order_by(JobRow.end_time.desc())
    .limit(bindparam("limit"))
)
_MONTH_USAGE = select(UsageRow.kind, UsageRow.name, UsageRow.gpu_seconds).where(UsageRow.month == bindparam("month"))
#: Only the nodes whose latest reading found some (written as "[]" where none): a fleet's thousand readings were
#: otherwise read and parsed at every tick to find none.
_ROGUE_SINCE = select(NodeLiveRow.node_id, NodeLiveRow.rogue).where(
    NodeLiveRow.time >= bindparam("since"), cast(NodeLiveRow.rogue, Text) != "[]"
)


def _core_job(row: Any, user: str, lab: str) -> Job:
    """`core_job` for a row of `JOB_COLUMNS`, whose JSON columns come as text."""
    values = row._asdict()
    for key in _JSON_COLUMNS:
        text = values.get(key)
        values[key] = json.loads(text) if text else None
    return core_job(SimpleNamespace(**values), user, lab)
