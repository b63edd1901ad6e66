"""Applying a cycle's starts: each job that is still pending gets exactly the decided GPUs, an event, and its nodes'
desired lists bumped so their held heartbeats are woken."""

from __future__ import annotations

import logging
from typing import Any

from sqlalchemy import bindparam, text
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from nanum.core import Start
from nanum.server import snapshot
from nanum.server.services import lifecycle
from nanum.store import AllocationRow, JobRow, table

__all__ = ["start_all"]

log = logging.getLogger("nanum.scheduler")

_START = (
    table(JobRow).update()
    .where(JobRow.__table__.c.id == bindparam("job_id"), JobRow.__table__.c.state == "pending")
    .values(
        state="running",
        start_time=bindparam("now"),
        charged_until=bindparam("now"),
        runs=JobRow.__table__.c.runs + 1,
        borrowing=bindparam("borrowing"),
        over_reservation=bindparam("over_reservation"),
        allocation=bindparam("allocation"),
        reason=None,
        reason_code=None,
        estimated_start=None,
        stop=None,
        end_time=None,
        exit_code=None,
        lost_from=None,
    )
)
_HOLD = table(AllocationRow).insert()
#: A tick's GPU holds on PostgreSQL, in one statement: each statement fires the trigger that stamps its jobs' rows
#: once (`nanum.store.revs`), and one per GPU rewrote a job's row once per GPU. Its text is the same whatever the
#: number of GPUs, so it is compiled once; a multi-row VALUES was compiled anew at every tick. SQLite's triggers
#: fire once per row whatever the statement: there the holds go as one `executemany` of `_HOLD`.
_HOLD_ALL = text(
    "INSERT INTO allocations (job_id, node_id, gpu_index) SELECT * FROM "
    "unnest(CAST(:jobs AS INTEGER[]), CAST(:nodes AS INTEGER[]), CAST(:gpus AS INTEGER[]))"
)


def start_all(s: Session, starts: list[Start], plan: snapshot.Plan, now: float) -> set[str]:
    """Start jobs known to be pending (their rows locked) on exactly the decided GPUs, with one statement each for
    the jobs, their GPUs, their events and their nodes. Returns the nodes to wake. Should one of the GPUs be held
    already, the UNIQUE allocation rows refuse the whole batch, and each job is tried alone (`_start`): only the
    job whose GPU is taken stays pending."""
    if not starts:
        return set()
    try:
        with s.begin_nested():
            conn = s.connection()  # taken inside the savepoint: statements on it are undone with it
            conn.execute(_START, [_start_params(st, now) for st in starts])
            holds = [h for st in starts for h in _holds(st, plan)]
            if conn.dialect.name == "postgresql":
                conn.execute(_HOLD_ALL, {"jobs": [h["job_id"] for h in holds], "nodes": [h["node_id"] for h in holds],
                                         "gpus": [h["gpu_index"] for h in holds]})
            else:
                conn.execute(_HOLD, holds)
    except IntegrityError:
        return set().union(*(_start(s, st, plan, now) for st in starts))
    return _started(s, starts, plan, now)


def _start(s: Session, start: Start, plan: snapshot.Plan, now: float) -> set[str]:
    """Start one job on exactly the decided GPUs, if it is still pending. Returns the nodes to wake."""
    try:
        with s.begin_nested():
            conn = s.connection()
            if conn.execute(_START, _start_params(start, now)).rowcount != 1:
                return set()
            conn.execute(_HOLD, _holds(start, plan))
    except IntegrityError:
        log.error("job %s: its GPUs are already held by another job; not starting it", start.job_id)
        return set()
    return _started(s, [start], plan, now)


def _start_params(start: Start, now: float) -> dict[str, Any]:
    allocation = [{"node": p.node, "gpus": list(p.gpus)} for p in start.placements]
    return {"job_id": start.job_id, "now": now, "borrowing": start.borrowing,
            "over_reservation": start.over_reservation, "allocation": allocation}


def _holds(start: Start, plan: snapshot.Plan) -> list[dict[str, Any]]:
    return [
        {"job_id": start.job_id, "node_id": plan.node_ids[p.node], "gpu_index": g}
        for p in start.placements
        for g in p.gpus or (None,)  # a part that needs no GPU holds its node with one NULL row
    ]


def _started(s: Session, starts: list[Start], plan: snapshot.Plan, now: float) -> set[str]:
    """The events of jobs just started, and their nodes bumped; the names of those nodes."""
    lifecycle.events(s, [(st.job_id, now, "started", f"on {_where(st)}") for st in starts])
    nodes = {p.node for st in starts for p in st.placements}
    lifecycle.bump(s, sorted(plan.node_ids[n] for n in nodes))
    return nodes


def _where(start: Start) -> str:
    where = "; ".join(f"{p.node} GPUs {','.join(map(str, p.gpus)) or 'none'}" for p in start.placements)
    if start.borrowing:
        where += " (borrowing)"
    if start.over_reservation:
        where += " (backfilled over a reservation: preempted when the reserved job can start)"
    return where
