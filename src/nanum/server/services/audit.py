"""The audit trail of quotas: who changed which limit of which lab or user, when, and the budget warnings.

Every change an admin makes to a lab or a user's limits is one row (`changes` maps each field to `[old, new]`);
the scheduler adds a row when a lab or user crosses 80 % or 100 % of its monthly budget (actor `nanum`).
`nanum lab show` lists them as the lab's history.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from nanum.server.schemas import iso
from nanum.store import AuditRow, table

SYSTEM = "nanum"
INSERT = table(AuditRow).insert()


def record(
    s: Session, now: float, actor: str, kind: str, name: str, action: str, changes: dict[str, Any], message: str
) -> None:
    s.connection().execute(
        INSERT,
        {
            "time": now,
            "actor": actor,
            "kind": kind,
            "name": name,
            "action": action,
            "changes": changes,
            "message": message,
        },
    )


def diff(old: dict[str, Any], new: dict[str, Any]) -> dict[str, list[Any]]:
    """`{field: [old, new]}` for every field of `new` whose value differs from `old`."""
    return {k: [old.get(k), v] for k, v in new.items() if old.get(k) != v}


def describe(changes: dict[str, list[Any]]) -> str:
    """`max_gpus 4 -> 8, weight 1.0 -> 2.0` (`none` for unlimited)."""
    return ", ".join(f"{k} {_text(a)} -> {_text(b)}" for k, (a, b) in changes.items())


def _text(value: Any) -> str:
    return "none" if value is None else f"{value:g}" if isinstance(value, float) else str(value)


def recent(s: Session, kind: str, per_name: int) -> dict[str, list[dict[str, Any]]]:
    """The newest `per_name` entries about each lab, user or node of `kind` (one query), oldest first: for a page
    that shows every node's latest changes."""
    newest = func.row_number().over(partition_by=AuditRow.name, order_by=(AuditRow.time.desc(), AuditRow.id.desc()))
    ranked = select(AuditRow.id, newest.label("n")).where(AuditRow.kind == kind).subquery()
    rows = s.scalars(
        select(AuditRow).join(ranked, ranked.c.id == AuditRow.id).where(ranked.c.n <= per_name)
        .order_by(AuditRow.time, AuditRow.id)
    ).all()
    found: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        found.setdefault(r.name, []).append(_entry(r))
    return found


def _entry(r: AuditRow) -> dict[str, Any]:
    return {"time": iso(r.time), "actor": r.actor, "action": r.action, "changes": r.changes, "message": r.message}


def history(s: Session, kind: str, name: str, limit: int = 50) -> list[dict[str, Any]]:
    """The newest `limit` entries about one lab, user or node, oldest first."""
    rows = s.scalars(
        select(AuditRow)
        .where(AuditRow.kind == kind, AuditRow.name == name)
        .order_by(AuditRow.time.desc(), AuditRow.id.desc())
        .limit(limit)
    ).all()
    return [_entry(r) for r in reversed(rows)]
