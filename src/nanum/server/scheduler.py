"""The scheduler loop: read the cluster, ask `nanum.core.schedule`, apply the decisions.

It runs on events (submit, cancel, an exit reported, a node change: `Signals.poke`) and at least every
`tick_interval_s`. One tick:

1. take leadership (PostgreSQL: a session advisory lock, so one server schedules when several share a database);
2. read a `Snapshot` (`nanum.server.snapshot.build`) in a read-only transaction, and feed the run-time predictor
   the jobs that completed since the last tick; of the jobs, only the rows written since the last tick are read
   (`nanum.server.jobrows`), the others are kept from it;
3. `Incremental.sync(snapshot)`: the core takes in what changed since the last tick; then `Incremental.cycle`
   (the core's `schedule`, with the state it carries from tick to tick). A tick that explains cycles though nothing
   may be `due` to start: the cycle also explains every pending job (its reason, place and estimated start), and
   those move whenever the queue does. A long queue is explained at most once a second (`EXPLAIN_EVERY_S`), and
   at most a tenth of the time (`EXPLAIN_SHARE`: a queue of 100,000 every few seconds); a tick
   between that explains nothing cycles only when something is `due`;
4. apply in one short write transaction: requeue the jobs of nodes silent for longer than their agents' lease
   and the jobs' grace (their agents have stopped them by then: `nanum.agent.fence`); start jobs (state, allocation
   rows, event: each start only if the job is still pending, and the UNIQUE allocation rows make a GPU handed
   out twice impossible); mark preemption victims to stop; write the reasons and estimates that changed; note
   budgets that crossed 80 % or 100 % (`nanum.server.services.budgets`);
5. wake the held heartbeats of every node whose desired jobs changed; a few of them (`REPLIES_READ`) get their
   reply read in the write transaction of step 4, which spares each its own read (`Signals.ready`).

Reading outside the write transaction keeps the write lock short, so submits are not held up by a large queue.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

# The Gittins index computes with numpy once a service table is long (`HistoryPredictor._best_quantum`), which
# imports it on first use to keep the command line quick. A server loads it here, at start: the first tick to
# need it would otherwise stall 50-80 ms on the import while requests wait (`Database.precedence`), and the
# processes of `--workers` share it from before the fork.
import numpy  # noqa: F401
from sqlalchemy import bindparam, func, or_, select, text
from sqlalchemy.engine import Connection
from sqlalchemy.exc import DBAPIError, SQLAlchemyError
from sqlalchemy.orm import Session

from nanum.core import Decisions, HistoryPredictor, Incremental, Job, Pending, Prediction, Preempt
from nanum.server import snapshot
from nanum.server.callers import NodeCaller
from nanum.server.context import ServerContext
from nanum.server.lastseen import PEER_SLACK_S
from nanum.server.services import agent, budgets, charging, lifecycle
from nanum.server.signals import Replies
from nanum.server.starts import start_all
from nanum.store import AllocationRow, JobRow, LabRow, NodeRow, table
from nanum.store.db import Database

log = logging.getLogger("nanum.scheduler")

#: A pending job's shown reason is rewritten when only its wording changed at most this often (seconds).
REASON_REFRESH_S = 10.0
#: A shown estimated start is rewritten when it moved by this share of the time still to wait (at least 1 s): an
#: estimate hours away does not need every second's shift written, and a busy queue's estimates all shift at
#: every tick (thousands of rows per tick on a large queue).
ESTIMATE_SLACK = 0.05
#: A tick that took this long (seconds) is followed by a pause `PACE_FACTOR` times as long (at most `PACE_MAX_S`):
#: while a tick runs, requests start no transaction (`Database.precedence`), so ticks of up to `PACE_MAX_S /
#: PACE_FACTOR` take at most a quarter of the time and requests the rest.
PACE_FROM_S = 0.05
PACE_FACTOR = 3
PACE_MAX_S = 0.5
#: With this many pending jobs or more, a tick explains them (reasons, estimates, places in the queue) at most
#: every `EXPLAIN_EVERY_S`: the other ticks only decide. Explaining 1,000 waiting jobs is about three quarters of
#: the core's cycle, and while a queue drains ticks come many times a second.
EXPLAIN_LONG_QUEUE = 200
EXPLAIN_EVERY_S = 1.0
#: ... and at most this share of the time: a tick that explained in T seconds is explained again no sooner than
#: T / EXPLAIN_SHARE later. Explaining 100,000 waiting jobs takes most of a second, which once a second kept a
#: core a third busy with nothing to start; they are explained every few seconds instead.
EXPLAIN_SHARE = 0.1
#: The decisions of a tick that had no need to cycle.
IDLE = Decisions(starts=(), preemptions=(), pending=())
#: A tick reads the replies of at most this many woken nodes with a heartbeat held here (`Scheduler._replies`).
REPLIES_READ = 4
#: Ended runs are charged to their labs and users (`charging.settle`) by at most one tick in this many seconds.
#: Settling is 8 statements, and while a queue drains ticks come 30 times a second; until then each tick counts the
#: few runs not yet charged beside the usage stored (`snapshot`), so no decision waits for it.
SETTLE_EVERY_S = 0.25


@dataclass(slots=True)
class TickResult:
    started: int = 0
    preempted: int = 0
    requeued_nodes: int = 0
    pending: int = 0
    seconds: float = 0.0


class Leadership:
    """Which server schedules. On PostgreSQL: whoever holds a session advisory lock on a dedicated connection
    (released when that server stops or its connection dies). On SQLite: always this server."""

    def __init__(self, db: Database) -> None:
        self.db = db
        self._conn: Connection | None = None

    def held(self) -> bool:
        if not self.db.is_postgres:
            return True
        try:
            if self._conn is None:
                conn = self.db.engine.connect()
                key = self.db.scheduler_lock_key(conn)
                got = conn.execute(text("SELECT pg_try_advisory_lock(:k)"), {"k": key}).scalar()
                conn.commit()
                if not got:
                    conn.close()
                    return False
                self._conn = conn
            else:
                self._conn.execute(text("SELECT 1"))
                self._conn.commit()
            return True
        except DBAPIError:
            self.release()
            return False

    def release(self) -> None:
        """Give the leadership up. The lock is released by a statement, so another server can take it as soon as
        this returns; closing the connection alone releases it only once PostgreSQL has noticed the close."""
        conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(SQLAlchemyError):  # a broken connection, or one whose transaction failed
                conn.execute(text("SELECT pg_advisory_unlock_all()"))
                conn.commit()
            conn.invalidate()  # never return it to the pool: its session may still hold the lock if that failed
            conn.close()


class Scheduler:
    def __init__(self, ctx: ServerContext, *, may_lead: bool = True) -> None:
        self.ctx = ctx
        #: False in a process that serves requests beside one that schedules (`nanum server --workers`): it never
        #: takes the leadership, so no request there waits for a tick (`Database.precedence`)
        self.may_lead = may_lead
        self.predictor = HistoryPredictor()
        self.leadership = Leadership(ctx.db)
        self._learned_until = 0.0
        self._cache = snapshot.SnapshotCache()
        #: the jobs a server that does not schedule follows for their predictions (`_follow`): a cache of its own,
        #: whose nodes and runs are never kept, so that a tick after this server takes the leadership builds anew
        self._followed = snapshot.SnapshotCache()
        #: predictions by (user, name, lab, GPUs, nodes), valid until the predictor learns something new
        self._explained: dict[tuple[str, str, str, int, int], Prediction] = {}
        #: what the predictions published last were made from: the job rows (their cache) and mark, and the
        #: `_explained` then
        self._published: tuple[object, int | None, object] = (None, None, None)
        #: The core's incremental scheduler: it decides each tick, and knows after it whether a GPU is free.
        self.core = Incremental(ctx.policy, self.predictor, (), {}, explain=True)
        self._ticked = False
        #: whether this server held the leadership at its last tick (it schedules, and keeps the database tidy)
        self.leading = False
        self._explained_at = float("-inf")
        #: seconds from one explaining tick of a long queue to the next (`EXPLAIN_EVERY_S`, `EXPLAIN_SHARE`)
        self._explain_every = EXPLAIN_EVERY_S
        self._settled_at = float("-inf")
        self._followed_at = float("-inf")
        self._shown_at: dict[int, float] = {}
        self._lock = threading.Lock()
        #: a new job asked for a tick while one ran (`poke`)
        self._asked_during_tick = False
        self.budgets = budgets.Watch()
        self._poked: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        #: ticks `run` has begun and ended, and the event the end of the next one sets (`after_next_tick`)
        self._begun = self._ended = 0
        self._tick_ended: asyncio.Event | None = None
        self.last: TickResult | None = None
        #: Called with each tick's result (the server's metrics observe cycle times).
        self.on_tick: Callable[[TickResult], None] | None = None

    # -- the loop ----------------------------------------------------------------------------------------------

    def poke(self, new_gpu_job: bool = False) -> None:
        """Run a tick soon. Safe from any thread. A new job that needs GPUs while none is free waits for the
        timer tick: it could not start, and a large queue makes every tick cost something. While a tick runs, the
        question waits for its answer (it may have read the cluster before GPUs came free, a node that just came
        up): the tick looks once it has applied its decisions. A stream of submissions to a full cluster so does
        not keep the scheduler ticking back to back."""
        if new_gpu_job and self._ticked:
            if self._lock.locked():
                self._asked_during_tick = True
                return
            if not self.core.free_gpus():
                return
        loop, poked = self._loop, self._poked
        # Already asked and not yet begun: the tick reads the store after its event is cleared, so after the commit
        # that preceded this poke (a poke per heartbeat at 1,000 nodes otherwise wakes the loop for nothing).
        if loop is not None and poked is not None and not poked.is_set() and not loop.is_closed():
            with contextlib.suppress(RuntimeError):  # the loop is closing
                loop.call_soon_threadsafe(poked.set)

    async def run(self) -> None:
        """Tick on every poke and at least every `tick_interval_s`, until cancelled."""
        self._loop, self._poked = asyncio.get_running_loop(), asyncio.Event()
        self._tick_ended = asyncio.Event()
        interval = self.ctx.settings.tick_interval_s
        try:
            while True:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._poked.wait(), timeout=interval)
                self._poked.clear()
                began = time.monotonic()
                self._begun += 1
                try:
                    await asyncio.to_thread(self.tick)
                except Exception:
                    log.exception("scheduling tick failed; retrying on the next one")
                self._ended = self._begun
                ended, self._tick_ended = self._tick_ended, asyncio.Event()
                ended.set()
                # After a long tick, leave the request threads their turn (`PACE_FACTOR`). A short one holds
                # nothing up, and waiting after it would delay the next submission's start.
                took = time.monotonic() - began
                if took >= PACE_FROM_S:
                    await asyncio.sleep(min(PACE_FACTOR * took, PACE_MAX_S))
        finally:
            self.leadership.release()

    def next_tick(self) -> int | None:
        """The number of the first tick that `run` begins from now on, where this server's loop schedules and
        jobs wait to start; else None: no tick here could start one. Call on the event loop, once what that tick
        must see is committed and the scheduler poked (`after_next_tick`)."""
        if self._tick_ended is None or not self.leading or not self.core.pending:
            return None
        return self._begun + 1

    async def after_next_tick(self, number: int) -> None:
        """Return once tick `number` (`next_tick`) has ended. Call on the event loop."""
        while self._ended < number and self._tick_ended is not None:
            await self._tick_ended.wait()

    # -- one tick ----------------------------------------------------------------------------------------------

    def tick(self, now: float | None = None) -> TickResult | None:
        """One scheduling cycle; None when another server holds the leadership. Requests start no transaction
        while it runs (`Database.precedence`): sharing the interpreter with ten busy request threads, a tick that
        needs 40 ms of CPU took 300 ms, and all the while held up every job it was starting. A server that does
        not schedule never holds them up."""
        with self._lock:
            self.leading = self.may_lead and self.leadership.held()
            if not self.leading:
                self._follow(now)
                return None
            with self.ctx.db.precedence.first():
                result = self._cycle(now)
        # Looked at once the lock is released, so that a job submitted during any tick is looked at after it.
        if self._asked_during_tick:
            self._asked_during_tick = False
            self.poke(new_gpu_job=True)
        return result

    def _follow(self, now: float | None) -> None:
        """On a server that does not schedule: keep the jobs' run-time predictions its API shows as fresh as the
        scheduling server's (at most `EXPLAIN_EVERY_S` old), from the same history. Only the predictions: the
        reasons and estimates shown are in the database, and the places in the queue are worked out when asked
        (`nanum.server.services.priority`)."""
        moment = time.monotonic()
        if moment - self._followed_at < EXPLAIN_EVERY_S:
            return
        self._followed_at = moment
        with self.ctx.db.read(one_moment=True) as s:
            self._learn(s)
            jobs = snapshot.followed_jobs(s, self._followed)  # the jobs alone: no nodes, usage or runs
        self._explain(self._followed, jobs)

    def _cycle(self, now: float | None) -> TickResult:
        began = time.perf_counter()
        if self.ctx.last_seen.overdue():  # the writer is late (see `nanum.server.lastseen`)
            self.ctx.last_seen.flush(self.ctx.db, wait=False)
        plan, now = self._read(now)
        self.core.sync(plan.snapshot)
        long_queue = len(plan.snapshot.pending) >= EXPLAIN_LONG_QUEUE
        explain = self.core.explain = not long_queue or not _within(now, self._explained_at, self._explain_every)
        # A tick that explains nothing needs no cycle when none could start or preempt anything (`due`): a full
        # cluster with a long queue then costs no pass over the queue. The reasons shown stand until the next tick
        # that explains (`EXPLAIN_EVERY_S` away, more for a queue that takes long to explain), which also cycles
        # whatever `due` says: a change `due` does not see (a lab's limit raised) waits at most that long.
        decisions = self.core.cycle(plan.snapshot) if explain or self.core.due(now) else IDLE
        result, woken, replies = self._apply(plan, decisions, now, explain)
        self.ctx.signals.wake(woken, replies)
        self.core.applied(plan.snapshot, decisions)
        if explain:
            self._explained_at = now
            self.ctx.places = {p.job_id: p.ahead + 1 for p in decisions.pending if p.ahead is not None}
        snap = plan.snapshot
        self._explain(self._cache, itertools.chain(snap.pending, plan.waiting, (r.job for r in snap.running)))
        self._ticked = True
        result.seconds = time.perf_counter() - began
        if explain and long_queue:
            self._explain_every = max(EXPLAIN_EVERY_S, result.seconds / EXPLAIN_SHARE)
        self.last = result
        if self.on_tick is not None:
            self.on_tick(result)
        return result

    def _read(self, now: float | None) -> tuple[snapshot.Plan, float]:
        """The cluster as one consistent read, and the tick's time (`now`, else the time once that read's view of
        the database is fixed).

        The time is taken after the transaction's first statement, which fixes what it sees: every run's end it
        sees was stamped by a heartbeat before that heartbeat committed, so a job this tick starts on the GPUs
        freed never seems to start before the run it replaces ended (its lab's usage would overlap, and a lab at
        its GPU limit would seem to exceed it). Taken before the read, a heartbeat that took its time after it
        and committed before the read could end a run later than the start of the job given its GPUs."""
        with self.ctx.db.read(one_moment=True) as s:
            self._learn(s)  # the first read: the view is fixed
            now = time.time() if now is None else now
            settings = self.ctx.settings
            plan = snapshot.build(s, now, settings.node_timeout_s, self.predictor, self._cache, settings.half_life_s,
                                  self.ctx.last_seen.since)
            return plan, now

    def _learn(self, s: Session) -> None:
        """Teach the predictor the runs that ended since it last learned (`snapshot.learn`)."""
        learned = snapshot.learn(s, self.predictor, self._learned_until)
        if learned != self._learned_until:
            self._explained = {}
        self._learned_until = learned

    def _explain(self, cache: snapshot.SnapshotCache, every: Iterable[Job]) -> None:
        """Publish each pending (held back by dependencies or array limits too) and running job's prediction and
        its basis (once per kind of job while the predictor learns nothing new): the API shows them without touching
        the predictor, which only ticks use. `every`: those jobs, as `cache` was brought up to date with them. While
        the predictor learned nothing since the last predictions published, and those were made from the same
        cache at the read before this one, only the jobs whose rows were written since are looked at (a job's core
        object changes only then: `nanum.server.snapshot`)."""
        explained, rows = self._explained, cache.rows
        made_from, mark, used = self._published
        if made_from is cache and rows.since is not None and rows.since == mark and used is explained:
            out = dict(self.ctx.predictions)
            jobs = cache.jobs
            for job_id in rows.written:
                entry = jobs.get(job_id)
                if entry is None:  # no longer pending or running
                    out.pop(job_id, None)
                else:
                    out[job_id] = self._prediction(entry[2], explained)
        else:
            out = {job.id: self._prediction(job, explained) for job in every}
        if len(explained) > 4 * len(out) + 1000:
            self._explained = {}
        self._published = (cache, rows.mark, self._explained)
        self.ctx.predictions = out

    def _prediction(self, job: Job, explained: dict[tuple[str, str, str, int, int], Prediction]) -> Prediction:
        key = (job.user, job.name, job.lab, job.gpus, job.nodes)
        found = explained.get(key)
        if found is None:
            found = explained[key] = self.predictor.explain(job)
        return found

    def _apply(
        self, plan: snapshot.Plan, decisions: Decisions, now: float, explained: bool = True
    ) -> tuple[TickResult, set[str], Replies]:
        """Store the decisions in one transaction; the result, the nodes to wake, and the replies of the few woken
        nodes with a heartbeat held here (`_replies`)."""
        result = TickResult(pending=len(plan.snapshot.pending) - len(decisions.starts))
        with self.ctx.db.write() as s:
            woken, result.requeued_nodes = self._sweep(s, now)
            # Lock every node and job row this tick changes up front, nodes first, each in id order, as a heartbeat
            # does (its node, then its jobs): locking them one by one in another order can deadlock with it, and
            # PostgreSQL then aborts one of the two. (SQLite's write transaction holds the whole database already.)
            # The nodes' lock is FOR NO KEY UPDATE, as a heartbeat's: no node's id changes, and the key-share locks
            # that inserting a node's readings or GPU holds takes (their foreign keys) do not wait for it, nor it
            # for them. FOR UPDATE did, and deadlocked with a node's readings at 1,000 nodes.
            victims = [v.job_id for v in decisions.preemptions]
            nodes = {plan.node_ids[p.node] for st in decisions.starts for p in st.placements}
            if victims and self.ctx.db.is_postgres:
                nodes.update(s.scalars(select(AllocationRow.node_id).where(AllocationRow.job_id.in_(victims))))
            if nodes and self.ctx.db.is_postgres:
                s.execute(select(NodeRow.id).where(NodeRow.id.in_(nodes)).order_by(NodeRow.id)
                          .with_for_update(key_share=True))
            touched = {st.job_id for st in decisions.starts} | set(victims)
            still_pending: set[int] = set()
            if touched:
                still_pending = {row.id for row in s.execute(
                    select(JobRow.id, JobRow.state).where(JobRow.id.in_(touched)).order_by(JobRow.id)
                    .with_for_update()) if row.state == "pending"}
            starts = [st for st in decisions.starts if st.job_id in still_pending]
            woken |= start_all(s, starts, plan, now)
            result.started += len(starts)
            for victim in decisions.preemptions:
                stopped = _preempt(s, victim, now)
                woken |= stopped
                result.preempted += bool(stopped)
            if explained:  # else the reasons and estimates shown stay as the last tick that explained wrote them
                self._show_reasons(s, plan, decisions.pending, now)
            if not _within(now, self._settled_at, SETTLE_EVERY_S):
                charging.settle(s, self.ctx.settings.half_life_s)  # late: labs' and users' rows stay locked briefly
                self._settled_at = now
            self.budgets.check(s, plan.snapshot, now)
            known: list[agent.Known] = []
            replies = self._replies(s, plan, woken, known)
        agent.remember(self.ctx, known)  # committed
        return result, woken, replies

    def _replies(self, s: Session, plan: snapshot.Plan, woken: set[str], known: list[agent.Known]) -> Replies:
        """The replies of the woken nodes whose heartbeat is held here, read in the tick's own transaction: the
        heartbeat then answers without a read of its own (`Signals.ready`), a millisecond sooner. Not for more
        than `REPLIES_READ` nodes, whose heartbeats read theirs side by side instead of lengthening the tick."""
        signals = self.ctx.signals
        held = sorted(n for n in signals.holding() & woken if n in plan.node_ids)
        if not held or len(held) > REPLIES_READ:
            return {}
        # Each node's generation before its read: a wake between the two drops the reply (`Signals.wake_local`).
        return {name: (signals.generation(name),
                       agent.woken_reply(self.ctx, s, NodeCaller(plan.node_ids[name], name), known))
                for name in held}

    def _sweep(self, s: Session, now: float) -> tuple[set[str], int]:
        """Nodes silent for longer than their jobs need to be surely stopped go down, and their jobs are requeued.

        A silent node's agent (or its guard) stops its jobs once its lease runs out, SIGKILLing each after its
        grace; so a node is given up `requeue_after_s(grace)` after it was last heard from, with the longest
        grace of the jobs it holds (none: no grace). Never sooner, or a job could run twice at once. After a
        restart the server first gives every agent a lease and a margin to report what ended while it was away
        (the agents retry well within their lease): a job that completed meanwhile must not be run again."""
        st = self.ctx.settings
        if now - self.ctx.started < st.requeue_after_s(0.0):
            return set(), 0
        cutoff = now - st.requeue_after_s(0.0)
        candidates = s.scalars(
            select(NodeRow)
            .where(NodeRow.state != "down", or_(NodeRow.last_seen.is_(None), NodeRow.last_seen < cutoff))
            .order_by(NodeRow.id)
            .with_for_update()
        ).all()
        graces = _graces(s, [n.id for n in candidates], st.grace_s) if candidates else {}
        woken: set[str] = set()
        silent = 0
        for node in candidates:
            wait = st.requeue_after_s(graces.get(node.id, 0.0))
            last = _last_heard(self.ctx, node)
            if last is not None and now - last <= wait:
                continue
            log.warning("node %s has not been heard from for %.0f s; requeueing its jobs", node.name, wait)
            node.state = "down"
            silent += 1
            woken |= lifecycle.node_lost(s, node, now)
            woken.add(node.name)  # its next heartbeat, if it comes, brings it up again (not answered from memory)
        return woken, silent

    def _show_reasons(self, s: Session, plan: snapshot.Plan, pending: tuple[Pending, ...], now: float) -> None:
        """Write each pending job's reason and estimate where they changed (wording-only changes: now and then)."""
        rows = []
        for p in sorted(pending, key=lambda p: p.job_id):  # rows locked in id order (see `_apply`)
            new = (p.reason.message, p.reason.code.value, p.estimated_start)
            row = plan.pending_rows.get(p.job_id)
            if row is None:
                continue
            old = (row.reason, row.reason_code, row.estimated_start)
            if not _changed(old, new, now - self._shown_at.get(p.job_id, 0.0), now):
                continue
            self._shown_at[p.job_id] = now
            rows.append({"jid": p.job_id, "r": new[0], "c": new[1], "e": new[2]})
        if len(self._shown_at) > 4 * len(pending) + 1000:
            keep = {p.job_id for p in pending}
            self._shown_at = {k: v for k, v in self._shown_at.items() if k in keep}
        if rows:
            jobs_table = table(JobRow)
            stmt = (
                jobs_table.update()
                .where(jobs_table.c.id == bindparam("jid"), jobs_table.c.state == "pending")
                .values(reason=bindparam("r"), reason_code=bindparam("c"), estimated_start=bindparam("e"))
            )
            s.connection().execute(stmt, rows)


def _within(now: float, at: float, seconds: float) -> bool:
    """Whether `at` was less than `seconds` before `now`: a tick's work done at most that often is not due again.
    A time after `now` (a clock set back, a test's own time) makes it due at once."""
    return 0.0 <= now - at < seconds


def _last_heard(ctx: ServerContext, node: NodeRow) -> float | None:
    """When the node was last heard from, for the sweep. Its stored time, or this server's own later one (a
    heartbeat's time not yet written); a node heard by another server is given `lastseen.PEER_SLACK_S` more, the
    most that server's stored times can lag behind."""
    stored, heard = node.last_seen, ctx.last_seen.latest(node.id)
    if stored is None or (heard is not None and heard >= stored):
        return heard
    return stored + PEER_SLACK_S


def _graces(s: Session, node_ids: list[int], default: float) -> dict[int, float]:
    """The longest grace (its lab's, else `default`) of the jobs holding GPUs on each of these nodes."""
    grace = func.coalesce(LabRow.grace_s, default)
    rows = s.execute(
        select(AllocationRow.node_id, func.max(grace))
        .join(JobRow, JobRow.id == AllocationRow.job_id)
        .join(LabRow, LabRow.id == JobRow.lab_id)
        .where(AllocationRow.node_id.in_(node_ids))
        .group_by(AllocationRow.node_id)
    )
    return {node_id: float(g or 0.0) for node_id, g in rows}


def _changed(
    old: tuple[str | None, str | None, float | None], new: tuple[str, str, float | None], since_shown: float,
    now: float,
) -> bool:
    if old[1] != new[1] or (old[2] is None) != (new[2] is None):
        return True
    if old[2] is not None and new[2] is not None:
        slack = max(1.0, ESTIMATE_SLACK * (min(old[2], new[2]) - now))
        if abs(old[2] - new[2]) >= slack:
            return True
    return old[0] != new[0] and since_shown >= REASON_REFRESH_S


def _preempt(s: Session, victim: Preempt, now: float) -> set[str]:
    """Stop a victim (SIGTERM, its lab's grace, SIGKILL on its nodes); it is requeued once it has stopped."""
    job = s.scalars(select(JobRow).where(JobRow.id == victim.job_id).with_for_update()).first()
    if job is None or job.state != "running" or job.stop is not None:
        return set()
    job.reason = f"preempting: {victim.reason}"
    return lifecycle.request_stop(s, job, "preempt", now, victim.reason)
