"""Job lifecycle: the transitions the scheduler, the agent endpoint and cancel all make, kept in one place.

A running job ends in two steps. First something decides it must stop (`request_stop`: cancel, preemption, a
failed or timed-out part of a gang, its node went silent): `stop` records why, and the job leaves its nodes'
desired lists so their agents stop it. Then, as each node reports its process gone (`parts_exited`), that node's
allocation rows are deleted; when none are left, `finalize` gives the job its final state, or requeues it
(preempted, lost) with its original submit time. Its GPUs are therefore never handed out while a process may
still be using them.
"""

from __future__ import annotations

import calendar
import time
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import bindparam, delete, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from nanum.protocol import JobStatus
from nanum.server.services import eligibility
from nanum.store import AllocationRow, EventRow, JobRow, NodeRow, SegmentRow, table

INSERT_EVENT = table(EventRow).insert()
INSERT_SEGMENT = table(SegmentRow).insert()
_NODES, _ALLOCS = table(NodeRow), table(AllocationRow)
_BUMP = (
    _NODES.update()
    .where(_NODES.c.id.in_(bindparam("ids", expanding=True)))
    .values(desired_version=_NODES.c.desired_version + 1)
)
_HOLDS_ANY = select(_ALLOCS.c.id).where(_ALLOCS.c.job_id == bindparam("job_id")).limit(1)
_FREE_ON_NODE = _ALLOCS.delete().where(
    _ALLOCS.c.job_id.in_(bindparam("jobs", expanding=True)), _ALLOCS.c.node_id == bindparam("node_id")
)
FINISHED = frozenset({"completed", "failed", "cancelled", "timeout"})
#: What a stopped job becomes once all its processes are gone, by `stop`.
OUTCOME = {
    None: "completed",
    "fail": "failed",
    "timeout": "timeout",
    "cancel": "cancelled",
    "preempt": "pending",
    "lost": "pending",
    "requeue": "pending",
}
#: The outcome a run segment records, by `stop`, where it differs from the job's outcome.
SEGMENT_OUTCOME = {"preempt": "preempted", "lost": "lost", "requeue": "requeued"}
#: Stop reasons after which a job is requeued.
REQUEUED = frozenset(k for k, v in OUTCOME.items() if v == "pending")
#: A stop reason may be replaced by a stronger one (a user's cancel beats a preemption).
STRENGTH = {"preempt": 1, "lost": 1, "requeue": 1, "fail": 2, "timeout": 2, "cancel": 3}


def event(s: Session, job_id: int, now: float, kind: str, message: str = "") -> None:
    events(s, [(job_id, now, kind, message)])


def events(s: Session, rows: list[tuple[int, float, str, str]]) -> None:
    """Record events, each (job id, time, kind, message), in one statement."""
    if rows:
        s.connection().execute(INSERT_EVENT, [
            {"job_id": job_id, "time": now, "kind": kind, "message": message} for job_id, now, kind, message in rows])


def held_nodes(s: Session, job_id: int) -> list[tuple[int, str]]:
    """(node id, node name) of every node where the job still holds GPUs (or, needing none, runs)."""
    rows = s.execute(
        select(NodeRow.id, NodeRow.name)
        .join(AllocationRow, AllocationRow.node_id == NodeRow.id)
        .where(AllocationRow.job_id == job_id)
        .distinct()
    )
    return [(r.id, r.name) for r in rows]


#: `Session.info` key: the nodes whose desired version the session's transaction bumped (`bump`, `desired_version`).
BUMPED = "nanum_bumped_nodes"


def bump(s: Session, node_ids: list[int]) -> None:
    """Record that these nodes' desired lists changed (a server holding their long poll looks at this)."""
    if node_ids:
        s.connection().execute(_BUMP, {"ids": node_ids})
        s.info.setdefault(BUMPED, set()).update(node_ids)


_DESIRED_VERSION = select(_NODES.c.desired_version).where(_NODES.c.id == bindparam("node"))


def stored_desired_version(s: Session, node_id: int) -> int:
    """The node's desired version as the store holds it now (read past the session's objects)."""
    return s.connection().execute(_DESIRED_VERSION, {"node": node_id}).scalar() or 0


def desired_version(s: Session, node: NodeRow) -> int:
    """`node`'s desired version as this transaction leaves it. `node` was loaded locked (FOR NO KEY UPDATE, or under
    SQLite's one writer), so no other transaction bumps it meanwhile: its loaded version holds unless this one
    bumped it, which is then read again."""
    if node.id in s.info.get(BUMPED, ()):
        return stored_desired_version(s, node.id)
    return node.desired_version or 0


def request_stop(s: Session, job: JobRow, why: str, now: float, message: str) -> set[str]:
    """Take running `job` off its nodes' desired lists. Returns the names of the nodes to wake."""
    if job.state != "running" or STRENGTH[why] <= STRENGTH.get(job.stop or "", 0):
        return set()
    job.stop = why
    kinds = {"cancel": "cancel-requested", "preempt": "preempting", "requeue": "requeue-requested"}
    event(s, job.id, now, kinds.get(why, why), message)
    nodes = held_nodes(s, job.id)
    bump(s, [i for i, _ in nodes])
    return {name for _, name in nodes}


def parts_exited(s: Session, node: NodeRow, parts: list[tuple[JobRow, JobStatus]], now: float) -> set[str]:
    """The processes of these jobs on `node` are gone: free their GPUs there, stop the rest of a failed gang,
    finalize the jobs that hold nothing more. Returns the nodes to wake. Each step is one statement for all the
    jobs (a node that reports several ends at once costs a few statements, not a few per job)."""
    if not parts:
        return set()
    s.connection().execute(_FREE_ON_NODE, {"jobs": sorted({job.id for job, _ in parts}), "node_id": node.id})
    ending = Ending()
    woken: set[str] = set()
    for job, status in parts:
        woken |= _part_exited(s, job, status, now, ending)
    ending.write(s, now)
    return woken


def _part_exited(s: Session, job: JobRow, status: JobStatus, now: float, ending: Ending) -> set[str]:
    if job.state != "running":
        return set()
    woken: set[str] = set()
    why, message, code = _part_outcome(status)
    if why == "lost" and not job.requeue:
        why, message = "fail", f"{message} (submitted with --no-requeue: not run again)"
    rest = _holds_elsewhere(s, job)
    if job.stop in REQUEUED and why is None and status.stopped is False and not rest:
        job.stop = None  # it ran to a successful end before its agent could stop it: it completed, not requeued
    if job.stop is None:
        job.exit_code, job.reason = code, message
        if why is not None and rest:
            woken = request_stop(s, job, why, now, message or why)  # stop the gang's other parts
        job.stop = why
    elif job.exit_code is None:
        job.exit_code = code  # stopped on purpose: the stop reason stands
    if not rest:
        finalize(s, job, now, ending)
    return woken


def part_gone(s: Session, job: JobRow, node: NodeRow, now: float) -> None:
    """`node` holds no process of `job` (it never started one): free the GPUs there; finalize if none are left."""
    s.connection().execute(_FREE_ON_NODE, {"jobs": [job.id], "node_id": node.id})
    if job.state == "running" and not _holds_elsewhere(s, job):
        finalize(s, job, now)


def _holds_elsewhere(s: Session, job: JobRow) -> bool:
    """Whether `job` still holds GPUs (or, needing none, runs) on another node, once one node's part is freed. A
    single-node job's run holds only the one node, so that needs no read."""
    return job.nodes > 1 and s.connection().execute(_HOLDS_ANY, {"job_id": job.id}).first() is not None


def _part_outcome(st: JobStatus) -> tuple[str | None, str | None, int | None]:
    """(stop reason or None for success, message, exit code) of one node's process."""
    code = st.exit_code if st.exit_code is not None else (128 + st.signal if st.signal else None)
    if st.state == "failed_to_start" and st.node_fault:  # its node's fault: run elsewhere, as when a node is lost
        return "lost", f"its node could not start it: {st.reason or 'a system error'}", code
    if st.state == "failed_to_start":
        return "fail", st.reason or "the job failed to start", code
    if st.fenced:  # its agent lost the server for longer than the lease: requeued, as when its node goes silent
        return "lost", st.reason or "stopped on its node, which lost contact with the server", code
    if st.timed_out:
        return "timeout", st.reason or "stopped at its time limit", code
    if st.stopped and st.reason:  # stopped by its agent, not by anyone's request (its output): however it exited
        return "fail", st.reason, code
    if st.signal:
        return "fail", st.reason or f"killed by signal {st.signal}", code
    if code:
        return "fail", st.reason or f"exited with code {code}", code
    if code is None:  # its agent could not learn how it ended (it was down, its exit file could not be written)
        return "fail", st.reason or "it ended, and its node could not tell how", None
    return None, None, code


@dataclass(slots=True)
class Ending:
    """The rows that jobs ending in one transaction add, kept to be written together (`write`): one statement for
    their run segments, one for their events, one read for the jobs that wait on them."""

    segments: list[dict[str, Any]] = field(default_factory=list)
    events: list[tuple[int, float, str, str]] = field(default_factory=list)
    #: the jobs that reached a final state: their dependents are settled
    finished: list[JobRow] = field(default_factory=list)

    def write(self, s: Session, now: float) -> None:
        if self.segments:
            s.connection().execute(INSERT_SEGMENT, self.segments)
        events(s, self.events)
        eligibility.settle(s, self.finished, now, cancel_waiting)
        self.segments, self.events, self.finished = [], [], []


def finalize(s: Session, job: JobRow, now: float, ending: Ending | None = None) -> None:
    """Every process of `job` is gone: charge its run and give it its final state (or requeue it). With `ending`,
    the rows this adds are left to it to write (`Ending.write`); without, they are written now.

    A preempted job is requeued with its original submit time (its place in the queue) and the work it did since
    its last checkpoint is counted as lost."""
    if ending is None:
        ending = Ending()
        finalize(s, job, now, ending)
        ending.write(s, now)
        return
    outcome = OUTCOME[job.stop]
    lost = lost_work(job, now) if job.stop == "preempt" else 0.0
    row = segment(job, now, outcome=SEGMENT_OUTCOME.get(job.stop or "", outcome), lost=lost)
    if row is not None:
        ending.segments.append(row)
    if job.stop not in ("preempt", "lost"):
        job.exits = [*(job.exits or []), job.exit_code]
    if outcome == "failed" and (job.retries or 0) > 0:
        _retry(job, now, ending)
    elif outcome == "pending":
        what = (job.reason or "lost its node") if job.stop == "lost" else job.reason or "requeued"
        if job.stop == "preempt":
            job.preemptions = (job.preemptions or 0) + 1
            job.lost_gpu_seconds = (job.lost_gpu_seconds or 0.0) + lost
            what = f"preempted, {lost / 3600:.2f} GPU-hours since its last checkpoint lost"
        job.state, job.reason, job.reason_code = "pending", f"requeued ({what}); waiting to run again", "queued"
        job.estimated_start = job.exit_code = None
        job.queued_at = now
        ending.events.append((job.id, now, "requeued", job.reason))
    else:
        job.state, job.end_time = outcome, now
        if outcome == "completed":
            job.reason, job.reason_code = None, None
        ending.events.append((job.id, now, outcome, job.reason or ""))
        ending.finished.append(job)
    job.stop = None
    job.session_address = None  # a notebook started again listens elsewhere


def _retry(job: JobRow, now: float, ending: Ending) -> None:
    """A failed run of a job submitted with `--retries N`: queue it again, one retry fewer."""
    job.retries -= 1
    left = f"{job.retries} more {'retry' if job.retries == 1 else 'retries'}"
    why = job.reason or f"exited with code {job.exit_code}"
    job.state, job.reason_code = "pending", "queued"
    job.reason = f"requeued after run {len(job.exits or [])} failed ({why}); {left} if it fails again"
    job.estimated_start = job.exit_code = None
    job.queued_at = now
    ending.events.append((job.id, now, "retried", job.reason))


def cancel_waiting(s: Session, job: JobRow, message: str, now: float) -> None:
    """Cancel a job that is not running (pending or held), and settle the jobs that wait on it in turn."""
    job.state, job.end_time, job.reason, job.reason_code = "cancelled", now, message, None
    job.estimated_start = None
    event(s, job.id, now, "cancelled", message)
    eligibility.settle(s, [job], now, cancel_waiting)


def lost_work(job: JobRow, now: float) -> float:
    """GPU-seconds of the current run since its last checkpoint (or its start, if it saved none since)."""
    start = job.start_time
    if start is None:
        return 0.0
    saved = max(start, job.last_checkpoint or start)
    return job.gpus * job.nodes * max(now - saved, 0.0)


def recover(s: Session, job: JobRow, node: NodeRow, now: float) -> bool:
    """`node` came back still running `job`, which was requeued when the node went silent: keep it running there."""
    placement = job.lost_from or []
    if job.state != "pending" or len(placement) != 1 or placement[0].get("node") != node.name:
        return False
    try:
        with s.begin_nested():
            s.execute(
                table(AllocationRow).insert(),
                [{"job_id": job.id, "node_id": node.id, "gpu_index": g} for g in placement[0]["gpus"] or [None]],
            )
    except IntegrityError:
        return False  # its GPUs went to another job; the agent will stop this one
    job.state, job.allocation, job.lost_from = "running", placement, None
    job.reason = job.reason_code = job.estimated_start = None
    bump(s, [node.id])
    event(s, job.id, now, "recovered", f"node {node.name} is back and still runs it")
    return True


def node_lost(s: Session, node: NodeRow, now: float) -> set[str]:
    """`node` stopped answering: its jobs are requeued (and stopped on their other nodes). Returns nodes to wake."""
    job_ids = s.scalars(select(AllocationRow.job_id).where(AllocationRow.node_id == node.id).distinct()).all()
    # The jobs are locked in id order before their GPUs are freed, as everywhere: freeing them stamps their rows.
    jobs = s.scalars(select(JobRow).where(JobRow.id.in_(job_ids)).order_by(JobRow.id).with_for_update()).all()
    s.execute(delete(AllocationRow).where(AllocationRow.node_id == node.id))
    woken: set[str] = set()
    ending = Ending()
    for job in jobs:
        if job.state != "running":
            continue
        was = job.stop
        if not job.requeue:
            why = f"node {node.name} stopped answering (submitted with --no-requeue: not run again)"
            if STRENGTH["fail"] > STRENGTH.get(job.stop or "", 0):
                job.reason = why
            woken |= request_stop(s, job, "fail", now, why)
        else:
            why = f"node {node.name} stopped answering"
            if job.stop is None and job.nodes == 1:
                job.lost_from = job.allocation
            woken |= request_stop(s, job, "lost", now, why)
        if job.stop == was:
            # It was already being stopped (preempted, cancelled, requeued): that reason decides its outcome, but
            # its history still says that its node went silent, so whatever it did after is not known.
            event(s, job.id, now, "lost", why)
        if not _holds_elsewhere(s, job):
            finalize(s, job, now, ending)
    ending.write(s, now)
    return woken


# -- accounting ------------------------------------------------------------------------------------------------


def charge(s: Session, job: JobRow, now: float, *, outcome: str, lost: float = 0.0) -> None:
    """Add the GPU-seconds of the current run since it was last charged to the job, and record them as one
    segment (`outcome` says what ended it; `lost` the GPU-seconds a preemption threw away). Its lab and user are
    charged from the segment at the scheduler's next tick (`nanum.server.services.charging`)."""
    row = segment(job, now, outcome=outcome, lost=lost)
    if row is not None:
        s.connection().execute(INSERT_SEGMENT, row)


def segment(job: JobRow, now: float, *, outcome: str, lost: float = 0.0) -> dict[str, Any] | None:
    """`charge` without the write: the segment's row (None where the run has no GPU-seconds left to charge)."""
    since = job.charged_until or job.start_time
    if since is None or now <= since:
        return None
    gpus = job.gpus * job.nodes
    gpu_seconds = gpus * (now - since)
    job.attained_gpu_seconds = (job.attained_gpu_seconds or 0.0) + gpu_seconds
    job.charged_until = now
    fresh = job.start_time is not None and since == job.start_time
    wait = job.start_time - (job.queued_at or job.submit_time) if fresh and job.start_time is not None else None
    return {
        "job_id": job.id,
        "user_id": job.user_id,
        "lab_id": job.lab_id,
        "gpus": gpus,
        "start": since,
        "end": now,
        "wait_s": wait,
        "outcome": outcome,
        "lost_gpu_seconds": lost,
    }


def month_of(t: float) -> str:
    return time.strftime("%Y-%m", time.gmtime(t))


def month_start(t: float) -> float:
    g = time.gmtime(t)
    return float(calendar.timegm((g.tm_year, g.tm_mon, 1, 0, 0, 0)))


def month_end(t: float) -> float:
    """The start of the month after the one `t` falls in."""
    g = time.gmtime(t)
    year, month = (g.tm_year + 1, 1) if g.tm_mon == 12 else (g.tm_year, g.tm_mon + 1)
    return float(calendar.timegm((year, month, 1, 0, 0, 0)))


def by_month(gpus: int, since: float, now: float) -> list[tuple[str, float]]:
    """GPU-seconds of `gpus` GPUs held from `since` to `now`, split at month boundaries (UTC)."""
    out = []
    while since < now:
        cut = min(month_end(since), now)
        out.append((month_of(since), gpus * (cut - since)))
        since = cut
    return out
