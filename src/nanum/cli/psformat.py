"""`nanum ps` as squeue prints it: arrays folded into one line, chosen fields (`--format "%i %u %T %r"` or
`--fields id,user,state,reason`), short state codes, no header on request.

Pure functions from API objects to rows, tested without a server. Field codes follow squeue's where it has one:

    %i id   %F array   %K task   %j name   %u user   %P lab   %T state   %t st (PD, R, CD, F, CA, TO, H, LS)
    %b gpus %D nodes   %N node   %M time   %l limit  %Q priority        %r reason
    %q tier (an admin's, 0..9: squeue's code for the QOS, the nearest thing Slurm has)
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

from nanum.cli.base import UsageProblem
from nanum.cli.views import duration, gpus_text, job_time, where, why
from nanum.jobref import job_ref

SHORT_STATES = {"pending": "PD", "running": "R", "completed": "CD", "failed": "F", "cancelled": "CA",
                "timeout": "TO", "held": "H", "lost": "LS"}
#: The order states are counted in on a folded array's line.
STATE_ORDER = ("running", "pending", "held", "completed", "failed", "cancelled", "timeout", "lost")

Getter = Callable[[dict[str, Any], datetime], str]


def _id(job: dict[str, Any], now: datetime) -> str:
    return job.get("_folded") or job_ref(job)


def _opt(key: str) -> Getter:
    return lambda job, now: "" if job.get(key) is None else str(job[key])


def _state(job: dict[str, Any], now: datetime) -> str:
    return str(job.get("_states") or job["state"])


def _short(job: dict[str, Any], now: datetime) -> str:
    if job.get("_counts"):
        return " ".join(f"{SHORT_STATES.get(s, s)}:{n}" for s, n in job["_counts"])
    return str(SHORT_STATES.get(job["state"], job["state"]))


def _limit(job: dict[str, Any], now: datetime) -> str:
    return duration(job["time_limit_s"]) if job.get("time_limit_s") else "-"


# name -> (squeue code, header, getter)
FIELDS: dict[str, tuple[str, str, Getter]] = {
    "id": ("i", "ID", _id),
    "array": ("F", "ARRAY", _opt("array_id")),
    "task": ("K", "TASK", _opt("array_task")),
    "name": ("j", "NAME", _opt("name")),
    "user": ("u", "USER", _opt("user")),
    "lab": ("P", "LAB", _opt("lab")),
    "state": ("T", "STATE", _state),
    "st": ("t", "ST", _short),
    "gpus": ("b", "GPUS", lambda job, now: gpus_text(job)),
    "nodes": ("D", "NODES", _opt("nodes")),
    "node": ("N", "NODE", lambda job, now: where(job)),
    "time": ("M", "TIME", job_time),
    "limit": ("l", "LIMIT", _limit),
    "priority": ("Q", "PRIORITY", _opt("priority")),
    "tier": ("q", "TIER", _opt("tier")),
    "reason": ("r", "REASON", why),
}
BY_CODE = {code: name for name, (code, _, _) in FIELDS.items()}


def fields_from_format(text: str) -> list[str]:
    """'%i %u %T %r' (also '%.10i', widths are ignored) -> ['id', 'user', 'state', 'reason']."""
    codes = re.findall(r"%[.\-]?\d*([A-Za-z])", text)
    unknown = [c for c in codes if c not in BY_CODE]
    if not codes or unknown:
        known = " ".join(f"%{code}" for code in BY_CODE)
        raise UsageProblem(f"--format: cannot read {text!r}; use these codes: {known}")
    return [BY_CODE[c] for c in codes]


def fields_from_list(text: str) -> list[str]:
    """'id,user,state,reason' -> the same names, checked."""
    names = [n.strip().lower() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in FIELDS]
    if not names or unknown:
        raise UsageProblem(f"--fields: unknown field {unknown[0] if unknown else text!r}; "
                           f"choose from {','.join(FIELDS)}")
    return names


def fold(jobs: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """One entry per array (its tasks counted by state) in place of its tasks; other jobs as they are."""
    out: list[dict[str, Any]] = []
    arrays: dict[int, list[dict[str, Any]]] = {}
    for job in jobs:
        array = job.get("array_id")
        if array is None:
            out.append(job)
            continue
        if array not in arrays:
            arrays[array] = []
            out.append({"_array": array})
        arrays[array].append(job)
    return [_folded(arrays[j["_array"]]) if "_array" in j else j for j in out]


def _folded(tasks: list[dict[str, Any]]) -> dict[str, Any]:
    if len(tasks) == 1:
        return tasks[0]
    counts = Counter(t["state"] for t in tasks)
    ordered = [(s, counts[s]) for s in STATE_ORDER if counts[s]] + [
        (s, n) for s, n in counts.items() if s not in STATE_ORDER]
    lead = min(tasks, key=lambda t: (STATE_ORDER.index(t["state"]) if t["state"] in STATE_ORDER else 99,
                                     t["array_task"]))
    limit = f"%{lead['array_limit']}" if lead.get("array_limit") else ""
    indices = sorted(t["array_task"] for t in tasks)
    span = f"{indices[0]}-{indices[-1]}" if len(indices) > 1 else str(indices[0])
    states = ", ".join(f"{n} {s}" for s, n in ordered)
    first_reason = next((t.get("reason") for t in tasks if t["state"] == "pending" and t.get("reason")), None)
    return {**lead, "_folded": f"{lead['array_id']}_[{span}{limit}]", "_counts": ordered,
            "_states": states, "reason": first_reason if counts["pending"] else lead.get("reason"),
            "allocation": lead.get("allocation") if counts["running"] == 1 else [],
            "gpus": lead["gpus"]}


def rows(jobs: Sequence[dict[str, Any]], names: Sequence[str], now: datetime) -> list[tuple[str, ...]]:
    return [tuple(FIELDS[n][2](job, now) for n in names) for job in jobs]


def headers(names: Sequence[str]) -> tuple[str, ...]:
    return tuple(FIELDS[n][1] for n in names)


def default_rows(jobs: Sequence[dict[str, Any]], now: datetime) -> list[tuple[str, ...]]:
    """`nanum ps`'s usual columns (`nanum.cli.views.PS_COLUMNS`), arrays and their tasks named ID_TASK."""
    from nanum.cli.views import ps_rows

    out = []
    for job, row in zip(jobs, ps_rows(jobs, now), strict=True):
        if job.get("array_id") is not None:
            row = (_id(job, now), *row[1:4], _state(job, now) if job.get("_states") else row[4], *row[5:])
        out.append(row)
    return out
