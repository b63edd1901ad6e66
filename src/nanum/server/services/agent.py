"""The agent endpoint's work: record what a node reports, and tell it which jobs it should run.

One heartbeat, in one transaction: store the node's inventory and mark it up (its time is written with others' a
moment later, `nanum.server.lastseen`, unless it came up or changed); for each job the agent reports,
record it running, keep a job that was requeued while its node was silent (`lifecycle.recover`), or process its
exit (`lifecycle.parts_exited`) and acknowledge it; then build the node's desired list, and find which of the jobs
it names run here. Log chunks are appended to `$HOME/logs/<job_id>.log` after the transaction. A heartbeat that
would change nothing but the node's `last_seen` is answered from a read transaction instead, and its time written
with others' a moment later (`nanum.server.lastseen`): most heartbeats of a quiet fleet are such.

Either kind of heartbeat leaves its answer in memory for the node's next one, if that would be quiet: a quiet
heartbeat's for the same report, a writing one's for the same report less the ends it acknowledged; where the answer
hands the node new jobs, for that report with those jobs running (`_next_report`), as a held heartbeat woken with
new jobs leaves its own (`expect_started`), so that the heartbeat reporting a start reads nothing. That next
heartbeat, reporting just that (its hardware, its jobs' pids, addresses and checkpoints, its GPU problems), is
answered from memory, while nothing woke the node meanwhile (every change to a node's jobs, its GPUs' acceptance
or health wakes it, on every server sharing the database: `Signals.generation`) and this server hears every other
server's wakes (`Signals.hears_all`), for at most a lease (`Settings.lease_s`). Any change the agent makes (a job
started or ended, through this server or another) changes its report. A node that long-polls sends its next
heartbeat when its held one ends, up to a third of a lease later (`nanum.server.api.agent`): a shorter memory
would have each of a quiet fleet's heartbeats read the store. Where such a heartbeat carries no output, and the
answer remembered says what its reply told of the jobs' logs, it is answered on the event loop, without a thread
(`recall`).
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from time import monotonic
from typing import Any

from sqlalchemy import bindparam, or_, select
from sqlalchemy.orm import Session

from nanum.protocol import EnvironmentSpec, Heartbeat, HeartbeatReply, JobLaunch, JobStatus
from nanum.server.callers import NodeCaller
from nanum.server.context import HeldGpus, ServerContext
from nanum.server.errors import Unauthorized
from nanum.server.services import environments, fleet, joblogs, lifecycle
from nanum.server.services import inventory as nodeinventory
from nanum.store import AllocationRow, JobRow, LabRow, NodeRow, UserRow

#: Base of the rendezvous port of multi-node jobs: MASTER_PORT = base + job id modulo 1000.
MASTER_PORT_BASE = 29500


@dataclass(slots=True, frozen=True)
class QuietAnswer:
    """A quiet heartbeat's answer, and what it was given for: the node's `generation` then and what it reported."""

    generation: tuple[int, int]
    until: float  # monotonic()
    reported: tuple[Any, ...]
    desired: list[JobLaunch]
    version: int
    runs: dict[int, tuple[int, bool]]
    #: the log offsets the answer gave, by job (of its run in `runs`); None: not known here (`recall` then passes)
    offsets: dict[int, int] | None = None


@dataclass(slots=True)
class Outcome:
    """What handling one heartbeat produced: the reply, nodes to wake, and whether the scheduler should run."""

    reply: HeartbeatReply
    woken: set[str] = field(default_factory=set)
    poke: bool = False
    idle: bool = False
    version: int = 0


def heartbeat(ctx: ServerContext, who: NodeCaller, hb: Heartbeat) -> Outcome:
    now = ctx.clock()
    quiet = _quiet(ctx, who, hb, now)
    if quiet is not None:
        return quiet
    memo = ctx.caches.quiet.pop(who.id, None)  # what it reports now may differ from the store, or change it
    generation = ctx.signals.generation(who.name)  # taken before the write: a wake during it makes its answer old
    with ctx.db.write() as s:
        # FOR NO KEY UPDATE: serializes with the ticks and heartbeats that write the node, not with the inserts
        # whose foreign keys name it (its readings, its GPU holds), as the tick's lock (`Scheduler._apply`)
        node = s.get(NodeRow, who.id, with_for_update={"key_share": True})
        if node is None:  # removed while its token was cached
            raise Unauthorized(f"node {who.name} was removed; add it again with `nanum node add {who.name}`")
        poke, written = _record_node(ctx, s, node, hb, now)
        if hb.gpu_problems and fleet.record_health(s, node, hb.gpu_problems, now):
            ctx.caches.nodes.clear()
            poke = True
        held, stored = _held_jobs(s, node.id)
        acks, woken, freed, ended = _record_jobs(s, node, hb, held, stored, now)
        if fleet.drain_for_fault(s, node, hb.jobs, now):
            ctx.caches.nodes.clear()
            poke = True
        poke = poke or bool(acks) or bool(woken) or freed
        version = lifecycle.desired_version(s, node)
        if ended is not None:  # the reports only ended jobs here: the others hold what they held
            held_now = {job_id: gpus for job_id, gpus in held.items() if job_id not in ended}
            jobs_now = {job_id: row for job_id, row in stored.items() if job_id not in ended}
        else:
            s.flush()  # the reports' changes, for the read below
            held_now, jobs_now = _held_jobs(s, node.id)  # as the jobs' reports left them
        desired = _recalled(ctx, node.id, version, held_now, ended=True)
        if desired is None:
            desired = desired_jobs(ctx, s, node, held_now)
        paths = environments.check_paths(ctx, s)
        mentioned = {c.job_id for c in hb.logs} | {j.job_id for j in hb.jobs}
        runs = _known_runs(ctx, memo, generation, mentioned)
        if runs is None:
            runs = joblogs.runs_in(s, who.name, mentioned)
        # Before the commit: once a job shows as ended, the output its last report carried is in its log.
        offsets = _write_logs(ctx, who, hb, runs)
        # What the agent reports next if nothing changes: the same, less the ends acknowledged now.
        following = [j for j in hb.jobs if j.job_id not in acks]
        settled = _settled(hb, following, node, held_now, jobs_now)
    # Once committed: a rolled-back transaction's list is never remembered (`remember`).
    _remember(ctx, who.id, version, held_now, desired)
    ctx.last_seen.heard(who.id, now, written=written)
    kept_for: tuple[int, int] | None = generation
    if acks or woken or freed:  # the node's jobs changed: a reply a tick read before is old (`Signals.outdate`)
        kept_for = ctx.signals.outdate(who.name, generation)
    if settled and kept_for is not None:
        memo = _keep_quiet(ctx, who, kept_for, _next_report(hb, following, desired, held_now.keys()), desired,
                           version, jobs_now)
        _told(ctx, who, memo, offsets)
    return _outcome(ctx, hb, desired, acks, paths, woken, poke, version, offsets)


def _write_logs(ctx: ServerContext, who: NodeCaller, hb: Heartbeat,
                runs: dict[int, tuple[int, bool]] | None = None) -> dict[int, int]:
    """Append the heartbeat's log chunks; each reported job's log length. `runs`: `joblogs.runs_on`'s answer, when
    already read."""
    return joblogs.write_logs(ctx, who.name, hb.logs, hb.jobs, runs)


def _outcome(ctx: ServerContext, hb: Heartbeat, desired: list[JobLaunch], acks: list[int], paths: list[str] | None,
             woken: set[str], poke: bool, version: int, offsets: dict[int, int]) -> Outcome:
    """The reply, and what the heartbeat changed."""
    reply = _reply(ctx, desired, acks, offsets)
    reply.check_paths = paths
    running = {j.job_id for j in hb.jobs if j.state == "running"}
    idle = not acks and {d.job_id for d in desired} == running
    return Outcome(reply, woken, poke, idle, version)


def recall(ctx: ServerContext, who: NodeCaller, hb: Heartbeat) -> Outcome | None:
    """The outcome of a quiet heartbeat that carries no output, where the node's last one here left its answer
    and what it was told of its jobs' logs: found in memory alone, no statement and no file read, so the endpoint
    answers it without a thread (at 1,000 nodes, about two heartbeats in three). None where anything must be read
    (`heartbeat` then answers it)."""
    if hb.logs or any(j.state != "running" for j in hb.jobs) or ctx.last_seen.behind():
        return None
    memo = _memo(ctx, who, hb)
    if memo is None or memo.offsets is None or (paths := environments.known_paths(ctx)) is None:
        return None
    ctx.last_seen.heard(who.id, ctx.clock())
    return _outcome(ctx, hb, memo.desired, [], paths, set(), False, memo.version, memo.offsets)


def _memo(ctx: ServerContext, who: NodeCaller, hb: Heartbeat) -> QuietAnswer | None:
    """The answer the node's last heartbeat here left for this one (`_keep_quiet`, `expect_started`), if it still
    holds: nothing woke the node since, every other server's wakes are heard, and this heartbeat reports just what
    it was left for."""
    memo = ctx.caches.quiet.get(who.id)
    if memo is None or not _holds(ctx, memo, ctx.signals.generation(who.name)):
        return None
    return memo if memo.reported == _reported(hb, hb.jobs) else None


def _holds(ctx: ServerContext, memo: QuietAnswer, generation: tuple[int, int]) -> bool:
    """Whether what `memo` says of the node's jobs still holds at the node's `generation`: nothing woke it since,
    within a lease, while every other server's wakes are heard."""
    return memo.generation == generation and monotonic() < memo.until and ctx.signals.hears_all()


def _known_runs(ctx: ServerContext, memo: QuietAnswer | None, generation: tuple[int, int],
                ids: set[int]) -> dict[int, tuple[int, bool]] | None:
    """What `joblogs.runs_in` would find for `ids`, from the node's last remembered answer where nothing woke the
    node since (a job's run and nodes change only when it starts, which wakes them) and it covers every one."""
    if memo is None or not _holds(ctx, memo, generation) or not ids <= memo.runs.keys():
        return None
    return {job_id: memo.runs[job_id] for job_id in ids}


def _told(ctx: ServerContext, who: NodeCaller, memo: QuietAnswer, offsets: dict[int, int]) -> None:
    """Note in the node's remembered answer the log offsets its reply gave (those `recall` gives again): a lower
    bound on what the server holds of each job's current run, as logs only grow within a run."""
    if ctx.caches.quiet.get(who.id) is memo:
        ctx.caches.quiet[who.id] = dataclasses.replace(memo, offsets=offsets)


def _quiet(ctx: ServerContext, who: NodeCaller, hb: Heartbeat, now: float) -> Outcome | None:
    """The outcome of a heartbeat that would change nothing stored but the node's `last_seen`, found in a read
    transaction, or in memory where the node's last heartbeat here reported just the same (see the module
    docstring); its time is noted for the next batched write (`nanum.server.lastseen`). None when the heartbeat
    reports something new (an ended job, other hardware, a GPU problem, a node that was down, a job it should not
    run...): `heartbeat` then writes it, `last_seen` with it."""
    if any(j.state != "running" for j in hb.jobs) or ctx.last_seen.behind():
        return None
    generation = ctx.signals.generation(who.name)  # taken before the read: a wake during it makes its answer old
    memo = _memo(ctx, who, hb)
    if memo is not None and (paths := environments.known_paths(ctx)) is not None:
        ctx.last_seen.heard(who.id, now)
        known = memo.runs if all(c.job_id in memo.runs for c in hb.logs) else None
        offsets = _write_logs(ctx, who, hb, known)
        _told(ctx, who, memo, offsets)
        return _outcome(ctx, hb, memo.desired, [], paths, set(), False, memo.version, offsets)
    with ctx.db.read() as s:
        node = s.connection().execute(_QUIET_NODE, {"node": who.id}).first()  # a plain row: no ORM object
        if node is None:
            return None
        held, jobs = _held_jobs(s, node.id)
        if not _settled(hb, hb.jobs, node, held, jobs):
            return None
        version = node.desired_version or 0  # read before the desired jobs: a change between is seen as one
        desired = _recalled(ctx, node.id, version, held)
        if desired is None:
            desired = desired_jobs(ctx, s, who, held)
            _remember(ctx, node.id, version, held, desired)
        paths = environments.check_paths(ctx, s)
    ctx.last_seen.heard(who.id, now)
    memo = _keep_quiet(ctx, who, generation, _next_report(hb, hb.jobs, desired, held.keys()), desired, version, jobs)
    known = memo.runs if all(c.job_id in memo.runs for c in hb.logs) else None
    offsets = _write_logs(ctx, who, hb, known)
    _told(ctx, who, memo, offsets)
    return _outcome(ctx, hb, desired, [], paths, set(), False, version, offsets)


def _settled(hb: Heartbeat, reports: list[JobStatus], node: Any, held: dict[int, list[int]],
             jobs: dict[int, Any]) -> bool:
    """Whether a heartbeat with `hb`'s hardware and GPU problems and these job reports would change nothing stored
    but the node's `last_seen`, given the node's row (`_QUIET_NODE`'s columns) and the jobs holding GPUs there
    (`_held_jobs`)."""
    if node.state == "down" or node.accepted_gpus is None:
        return False
    if hb.gpu_problems and any(str(p.index) not in (node.gpu_health or {}) for p in hb.gpu_problems):
        return False  # `fleet.record_health` may take a GPU out of service
    inventory = hb.node.model_dump(exclude={"name"})
    usable, extra = nodeinventory.split(inventory["gpus"], node.accepted_gpus)
    inventory["gpus"] = usable
    if extra != (node.unaccepted_gpus or []) or node.inventory != inventory:
        return False
    return _jobs_unchanged(reports, held, jobs)


def _keep_quiet(ctx: ServerContext, who: NodeCaller, generation: tuple[int, int], reported: tuple[Any, ...],
                desired: list[JobLaunch], version: int, jobs: dict[int, Any]) -> QuietAnswer:
    """Remember the answer to a heartbeat that reports `reported`, for at most a lease: the backstop for a change
    that woke no node (a wake another server could not send)."""
    runs = {job_id: (row.runs or 0, row.nodes > 1) for job_id, row in jobs.items()}  # as `joblogs.runs_on` finds them
    memo = ctx.caches.quiet[who.id] = QuietAnswer(generation, monotonic() + ctx.settings.lease_s, reported, desired,
                                                  version, runs)
    return memo


def _next_report(hb: Heartbeat, reports: list[JobStatus], desired: list[JobLaunch], held: Iterable[int]
                 ) -> tuple[Any, ...]:
    """What the node's next heartbeat reports if nothing changes meanwhile (as `_reported` puts it): `reports`,
    and after them, running, the jobs of the answer `desired` that it does not run yet (an agent lists the jobs
    it starts after those it holds, in the answer's order). Such a report changes nothing stored, as `_quiet`
    would find, only where every job reported is still desired, the node holds GPUs for none but the desired jobs
    (not for one stopped before its agent heard of it, whose GPUs that heartbeat frees) and the new jobs report no
    address (a notebook's or shell's first report stores one): elsewhere it is `reports` alone."""
    node, jobs, problems = _reported(hb, reports)
    running = {st.job_id for st in reports}
    ids = {d.job_id for d in desired}
    new = [d for d in desired if d.job_id not in running]
    if new and running <= ids and set(held) == ids and all(d.kind == "batch" for d in new):
        jobs = (*jobs, *((d.job_id, "running", None, None) for d in new))
    return node, jobs, problems


def _reported(hb: Heartbeat, reports: list[JobStatus]) -> tuple[Any, ...]:
    """What of a heartbeat with these job reports decides whether it is quiet (`_settled` compares all of it with
    the store)."""
    return (hb.node, tuple((j.job_id, j.state, j.address, j.checkpoint_at) for j in reports),
            tuple((p.index, p.problem) for p in hb.gpu_problems))


#: What `_quiet` reads of the node (statements every heartbeat runs are built once: building one costs about as
#: much as running it).
_QUIET_NODE = select(NodeRow.id, NodeRow.state, NodeRow.accepted_gpus, NodeRow.unaccepted_gpus, NodeRow.gpu_health,
                     NodeRow.inventory, NodeRow.desired_version).where(NodeRow.id == bindparam("node"))


def _remember(ctx: ServerContext, node_id: int, version: int, held: dict[int, list[int]],
              desired: list[JobLaunch]) -> None:
    ctx.caches.desired.put(node_id, (version, _held_key(held), desired))


def _recalled(ctx: ServerContext, node_id: int, version: int, held: dict[int, list[int]], *,
              ended: bool = False) -> list[JobLaunch] | None:
    """The node's desired jobs as last built, if its desired version and its jobs' GPUs are still what they were
    then: the version grows whenever the jobs a node should run change (`lifecycle.bump`). `ended`: also where
    some of the jobs it held then hold no GPU there now, the others the same GPUs: the list less those. A job
    leaves a node's list without a bump only by ending there (its report frees its GPUs); every other way off
    it (a stop, a requeue, a gang's other part failing) bumps the version."""
    hit = ctx.caches.desired.get(node_id)
    if hit is None:
        return None
    known_version, known_held, desired = hit
    if known_version != version:
        return None
    now_held = _held_key(held)
    if known_held == now_held:
        return desired
    if not ended or not set(now_held) <= set(known_held):
        return None
    return [d for d in desired if d.job_id in held]


def _held_key(held: dict[int, list[int]]) -> HeldGpus:
    return tuple(sorted((job_id, tuple(sorted(gpus))) for job_id, gpus in held.items()))


_HELD_JOBS = (
    select(AllocationRow.gpu_index, JobRow.id, JobRow.state, JobRow.stop, JobRow.session_address,
           JobRow.last_checkpoint, JobRow.runs, JobRow.nodes)
    .join(JobRow, JobRow.id == AllocationRow.job_id)
    .where(AllocationRow.node_id == bindparam("node"))
)


def _held_jobs(s: Session, node_id: int) -> tuple[dict[int, list[int]], dict[int, Any]]:
    """`_held`, and what a heartbeat may change of each job holding GPUs here, in one query."""
    held: dict[int, list[int]] = defaultdict(list)
    jobs: dict[int, Any] = {}
    for row in s.connection().execute(_HELD_JOBS, {"node": node_id}):
        gpus = held[row.id]
        if row.gpu_index is not None:
            gpus.append(row.gpu_index)
        jobs[row.id] = row
    return held, jobs


def _jobs_unchanged(reports: list[JobStatus], held: dict[int, list[int]], jobs: dict[int, Any]) -> bool:
    """Whether `_record_jobs` would change nothing for these reports of running jobs: each is a running job held
    here, with the address and checkpoint already stored, and no job held here that is not reported has ended or
    been told to stop (its GPUs would be freed)."""
    reported = {st.job_id for st in reports}
    if not reported <= held.keys():
        return False
    for job_id in held.keys() - reported:
        row = jobs[job_id]
        if row.state != "running" or row.stop is not None:
            return False
    return all(_report_unchanged(st, held, jobs) for st in reports)


def _report_unchanged(st: JobStatus, held: dict[int, list[int]], jobs: dict[int, Any]) -> bool:
    """Whether this report is of a running job held here, with the address and checkpoint already stored:
    `_record_jobs` would change nothing for it.

    A job's pid is the agent's to know, not the store's: the heartbeat that first reports a job the agent has just
    started is then as quiet as those after it (it was a write, a third of a fleet's heartbeats)."""
    row = jobs.get(st.job_id)
    if st.state != "running" or st.job_id not in held or row is None or row.state != "running":
        return False
    if st.address is not None and st.address != row.session_address:
        return False
    return st.checkpoint_at is None or (row.last_checkpoint is not None and st.checkpoint_at <= row.last_checkpoint)


def desired_reply(ctx: ServerContext, who: NodeCaller) -> HeartbeatReply:
    """The reply to a held heartbeat once something changed (or the wait ended)."""
    known: list[Known] = []
    with ctx.db.read() as s:
        reply = woken_reply(ctx, s, who, known)
    remember(ctx, known)
    return reply


#: A node's desired jobs as read, with what they were read for: (node id, its desired version, its jobs' GPUs).
Known = tuple[int, int, dict[int, list[int]], list[JobLaunch]]


def woken_reply(ctx: ServerContext, s: Session, who: NodeCaller, known: list[Known] | None = None) -> HeartbeatReply:
    """`desired_reply`, read in `s`: also inside the transaction that changed the node's jobs (the scheduler's,
    whose statements bypass the session's objects: they are read anew). `known` is given what was read, for
    `remember` once it is committed: the node's next heartbeat, which reports the jobs just started, then finds
    its desired jobs in memory instead of reading them again (a third of that heartbeat's CPU)."""
    version = lifecycle.stored_desired_version(s, who.id)  # read before the jobs
    held = _held(s, who.id)
    desired = desired_jobs(ctx, s, who, held, fresh=True)
    if known is not None:
        known.append((who.id, version, held, desired))
    reply = _reply(ctx, desired, [], {})
    reply.check_paths = environments.check_paths(ctx, s)
    return reply


def expect_started(ctx: ServerContext, who: NodeCaller, hb: Heartbeat, generation: tuple[int, int],
                   reply: HeartbeatReply) -> None:
    """A held heartbeat `hb` was answered with `reply`, read once the node's generation was `generation`: where
    the reply hands the node new jobs, remember the quiet answer for its next heartbeat, which reports them
    started (`_next_report`), so that it is answered from memory instead of reading the store again. What the
    reply was read from is what `remember` kept; it is used only when it is the reply's list."""
    hit = ctx.caches.desired.get(who.id)
    if hit is None or hit[2] != reply.desired or any(j.state != "running" for j in hb.jobs):
        return
    version, held, desired = hit
    expected = _next_report(hb, hb.jobs, desired, (job_id for job_id, _ in held))
    if len(expected[1]) == len(hb.jobs):
        return  # nothing new, or a report that would change something
    runs = {d.job_id: (d.run, d.nnodes > 1) for d in desired}
    # What the node was told of its logs: nothing yet of a new run; of a run it kept, what the last answer said.
    before = ctx.caches.quiet.get(who.id)
    offsets = None
    if before is not None and before.offsets is not None:
        kept = {j.job_id for j in hb.jobs}
        offsets = {job_id: before.offsets[job_id] if before.runs.get(job_id) == run else 0
                   for job_id, run in runs.items() if job_id in before.offsets}
        offsets.update({job_id: 0 for job_id in runs if job_id not in kept})
    ctx.caches.quiet[who.id] = QuietAnswer(generation, monotonic() + ctx.settings.lease_s, expected, desired, version,
                                           runs, offsets)


def with_new_jobs(ctx: ServerContext, who: NodeCaller, hb: Heartbeat, reply: HeartbeatReply, fresh: HeartbeatReply,
                  generation: tuple[int, int]) -> HeartbeatReply:
    """`reply`, to a heartbeat `hb` that reported ends, with the node's desired jobs as `fresh` (read once the node's
    generation was `generation`) has them; the node's next heartbeat, reporting the jobs it kept and the new ones
    running, is then answered from memory (`expect_started`)."""
    reply = reply.model_copy(update={"desired": fresh.desired, "check_paths": fresh.check_paths})
    acked = set(reply.ack)
    kept = hb.model_copy(update={"jobs": [j for j in hb.jobs if j.job_id not in acked]})
    expect_started(ctx, who, kept, generation, reply)
    return reply


def remember(ctx: ServerContext, known: list[Known]) -> None:
    """Keep nodes' desired jobs as `woken_reply` read them, once the transaction that read them has ended: what a
    rolled-back transaction wrote is never remembered (a node's desired version may be reached again)."""
    for node_id, version, held, desired in known:
        _remember(ctx, node_id, version, held, desired)


def _reply(ctx: ServerContext, desired: list[JobLaunch], acks: list[int], offsets: dict[int, int]) -> HeartbeatReply:
    st = ctx.settings
    return HeartbeatReply(
        desired=desired,
        ack=acks,
        log_offsets=offsets,
        grace_s=st.grace_s,
        allow_root=st.allow_root_jobs,
        interval_s=st.heartbeat_interval_s,
        lease_s=st.lease_s,
    )


def _record_node(ctx: ServerContext, s: Session, node: NodeRow, hb: Heartbeat, now: float) -> tuple[bool, bool]:
    """Store inventory (its accepted GPUs only) and liveness. Returns whether the scheduler should look again (node
    came up, hardware changed), and whether the node's `last_seen` is written with it: otherwise its time waits for
    the batched write (`nanum.server.lastseen`), as a quiet heartbeat's does, and this transaction leaves the node's
    row as it was (a heartbeat reporting ends changes its jobs, not its node)."""
    inventory = hb.node.model_dump(exclude={"name"})
    inventory["gpus"] = nodeinventory.record(s, node, inventory["gpus"], now)
    changed = node.inventory != inventory
    came_up = node.state == "down"
    if changed:
        node.inventory, node.hostname = inventory, hb.node.hostname
        ctx.caches.nodes.clear()
    if came_up:
        node.state = "draining" if node.drain_reason is not None else "up"  # a drain lasts until resumed
    written = changed or came_up or ctx.last_seen.behind()  # a node coming up is up with its time, on every server
    if written:
        node.last_seen = now
    return changed or came_up, written


#: Built once (building it costs about as much as running it).
_HELD = select(AllocationRow.job_id, AllocationRow.gpu_index).where(AllocationRow.node_id == bindparam("node"))


def _held(s: Session, node_id: int) -> dict[int, list[int]]:
    """GPUs held on the node by job; a job that needs no GPU there maps to an empty list."""
    held: dict[int, list[int]] = defaultdict(list)
    for job_id, gpu in s.connection().execute(_HELD, {"node": node_id}):
        gpus = held[job_id]
        if gpu is not None:
            gpus.append(gpu)
    return held


def _record_jobs(
    s: Session, node: NodeRow, hb: Heartbeat, held: dict[int, list[int]], stored: dict[int, Any], now: float
) -> tuple[list[int], set[str], bool, set[int] | None]:
    """Record the agent's reports. `stored`: what `_held_jobs` read of the jobs held here; only the jobs whose
    report may change them are loaded and locked (a node's other running jobs are most of its reports). Returns
    the acknowledged ends, the nodes to wake, whether GPUs of jobs never started were freed, and the jobs whose
    GPUs here were freed by their ends, where that is all that changed of the jobs held here (else None: they
    must be read again)."""
    # Report by report: an agent reports an earlier run's end beside the job's next run, until its log is sent.
    changing = [st for st in hb.jobs if not _report_unchanged(st, held, stored)]
    ids = sorted({st.job_id for st in changing})
    rows = {j.id: j for j in s.scalars(_REPORTED, {"ids": ids})} if ids else {}
    acks: list[int] = []
    woken: set[str] = set()
    ended: set[int] | None = set()
    exited: list[tuple[JobRow, JobStatus]] = []
    for st in changing:
        job = rows.get(st.job_id)
        if job is not None and st.state != "running" and st.run is not None and st.run != job.runs:
            # An earlier run's end, reported again while the agent uploads its log, after the job was requeued
            # and started anew on this node: it is not the end of the run the node now holds.
            acks.append(st.job_id)
            continue
        if job is not None and job.id in held:
            _note_checkpoint(job, st)
        if st.state == "running":
            ended = None
            if job is not None and job.id in held and job.state == "running":
                if st.address is not None and job.session_address != st.address:
                    job.session_address = st.address
            elif job is not None and lifecycle.recover(s, job, node, now):
                woken.add(node.name)
            continue
        if job is not None and job.id in held:
            exited.append((job, st))
            if ended is not None:
                ended.add(job.id)
        acks.append(st.job_id)
    woken |= lifecycle.parts_exited(s, node, exited, now)
    freed = _release_unheld(s, node, held, stored, {st.job_id for st in hb.jobs}, now)
    return acks, woken, freed, None if woken or freed else ended


def _note_checkpoint(job: JobRow, st: JobStatus) -> None:
    """Remember the newest checkpoint the agent saw (preemption then picks victims that lose the least work)."""
    if st.checkpoint_at is not None and (job.last_checkpoint is None or st.checkpoint_at > job.last_checkpoint):
        job.last_checkpoint = st.checkpoint_at


def _release_unheld(
    s: Session, node: NodeRow, held: dict[int, list[int]], stored: dict[int, Any], reported: set[int], now: float
) -> bool:
    """GPUs of jobs being stopped that this node's agent does not hold (it never started them: they were stopped
    before it heard of them) are free now. A heartbeat lists every job the agent holds, so these have no process.

    Only the jobs that `stored` (`_held_jobs`' read) shows stopped or told to stop are loaded and locked: a job the
    scheduler has just started here is also unheld until its agent hears of it, which in a busy node is most
    heartbeats. A stop committed since that read is seen by the next heartbeat, which the stop wakes."""
    unheld = [job_id for job_id in held
              if job_id not in reported and (stored[job_id].state != "running" or stored[job_id].stop is not None)]
    if not unheld:
        return False
    jobs = s.scalars(_STOPPED_UNHELD, {"ids": unheld}).all()
    for job in jobs:
        lifecycle.part_gone(s, job, node, now)
    return bool(jobs)


#: Built once (building a statement costs about as much as running it), as every heartbeat's statements.
#: Rows locked in id order, as the scheduler does: no deadlock.
_REPORTED = (select(JobRow).where(JobRow.id.in_(bindparam("ids", expanding=True))).order_by(JobRow.id)
             .with_for_update())
_STOPPED_UNHELD = (
    select(JobRow)
    .where(JobRow.id.in_(bindparam("ids", expanding=True)), or_(JobRow.state != "running", JobRow.stop.is_not(None)))
    .order_by(JobRow.id)
    .with_for_update()
)
#: By id alone: the jobs not running or told to stop are left out in Python (`desired_jobs`). With `state` in the
#: query, PostgreSQL planned from statistics taken while the jobs table was nearly empty (it grows faster than
#: autovacuum analyzes it) and read every running job through the state index: 3 ms per heartbeat at 1,000 nodes,
#: a third of the database's time, where the primary key reads the few held here.
_DESIRED = (
    select(JobRow, UserRow.name, UserRow.unix_user, LabRow.grace_s)
    .join(UserRow, UserRow.id == JobRow.user_id)
    .join(LabRow, LabRow.id == JobRow.lab_id)
    .where(JobRow.id.in_(bindparam("ids", expanding=True)))
    .order_by(JobRow.id)
)
_DESIRED_FRESH = _DESIRED.execution_options(populate_existing=True)


def desired_jobs(ctx: ServerContext, s: Session, node: NodeRow | NodeCaller,
                 held: dict[int, list[int]] | None = None, *, fresh: bool = False) -> list[JobLaunch]:
    """Every job that should be running on `node` now, with what its agent needs to launch it. `held`: the GPUs
    held there by job, when the caller has just read them. `fresh`: the jobs' objects the session holds are
    loaded again (statements, not the session, changed their rows)."""
    held = _held(s, node.id) if held is None else held
    if not held:
        return []
    rows = [row for row in s.execute(_DESIRED_FRESH if fresh else _DESIRED, {"ids": list(held)})
            if row[0].state == "running" and row[0].stop is None]
    hosts = _hosts(s, rows)
    default = ctx.settings.grace_s
    return [
        _launch(ctx, job, unix or user, node.name, sorted(held[job.id]), hosts, default if grace is None else grace)
        for job, user, unix, grace in rows
    ]


def _hosts(s: Session, rows: Any) -> dict[str, str]:
    """Hostnames of the first node of every multi-node job among `rows` (its rendezvous address)."""
    firsts = {row[0].allocation[0]["node"] for row in rows if row[0].nodes > 1 and row[0].allocation}
    if not firsts:
        return {}
    found = s.execute(select(NodeRow.name, NodeRow.hostname).where(NodeRow.name.in_(firsts)))
    return {name: host or name for name, host in found}


def _launch(
    ctx: ServerContext, job: JobRow, unix_user: str, node: str, gpus: list[int], hosts: dict[str, str], grace: float
) -> JobLaunch:
    """One node's part of `job`. `grace`: its lab's seconds between SIGTERM and SIGKILL when it is stopped."""
    launch = JobLaunch(
        job_id=job.id,
        name=job.name,
        command=job.command,
        workdir=job.workdir,
        env={**(job.env or {}), **_array_env(job)},
        gpus=gpus,
        unix_user=unix_user,
        time_limit_s=job.time_limit_s,
        cpus=job.cpus or 0,
        memory_mb=job.memory_mb or None,
        grace_s=grace,
        max_output_bytes=ctx.settings.max_output_bytes,
        run=job.runs or 0,
        kind=job.kind,
        secret=job.session_secret or "",
        checkpoint_dir=str(ctx.settings.checkpoints_dir / str(job.id)),
        environment=job.environment,
        environment_spec=EnvironmentSpec.model_validate(job.environment_spec) if job.environment_spec else None,
        datasets=job.datasets or {},
        nproc_per_node=max(job.gpus, 1),
    )
    if job.nodes > 1 and job.allocation:
        names = [a["node"] for a in job.allocation]
        first = names[0]
        launch.master_addr = hosts.get(first, first)
        launch.master_port = MASTER_PORT_BASE + job.id % 1000
        launch.nnodes = job.nodes
        launch.node_rank = names.index(node) if node in names else 0
    if job.torchrun:
        launch.command = torchrun_command(launch)
    return launch


def torchrun_command(launch: JobLaunch) -> list[str]:
    """The part's command under torchrun: the rendezvous of a multi-node job, or a standalone one on one node."""
    if launch.nnodes <= 1 or launch.master_addr is None:
        return ["torchrun", "--standalone", "--nnodes", "1", "--nproc-per-node", str(launch.nproc_per_node),
                *launch.command]
    return ["torchrun", "--nnodes", str(launch.nnodes), "--nproc-per-node", str(launch.nproc_per_node),
            "--node-rank", str(launch.node_rank), "--master-addr", launch.master_addr,
            "--master-port", str(launch.master_port), *launch.command]


def _array_env(job: JobRow) -> dict[str, str]:
    """An array task's NANUM_ARRAY_JOB_ID and NANUM_ARRAY_TASK_ID (Slurm's SLURM_ARRAY_* as well)."""
    if job.array_id is None:
        return {}
    ids = {"ARRAY_JOB_ID": str(job.array_id), "ARRAY_TASK_ID": str(job.array_task)}
    return {f"{prefix}_{k}": v for prefix in ("NANUM", "SLURM") for k, v in ids.items()}
