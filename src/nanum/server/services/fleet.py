"""A fleet of nodes as admins run it: owners, labels and GPU model names; drain, resume and remove; GPUs taken out
of service for the health problems their agents report.

A drained node (`state` draining, `drain_reason` set) takes no new job; the jobs it runs finish. Its drain
outlives the node going silent and coming back, and ends only when an admin resumes it. A GPU whose agent reports
a health problem (an Xid error, uncorrectable ECC errors, retired pages waiting) leaves service at once with the
evidence in `gpu_health`; the job on it runs on, and nothing new starts there. Resuming the node returns its GPUs
too. Every change is audited.
"""

from __future__ import annotations

import logging
from typing import Any

from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from nanum.protocol import GpuProblem, JobStatus
from nanum.server.context import ServerContext
from nanum.server.errors import BadRequest, Conflict, NotFound
from nanum.server.schemas import NodeSet
from nanum.store import AllocationRow, AuditRow, LabRow, NodeRow

log = logging.getLogger("nanum.server")


def set_node(ctx: ServerContext, name: str, body: NodeSet, actor: str) -> None:
    """Set the node's owner lab, labels or GPU model name (only what `body` carries)."""
    with ctx.db.write() as s:
        node = _node(s, name)
        before = {"owner": node.owner, "labels": dict(node.labels or {}), "gpu_model": node.gpu_model}
        if body.owner is not None:
            node.owner = _lab(s, body.owner) if body.owner else None
        if body.labels:
            node.labels = _labelled(node.labels or {}, body.labels) or None
        if body.gpu_model is not None:
            node.gpu_model = body.gpu_model or None
        after = {"owner": node.owner, "labels": dict(node.labels or {}), "gpu_model": node.gpu_model}
        changes = {k: [before[k], after[k]] for k in before if before[k] != after[k]}
        if changes:
            _audit(s, ctx.clock(), actor, name, "set", changes, f"{actor} set node {name}: {_words(after)}")
    _changed(ctx, name)


def drain(ctx: ServerContext, name: str, reason: str | None, actor: str) -> None:
    """Keep new jobs off the node; its running jobs finish."""
    why = reason or f"drained by {actor}"
    with ctx.db.write() as s:
        node = _node(s, name)
        node.drain_reason, node.state = why, "draining"
        _audit(s, ctx.clock(), actor, name, "drain", {"drain_reason": [None, why]},
               f"{actor} drained node {name}: {why}")
    _changed(ctx, name)


def resume(ctx: ServerContext, name: str, actor: str, reason: str | None = None) -> None:
    """End the node's drain and return its GPUs that a health problem took out of service; `reason` goes into its
    history."""
    with ctx.db.write() as s:
        node = _node(s, name)
        if node.drain_reason is None and not node.gpu_health and node.state != "draining":
            raise Conflict(f"node {name} is not drained and all its GPUs are in service; there is nothing to resume")
        changes = {"drain_reason": [node.drain_reason, None], "gpu_health": [node.gpu_health, None]}
        node.drain_reason, node.gpu_health = None, None
        if node.state == "draining":
            node.state = "up"  # the scheduler marks it down again if it is silent
        _audit(s, ctx.clock(), actor, name, "resume", changes, f"{actor} resumed node {name}" + _because(reason))
    _changed(ctx, name)


def remove(ctx: ServerContext, name: str, actor: str, reason: str | None = None) -> None:
    """Forget the node (its agent's token stops working). Refused while jobs hold GPUs there. The history under its
    name keeps `reason`."""
    with ctx.db.write() as s:
        node = _node(s, name)
        held = s.scalars(select(AllocationRow.job_id).where(AllocationRow.node_id == node.id).distinct()).all()
        if held:
            ids = ", ".join(str(i) for i in sorted(held))
            raise Conflict(f"node {name} still runs job(s) {ids}; drain it (nanum node drain {name}) and remove it "
                           "once they have ended, or cancel them")
        s.execute(delete(NodeRow).where(NodeRow.id == node.id))
        _audit(s, ctx.clock(), actor, name, "remove", {}, f"{actor} removed node {name}" + _because(reason))
    ctx.caches.node_tokens.clear()  # its agent's token
    ctx.caches.quiet.pop(node.id, None)
    ctx.last_seen.forget(node.id)
    _changed(ctx, name)


def record_health(s: Session, node: NodeRow, problems: list[GpuProblem], now: float) -> bool:
    """Take the GPUs with a newly reported problem out of service, with the evidence. True when any was."""
    health: dict[str, dict[str, Any]] = dict(node.gpu_health or {})
    known = {int(g["index"]) for g in (node.inventory or {}).get("gpus", ())}
    new = [p for p in problems if str(p.index) not in health and p.index in known]
    if not new:
        return False
    for p in new:
        health[str(p.index)] = {"problem": p.problem, "since": now}
        log.warning("node %s: GPU %d out of service: %s", node.name, p.index, p.problem)
        message = f"GPU {p.index} of node {node.name} taken out of service: {p.problem}"
        _audit(s, now, "nanum", node.name, "health", {"gpu": [None, p.index]}, message)
    node.gpu_health = health
    return True


def drain_for_fault(s: Session, node: NodeRow, reports: list[JobStatus], now: float) -> bool:
    """Drain `node` where one of its agent's `reports` says a job could not start there for the node's own fault
    (its disk full, its processes exhausted): every job sent there would fail the same way, one after another, as
    the queue drained into it. True when it was drained now; an admin resumes it (`nanum node resume`)."""
    fault = next((st for st in reports if st.node_fault and st.state == "failed_to_start"), None)
    if fault is None or node.drain_reason is not None:
        return False
    why = f"job {fault.job_id} could not start here: {fault.reason or 'a system error'}"
    node.drain_reason, node.state = why, "draining"
    log.warning("node %s drained: %s", node.name, why)
    _audit(s, now, "nanum", node.name, "drain", {"drain_reason": [None, why]}, f"nanum drained node {node.name}: {why}")
    return True


def _changed(ctx: ServerContext, name: str) -> None:
    """The node's row changed: the scheduler looks again, and the node's next heartbeat is checked against the store
    (a GPU back in service that the agent still reports a problem on is taken out again)."""
    ctx.caches.nodes.clear()
    ctx.signals.wake([name])
    ctx.signals.poke()


def _node(s: Session, name: str) -> NodeRow:
    node = s.scalars(select(NodeRow).where(NodeRow.name == name).with_for_update()).first()
    if node is None:
        raise NotFound(f"no node named {name}; `nanum nodes` lists them")
    return node


def _lab(s: Session, name: str) -> str:
    if s.scalar(select(LabRow.id).where(LabRow.name == name)) is None:
        raise NotFound(f"no lab named {name}; `nanum lab list` lists them")
    return name


def _labelled(labels: dict[str, str], changes: list[str]) -> dict[str, str]:
    out = dict(labels)
    for change in changes:
        key, _, value = change.partition("=")
        if key.startswith("nanum:"):
            raise BadRequest(f"label {key} is reserved for what agents report; choose a key not starting nanum:")
        if value:
            out[key] = value
        else:
            out.pop(key, None)
    return out


def _words(fields: dict[str, Any]) -> str:
    labels = ",".join(f"{k}={v}" for k, v in sorted((fields["labels"] or {}).items()))
    return f"owner {fields['owner'] or '-'}, labels {labels or '-'}, GPU model {fields['gpu_model'] or 'as reported'}"


def _because(reason: str | None) -> str:
    return f": {reason}" if reason else ""


def _audit(s: Session, now: float, actor: str, name: str, action: str, changes: dict[str, Any],
           message: str) -> None:
    s.add(AuditRow(time=now, actor=actor, kind="node", name=name, action=action, changes=changes,
                   message=message))
