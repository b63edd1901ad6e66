"""Monthly GPU-hour budgets as people see them: how much of its budget each lab and user used this month, the
warnings at 80 % and 100 %, and the audit entries the scheduler writes when a budget crosses one of them.

The core enforces budgets (`Code.BUDGET`: no new starts once used >= budget, running jobs finish); this module
only reports. Used hours include the running jobs' time not charged yet, counted as the scheduler's snapshot
counts them, so what `nanum ps` warns about is what the next cycle decides on.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field

from sqlalchemy import select
from sqlalchemy.orm import Session

from nanum.core import Snapshot
from nanum.server.context import ServerContext
from nanum.server.services import audit, charging
from nanum.server.services.lifecycle import month_of, month_start
from nanum.store import AuditRow, JobRow, LabRow, UsageRow, UserRow

LEVELS = (80, 100)

Key = tuple[str, str]  # (kind, name): ("lab", "vision") or ("user", "alice")


def hours(value: float) -> str:
    """GPU-hours for people: `1,250`, `12.5`, `0.005`."""
    return f"{value:,.0f}" if value >= 1000 else f"{round(value, 3):g}"


@dataclass(frozen=True, slots=True)
class Budget:
    """One lab's or user's monthly budget and what it used of it this month."""

    kind: str
    name: str
    used_gpu_hours: float
    budget_gpu_hours: float

    @property
    def percent(self) -> float:
        if self.budget_gpu_hours <= 0:
            return 100.0
        return 100.0 * self.used_gpu_hours / self.budget_gpu_hours

    @property
    def level(self) -> int:
        """0, 80 or 100: the highest warning level reached."""
        return max((lv for lv in LEVELS if self.percent >= lv), default=0)

    def warning(self, month: str) -> str | None:
        """A line for people once 80 % is used, else None. `month` names the budget period ("December")."""
        used, budget = hours(self.used_gpu_hours), hours(self.budget_gpu_hours)
        if self.level >= 100:
            return (
                f"{self.kind} {self.name} has used its {budget} GPU-hours for {month} ({used} used): no new "
                "jobs start until the month turns or an admin raises the budget"
            )
        if self.level:
            return f"{self.kind} {self.name} has used {self.percent:.0f}% of its {budget} GPU-hours for {month}"
        return None

    def out(self, month: str) -> dict[str, object]:
        return {
            "used_gpu_hours": round(self.used_gpu_hours, 6),
            "budget_gpu_hours": self.budget_gpu_hours,
            "percent": round(self.percent, 1),
            "warning": self.warning(month),
        }


def month_name(now: float) -> str:
    return time.strftime("%B", time.gmtime(now))


# -- for the API: every budget, from the store, cached a few seconds --------------------------------------------


def status(ctx: ServerContext) -> Mapping[Key, Budget]:
    """Every lab and user that has a budget, with what it used this month (cached for a few seconds)."""
    return ctx.caches.budgets.get_or_load("all", lambda: _load(ctx, ctx.clock()))  # type: ignore[return-value]


def warning_for(found: Mapping[Key, Budget], user: str, lab: str, now: float) -> str | None:
    """The warnings that concern a job of `user` in `lab`, as one line, or None."""
    if not found:
        return None
    month = month_name(now)
    lines = [b.warning(month) for key in (("lab", lab), ("user", user)) if (b := found.get(key)) is not None]
    return "; ".join(line for line in lines if line) or None


def _load(ctx: ServerContext, now: float) -> dict[Key, Budget]:
    with ctx.db.read() as s:
        budgets: dict[Key, float] = {}
        for kind, row in (("lab", LabRow), ("user", UserRow)):
            query = select(row.name, row.monthly_gpu_hours).where(row.monthly_gpu_hours.is_not(None))
            budgets.update({(kind, name): float(hours or 0.0) for name, hours in s.execute(query)})
        if not budgets:
            return {}
        used = month_seconds(s, now)
    return {key: Budget(key[0], key[1], used[key] / 3600.0, budget) for key, budget in budgets.items()}


def month_seconds(s: Session, now: float) -> defaultdict[Key, float]:
    """GPU-seconds of this month per (kind, name): charged runs, ended runs the scheduler has yet to charge, and the
    running jobs' time not charged yet."""
    used: defaultdict[Key, float] = defaultdict(float)
    month = month_of(now)
    for kind, name, seconds in s.execute(
        select(UsageRow.kind, UsageRow.name, UsageRow.gpu_seconds).where(UsageRow.month == month)
    ):
        used[(kind, name)] += seconds
    for r in charging.unsettled(s):
        this_month = charging.in_month(r, month)
        used[("lab", r.lab)] += this_month
        used[("user", r.user)] += this_month
    first = month_start(now)
    running = s.execute(
        select(JobRow.gpus, JobRow.nodes, JobRow.charged_until, JobRow.start_time, LabRow.name, UserRow.name)
        .join(LabRow, LabRow.id == JobRow.lab_id)
        .join(UserRow, UserRow.id == JobRow.user_id)
        .where(JobRow.state == "running")
    )
    for gpus, nodes, charged, start, lab, user in running:
        since = max(charged or start or now, first)
        extra = gpus * nodes * max(now - since, 0.0)
        used[("lab", lab)] += extra
        used[("user", user)] += extra
    return used


# -- for the scheduler: an audit entry when a budget crosses 80 % or 100 % ----------------------------------------


@dataclass(slots=True)
class Watch:
    """Remembers, per (kind, name, budget), the highest level already announced this month, so each crossing is
    recorded once; raising a budget starts afresh. Loaded from the audit trail when the month (or server) starts."""

    month: str = ""
    warned: dict[tuple[str, str, float], int] = field(default_factory=dict)

    def check(self, s: Session, snapshot: Snapshot, now: float) -> None:
        month = month_of(now)
        if month != self.month:
            self.month, self.warned = month, _announced(s, now)
        for kind, items in (("lab", snapshot.labs.values()), ("user", snapshot.users.values())):
            for item in items:
                budget = item.limits.monthly_gpu_hours
                if budget is not None:
                    self._note(s, Budget(kind, item.name, item.used_gpu_hours, budget), now)

    def _note(self, s: Session, budget: Budget, now: float) -> None:
        key = (budget.kind, budget.name, budget.budget_gpu_hours)
        if budget.level <= self.warned.get(key, 0):
            return
        self.warned[key] = budget.level
        changes = {
            "month": self.month,
            "level": budget.level,
            "used_gpu_hours": round(budget.used_gpu_hours, 3),
            "budget_gpu_hours": budget.budget_gpu_hours,
        }
        message = budget.warning(month_name(now)) or ""
        audit.record(s, now, audit.SYSTEM, budget.kind, budget.name, "budget", changes, message)


def _announced(s: Session, now: float) -> dict[tuple[str, str, float], int]:
    rows = s.execute(
        select(AuditRow.kind, AuditRow.name, AuditRow.changes).where(
            AuditRow.action == "budget", AuditRow.time >= month_start(now)
        )
    )
    out: dict[tuple[str, str, float], int] = {}
    for kind, name, changes in rows:
        key = (kind, name, float(changes.get("budget_gpu_hours", -1)))
        out[key] = max(out.get(key, 0), int(changes.get("level", 0)))
    return out
