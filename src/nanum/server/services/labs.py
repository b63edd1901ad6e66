"""One lab as its manager sees it: quota, members, what it runs and borrows, this month's usage and budget,
the work lost to preemption, and the history of its quota (`GET /api/v1/labs/{name}`, `nanum lab show`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sqlalchemy import func, select

from nanum.server.context import ServerContext
from nanum.server.errors import NotFound
from nanum.server.services import audit, budgets
from nanum.server.services.accounts import lab_out
from nanum.server.services.lifecycle import month_of, month_start
from nanum.store import JobRow, LabRow, MembershipRow, SegmentRow, UserRow


def lab_detail(ctx: ServerContext, name: str, month_used: Mapping[budgets.Key, float] | None = None) -> dict[str, Any]:
    """`month_used`: every lab's and user's GPU-seconds this month as `budgets.month_seconds` reads them at
    `ctx.clock()`, given by a caller that shows several labs: it reads every running job, so the Labs page reads it
    once, not once a lab."""
    now = ctx.clock()
    with ctx.db.read() as s:
        lab = s.scalars(select(LabRow).where(LabRow.name == name)).first()
        if lab is None:
            raise NotFound(f"no lab named {name}; `nanum lab list` shows the labs")
        roles = s.execute(
            select(UserRow.name, MembershipRow.role)
            .join(MembershipRow, MembershipRow.user_id == UserRow.id)
            .where(MembershipRow.lab_id == lab.id)
            .order_by(UserRow.name)
        ).all()
        members = [name for name, _ in roles]
        running = s.execute(
            select(JobRow.gpus, JobRow.nodes, JobRow.borrowing).where(
                JobRow.lab_id == lab.id, JobRow.state == "running"
            )
        ).all()
        pending = s.scalar(
            select(func.count()).select_from(JobRow).where(JobRow.lab_id == lab.id, JobRow.state == "pending")
        )
        used = (budgets.month_seconds(s, now) if month_used is None else month_used).get(("lab", name), 0.0) / 3600.0
        lost = s.scalar(
            select(func.coalesce(func.sum(SegmentRow.lost_gpu_seconds), 0.0)).where(
                SegmentRow.lab_id == lab.id, SegmentRow.end >= month_start(now)
            )
        )
        history = audit.history(s, "lab", name)
    budget = None
    if lab.monthly_gpu_hours is not None:
        budget = budgets.Budget("lab", name, used, lab.monthly_gpu_hours).out(budgets.month_name(now))
    return {
        **lab_out(lab).model_dump(),
        "members": members,
        "managers": [name for name, role in roles if role == "manager"],
        "running_jobs": len(running),
        "pending_jobs": int(pending or 0),
        "gpus_in_use": sum(r.gpus * r.nodes for r in running),
        "borrowed_gpus": sum(r.gpus * r.nodes for r in running if r.borrowing),
        "month": month_of(now),
        "used_gpu_hours": round(used, 6),
        "lost_gpu_hours": round(float(lost or 0.0) / 3600.0, 6),
        "budget": budget,
        "history": history,
    }
