"""Turning stored rows into `nanum.core` values (nodes, jobs, labs) and into API bodies."""

from __future__ import annotations

import operator
from collections.abc import Mapping
from copy import copy
from typing import Any

from nanum.core import Gpu, JobId, JobKind, Lab, Limits, Node, NodeState
from nanum.core import Job as CoreJob
from nanum.jobfields import Job, spec
from nanum.server.needs import job_labels, node_labels
from nanum.server.schemas import iso
from nanum.store import JobRow, NodeRow, table

#: The node columns `core_node` reads beside its inventory.
FLEET_COLUMNS = (NodeRow.owner, NodeRow.labels, NodeRow.gpu_model, NodeRow.gpu_health)


def core_node(
    name: str, inventory: Mapping[str, Any], state: NodeState, held: frozenset[int] = frozenset(), fleet: Any = None
) -> Node:
    """A node as the core sees it. `held`: GPUs taken by processes that are not running jobs (busy). `fleet`: a
    row with the node's `FLEET_COLUMNS` (the owner lab, labels and GPU model an admin set, and the GPUs out of
    service for a health problem, which are busy), or None."""
    model = getattr(fleet, "gpu_model", None)
    gpus = tuple(
        Gpu(int(g["index"]), model or str(g.get("model", "")), int(g.get("memory_mb", 0)), int(g.get("island", 0)))
        for g in inventory.get("gpus", ())
    )
    sick = frozenset(int(i) for i in getattr(fleet, "gpu_health", None) or ())
    busy = frozenset(int(i) for i in inventory.get("busy_gpus", ())) | held | sick
    labels = frozenset(f"{k}={v}" for k, v in (getattr(fleet, "labels", None) or {}).items())
    return Node(
        name=name,
        gpus=gpus,
        cpus=int(inventory.get("cpus", 0)),
        memory_mb=int(inventory.get("memory_mb", 0)),
        state=state,
        busy_gpus=busy,
        labels=node_labels(inventory) | labels,
        owner=getattr(fleet, "owner", None),
    )


def core_lab(row: Any, used_gpu_hours: float = 0.0, decayed_usage: float = 0.0) -> Lab:
    """`row` is a LabRow or any row with the same column names."""
    limits = Limits(
        max_gpus=row.max_gpus, max_running_jobs=row.max_running_jobs, monthly_gpu_hours=row.monthly_gpu_hours
    )
    return Lab(
        name=row.name,
        guaranteed_gpus=row.guaranteed_gpus,
        limits=limits,
        weight=row.weight,
        used_gpu_hours=used_gpu_hours,
        decayed_usage=decayed_usage,
    )


def core_job(row: Any, user: str, lab: str) -> CoreJob:
    """`row` is a JobRow or any row with the same column names."""
    return CoreJob(
        id=JobId(row.id),
        user=user,
        lab=lab,
        gpus=row.gpus,
        nodes=row.nodes,
        gpu_model=row.gpu_model if row.gpu_model is None or "," not in row.gpu_model else None,
        gpu_models=frozenset(row.gpu_model.split(",")) if row.gpu_model and "," in row.gpu_model else frozenset(),
        gpu_memory_mb=getattr(row, "gpu_memory_mb", None) or 0,
        cpus=row.cpus or 0,
        memory_mb=row.memory_mb or 0,
        time_limit=row.time_limit_s,
        priority=row.priority,
        tier=row.tier or 0,
        kind=JobKind(row.kind),
        submit_time=row.submit_time,
        preemptible=row.preemptible,
        name=row.name,
        attained_gpu_seconds=row.attained_gpu_seconds,
        burst=None if row.burst is None else JobId(row.burst),
        array=_array(row),
        **_needs(row),
    )


def _array(row: Any) -> tuple[JobId, int] | None:
    """(array id, task index) of an array's task (rows without those columns: None)."""
    array_id, task = getattr(row, "array_id", None), getattr(row, "array_task", None)
    return None if array_id is None or task is None else (JobId(array_id), task)


def _needs(row: Any) -> dict[str, Any]:
    """The node labels the job's constraints, environment and datasets need (rows without those columns need
    none)."""
    constraints = frozenset(getattr(row, "constraints", None) or ())
    spec, datasets = getattr(row, "environment_spec", None), getattr(row, "datasets", None)
    if not spec and not datasets:
        return {"labels": constraints} if constraints else {}
    labels, reasons = job_labels(getattr(row, "environment", None), spec, datasets)
    return {"labels": labels | constraints, "label_reasons": reasons}


# -- a job's API body -------------------------------------------------------------------------------------------


def _if_none(key: str) -> Any:
    """What field `key` shows for a row holding None there (a row older than its column): the default `Job`
    declares for it, or None."""
    default = spec(Job, key).default
    return None if default is ... else default


#: Every key a job's body has, in the order `Job` declares them; the `NotRequired` ones are added where they apply.
_SHOWN = tuple(k for k in Job.__annotations__ if k in Job.__required_keys__)
#: The keys `job_out` computes from the row's other columns (or is given: the user's and the lab's names).
_COMPUTED = frozenset({"user", "lab", "estimated_start", "over_reservation", "allocation", "submit_time",
                       "start_time", "end_time", "env", "lost_gpu_hours", "last_checkpoint", "hint"})
#: The keys shown as stored, in the JobRow column of the same name.
_AS_STORED = tuple(k for k in _SHOWN if k in table(JobRow).columns and k not in _COMPUTED)
_read_stored = operator.attrgetter(*_AS_STORED)
#: (key, what it shows instead of None, whether that is a list or dict to copy for each body)
_DEFAULTS = tuple((k, d, isinstance(d, list | dict)) for k in _AS_STORED if (d := _if_none(k)) is not None)
#: The keys filled in later, where they apply (budget warnings, predictions): their default until then.
_LATER = {k: _if_none(k) for k in _SHOWN if k not in _COMPUTED and k not in _AS_STORED}


def job_out(row: Any, user: str, lab: str) -> dict[str, Any]:
    """The API body of a job (`nanum.jobfields.Job`): every column of a name `Job` declares, as stored, and the
    fields computed from the others. `row` is a JobRow or a row with the same columns; being read from the store
    it is trusted, so the body is a plain dict, rendered without validating it again."""
    out = dict.fromkeys(_SHOWN)
    out.update(zip(_AS_STORED, _read_stored(row), strict=True))
    for key, default, fresh in _DEFAULTS:
        if out[key] is None:
            out[key] = copy(default) if fresh else default
    out.update(_LATER)
    pending = row.state == "pending"
    out.update(
        user=user,
        lab=lab,
        estimated_start=iso(row.estimated_start) if pending else None,
        over_reservation=bool(row.over_reservation) and row.state == "running",
        allocation=[] if pending else [{"node": a["node"], "gpus": a["gpus"]} for a in row.allocation or ()],
        submit_time=iso(row.submit_time),
        start_time=iso(row.start_time),
        end_time=iso(row.end_time),
        env=row.env or {},
        lost_gpu_hours=round((row.lost_gpu_seconds or 0.0) / 3600.0, 6),
        last_checkpoint=iso(row.last_checkpoint),
        hint=hint(row.reason_code, row.reason, lab) if pending else None,
    )
    return out


def hint(code: str | None, reason: str | None, lab: str) -> str | None:
    """What would help a waiting job start, for the reasons where something can be done."""
    reason = reason or ""
    if code == "budget":
        who = reason.split(" ", 2)[:2] if reason.startswith(("lab ", "user ")) else ["lab", lab]
        return f"an admin can raise the budget: nanum {who[0]} set {who[1]} --monthly-gpu-hours H"
    if code == "lab_limit" and "never borrows" in reason:
        return "submitted with --no-preempt; without it the job may run now on idle GPUs of other labs"
    if code == "lab_limit":
        return f"it starts when other jobs of lab {lab} end; an admin can raise the limit with nanum lab set {lab}"
    if code == "user_limit":
        return "it starts when the user's other jobs end; an admin can raise the limit with nanum user set"
    if code == "node_down":
        return "every node that could run it is down or draining; `nanum nodes` shows them"
    if code == "reclaiming":
        return "borrowed GPUs are being taken back; it starts once their jobs have stopped"
    return None
