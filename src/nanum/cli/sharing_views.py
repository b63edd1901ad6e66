"""How fair sharing looks in a terminal: `nanum lab show`, `nanum usage` (table and CSV), `nanum priority`.

Pure functions from API objects to lines and rows, tested without a server (the style of `nanum.cli.views`).
"""

from __future__ import annotations

import csv
import io
from collections.abc import Sequence
from typing import Any

from nanum.cli.views import duration

QUOTA_FIELDS = ("guaranteed_gpus", "max_gpus", "max_running_jobs", "monthly_gpu_hours", "weight", "grace_s")
USAGE_CSV = (
    "key",
    "gpu_hours",
    "gpu_seconds",
    "jobs",
    "avg_wait_s",
    "lost_gpu_hours",
    "budget_gpu_hours",
    "budget_percent",
)


def number(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:,.0f}" if value >= 1000 else f"{round(value, 3):g}"
    return str(value)


def quota_text(lab: dict[str, Any]) -> str:
    """`guaranteed 4 GPUs, max 8 GPUs, max 10 jobs, 500 GPU-hours a month, weight 2, grace 60 s`."""
    parts = []
    labels = {
        "guaranteed_gpus": "guaranteed {} GPUs",
        "max_gpus": "max {} GPUs",
        "max_running_jobs": "max {} jobs",
        "monthly_gpu_hours": "{} GPU-hours a month",
        "weight": "weight {}",
        "grace_s": "grace {} s",
    }
    for key in QUOTA_FIELDS:
        if lab.get(key) is not None:
            parts.append(labels[key].format(number(lab[key])))
    return ", ".join(parts) or "no limits"


def lab_lines(lab: dict[str, Any]) -> list[tuple[str, str]]:
    """`nanum lab show`: the quota, who is in it, what it runs now, this month, then its history."""
    budget = lab.get("budget")
    used = f"{number(lab['used_gpu_hours'])} GPU-hours"
    if budget:
        used += f" of {number(budget['budget_gpu_hours'])} ({budget['percent']:.0f}%)"
    lines = [
        ("lab", lab["name"]),
        ("quota", quota_text(lab)),
        ("members", ", ".join(lab.get("members") or []) or "-"),
        ("managers", ", ".join(lab.get("managers") or []) or "-"),
        (
            "now",
            f"{lab['running_jobs']} running ({lab['gpus_in_use']} GPUs, {lab['borrowed_gpus']} borrowed), "
            f"{lab['pending_jobs']} pending",
        ),
        (f"used {lab['month']}", used),
        ("lost to preemption", f"{number(lab['lost_gpu_hours'])} GPU-hours"),
    ]
    if budget and budget.get("warning"):
        lines.append(("warning", budget["warning"]))
    return lines


def history_lines(history: Sequence[dict[str, Any]]) -> list[str]:
    return [f"{(h.get('time') or '')[:19].replace('T', ' ')}  {h['actor']}: {h['message']}" for h in history]


def usage_columns(by: str) -> tuple[str, ...]:
    return (by.upper(), "GPU-HOURS", "JOBS", "AVG WAIT", "LOST GPU-H", "BUDGET")


def usage_rows(report: dict[str, Any]) -> list[tuple[str, ...]]:
    rows = [_usage_row(r) for r in report["rows"]]
    rows.append(_usage_row({**report["total"], "key": "TOTAL"}))
    return rows


def _usage_row(row: dict[str, Any]) -> tuple[str, ...]:
    wait = "-" if row.get("avg_wait_s") is None else duration(row["avg_wait_s"])
    budget = ""
    if row.get("budget_gpu_hours") is not None:
        pct = row.get("budget_percent")
        budget = (
            f"{pct:.0f}% of {number(row['budget_gpu_hours'])}" if pct is not None else number(row["budget_gpu_hours"])
        )
    return (row["key"], f"{row['gpu_hours']:,.2f}", str(row["jobs"]), wait, f"{row['lost_gpu_hours']:,.2f}", budget)


def usage_title(report: dict[str, Any]) -> str:
    since = (report.get("since") or "the beginning")[:19].replace("T", " ")
    until = (report.get("until") or "")[:19].replace("T", " ")
    scope = " ".join(f"{k} {report[k]}" for k in ("lab", "user") if report.get(k))
    return f"GPU usage{' of ' + scope if scope else ''} from {since} to {until} UTC, by {report['by']}"


def usage_csv(report: dict[str, Any]) -> str:
    """One row per group then a `total` row, every figure unrounded for finance."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(["by", *USAGE_CSV])
    for row in [*report["rows"], {**report["total"], "key": "total"}]:
        writer.writerow([report["by"], *("" if row.get(k) is None else row[k] for k in USAGE_CSV)])
    return out.getvalue()


#: how each queue order ranks inside a tier, under `nanum priority`'s title (its help says more).
ORDER_RULES = {
    "fifo": "submit time",
    "priority": "PRIORITY (highest first), then submit time",
    "fairshare": "FAIRSHARE, then USERSHARE, then submit time",
    "las": "least GPU service received (classes at 2 and 20 GPU-hours), then submit time",
    "gittins": ("short class first, then Gittins index x 2^((F - 0.5)/4) (F = the lab's fair-share factor), "
                "then F, then submit time; a job's --priority reorders only its owner's own jobs of its tier"),
    "shortest": "shortest expected run time, then submit time",
}


def order_rule(policy: str) -> str:
    """The rule RANK follows under `policy` (`gittins+binpack+backfill`): the tier first, then the order's own."""
    order = policy.split("+", 1)[0]
    own = ORDER_RULES.get(order, f"the {order} order")
    return f"RANK: higher TIER first (set by admins), then {own}."


PRIORITY_COLUMNS = ("RANK", "JOBID", "USER", "LAB", "TIER", "PRIORITY", "AGE", "FAIRSHARE", "JOBPRIO", "SIZE",
                    "USERSHARE")


def priority_rows(report: dict[str, Any]) -> list[tuple[str, ...]]:
    """Like `sprio`: each factor as its weighted contribution to PRIORITY; USERSHARE is the user's fair-share
    factor (0..1), which the fairshare order uses after the lab's."""
    weights = report["weights"]
    rows = []
    for job in report["jobs"]:
        f = job["factors"]
        rows.append(
            (
                str(job["rank"]),
                job["job_ref"],
                job["user"],
                job["lab"],
                str(job.get("tier", 0)),
                f"{job['priority']:.0f}",
                *(f"{weights[k] * f[k]:.0f}" for k in ("age", "fairshare", "priority", "size")),
                f"{job['user_fairshare']:.3f}",
            )
        )
    return rows
