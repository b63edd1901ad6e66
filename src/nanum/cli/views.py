"""How jobs and nodes look in a terminal: the `nanum ps` and `nanum nodes` tables, the `nanum show` listing.

Pure functions from API objects (and `now`) to strings and rows, so they are tested without a server.
Tables are plain aligned text (as `ps` and `squeue` print them): one line per row, fitted to the terminal,
and no Rich, which would add 35 ms to every `nanum ps`. What users wrote (job names, commands, reasons) is shown
with its control characters spelt out (`printable`): anyone's job is in everyone's `nanum ps`.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from nanum.cli.monitor_views import FIELDS, holder_text, idle_text, usage_lines, util_text
from nanum.jobref import job_ref
from nanum.predicted import prediction_text

ACTIVE = ("pending", "held")
BORROW_MARK = "*"
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def printable(text: str) -> str:
    """`text` with its control characters spelt out as `cat -v` does (`^[` for ESC), not sent to the terminal: a
    job named `\x1b]0;...\x07` would otherwise retitle, clear or rewrite the terminal of whoever lists it."""
    return _CONTROL.sub(_spelt, text) if _CONTROL.search(text) else text


def _spelt(found: re.Match[str]) -> str:
    code = ord(found.group())
    return f"^{chr(code ^ 0x40)}" if code < 0x20 or code == 0x7F else f"\\x{code:02x}"


def parse_time(value: str | None) -> datetime | None:
    """An API timestamp (ISO 8601, UTC, maybe with a trailing Z) as an aware datetime."""
    if not value:
        return None
    parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def duration(seconds: float) -> str:
    """Like squeue: M:SS, H:MM:SS, then D-HH:MM:SS."""
    total = max(0, int(seconds))
    days, rest = divmod(total, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days}-{hours:02d}:{minutes:02d}:{secs:02d}"
    if hours:
        return f"{hours}:{minutes:02d}:{secs:02d}"
    return f"{minutes}:{secs:02d}"


def job_time(job: dict[str, Any], now: datetime) -> str:
    """Waiting time while pending, running time while running, run time once finished."""
    submit, start, end = (parse_time(job.get(k)) for k in ("submit_time", "start_time", "end_time"))
    if job["state"] in ACTIVE or start is None:
        return duration(((end or now) - submit).total_seconds()) if submit else ""
    return duration(((end or now) - start).total_seconds())


def ranges(indices: Sequence[int]) -> str:
    """[0, 1, 2, 5] -> '0-2,5'."""
    out: list[str] = []
    items = sorted(indices)
    i = 0
    while i < len(items):
        j = i
        while j + 1 < len(items) and items[j + 1] == items[j] + 1:
            j += 1
        out.append(str(items[i]) if i == j else f"{items[i]}-{items[j]}")
        i = j + 1
    return ",".join(out)


def where(job: dict[str, Any]) -> str:
    """'gpu-01:0,1' for the first node of the allocation, '+N' for the other nodes of a gang."""
    alloc = job.get("allocation") or []
    if not alloc:
        return ""
    first = alloc[0]
    text = f"{first['node']}:{ranges(first['gpus'])}" if first.get("gpus") else str(first["node"])
    return text + (f" +{len(alloc) - 1}" if len(alloc) > 1 else "")


def starts_at(estimate: str | None, now: datetime) -> str:
    """'starts ~19:05' in local time (with the date when not today), or 'starts soon' when due."""
    when = parse_time(estimate)
    if when is None:
        return ""
    if when <= now:
        return "starts soon"
    local = when.astimezone()
    same_day = local.date() == now.astimezone().date()
    return f"starts ~{local:%H:%M}" if same_day else f"starts ~{local:%b %d %H:%M}"


def why(job: dict[str, Any], now: datetime) -> str:
    """The REASON column: estimate and reason while waiting, the exit status once finished."""
    state = job["state"]
    if state in ACTIVE:
        parts = [starts_at(job.get("estimated_start"), now), job.get("reason") or ""]
        return "; ".join(p for p in parts if p)
    if state == "running":  # "preempting: ..." while it is being stopped; an idle note while it does nothing
        return str(job.get("reason") or "") or idle_text(job)
    if job.get("reason"):
        return str(job["reason"])
    return f"exit {job['exit_code']}" if job.get("exit_code") is not None else ""


def gpus_text(job: dict[str, Any]) -> str:
    nodes = job.get("nodes") or 1
    return f"{nodes}x{job['gpus']}" if nodes > 1 else str(job["gpus"])


PS_COLUMNS = ("ID", "NAME", "USER", "LAB", "STATE", "GPUS", "NODE", "TIME", "REASON")


def ps_rows(jobs: Sequence[dict[str, Any]], now: datetime) -> list[tuple[str, ...]]:
    return [
        (
            str(job["id"]),
            job.get("name") or "",
            job.get("user") or "",
            job.get("lab") or "",
            job["state"] + (BORROW_MARK if job.get("borrowing") and job["state"] == "running" else ""),
            gpus_text(job),
            where(job),
            job_time(job, now),
            why(job, now),
        )
        for job in jobs
    ]


SHOW_ORDER = (
    "id", "name", "user", "lab", "state", "reason", "reason_code", "estimated_start", "hint", "budget_warning",
    "gpus", "nodes", "gpu_model", "cpus", "memory_mb", "time_limit_s", "priority", "tier", "kind", "preemptible",
    "borrowing", "over_reservation", "burst", "allocation", "submit_time", "start_time", "end_time", "exit_code",
    "runs", "preemptions", "last_checkpoint", "lost_gpu_hours", "segments", "command", "workdir", "env",
)


#: shown together on one `prediction` line, after the time limit
PREDICTION = ("predicted_runtime_s", "prediction_basis")


def show_lines(job: dict[str, Any]) -> list[tuple[str, str]]:
    """Every field of a job, known ones in a reading order, then anything newer servers add."""
    hidden = (*SHOW_ORDER, *FIELDS, *PREDICTION)
    keys = [k for k in SHOW_ORDER if k in job] + sorted(k for k in job if k not in hidden)
    lines = [(key, printable(_show_value(key, job[key]))) for key in keys]
    if job.get("array_id") is not None:  # an array's task, named as ps and cancel name it
        lines[0] = ("id", f"{job_ref(job)} (task {job.get('array_task')} of array {job['array_id']}; job id "
                          f"{job['id']})")
    if (predicted := prediction_text(job, duration)) is not None:
        at = next((i + 1 for i, k in enumerate(keys) if k == "time_limit_s"), len(lines))
        lines.insert(at, ("prediction", predicted))
    return lines + usage_lines(job)


def _show_value(key: str, value: Any) -> str:
    if key == "env" and value is None:
        return "(hidden: only the job's owner and admins see it)"
    if value is None:
        return "-"
    if key == "allocation":
        return "; ".join(f"{a['node']} gpus {','.join(map(str, a['gpus']))}" for a in value) or "-"
    if key == "segments":
        return "; ".join(_segment(seg) for seg in value) or "-"
    if key == "lost_gpu_hours":
        return f"{value:.3f} GPU-hours"
    if key == "command":
        return shlex.join(value)
    if key == "env":
        return " ".join(f"{k}={shlex.quote(str(v))}" for k, v in sorted(value.items())) or "-"
    if key == "memory_mb":
        return f"{value} MiB"
    if key == "time_limit_s":
        return f"{value} s ({duration(value)})"
    if isinstance(value, bool):
        return "yes" if value else "no"
    return str(value)


def _segment(seg: dict[str, Any]) -> str:
    """`17:20:41-17:25:02 4 GPUs preempted (0.29 GPU-h)`: one charged interval of the job's allocation."""
    start, end = parse_time(seg.get("start")), parse_time(seg.get("end"))
    span = f"{start.astimezone():%H:%M:%S}-" if start else ""
    span += f"{end.astimezone():%H:%M:%S}" if end else "now"
    gpus = "1 GPU" if seg["gpus"] == 1 else f"{seg['gpus']} GPUs"
    return f"{span} {gpus} {seg['outcome']} ({seg['gpu_hours']:.3f} GPU-h)"


def budget_captions(jobs: Sequence[dict[str, Any]]) -> list[str]:
    """Each distinct budget warning among `jobs` once, for under the `nanum ps` table."""
    return [f"! {w}" for w in dict.fromkeys(j["budget_warning"] for j in jobs if j.get("budget_warning"))]


NODE_COLUMNS = ("NODE", "STATE", "GPU", "MODEL", "MEMORY", "UTIL", "JOB", "USER")


def node_rows(nodes: Sequence[dict[str, Any]]) -> list[tuple[str, ...]]:
    """One row per GPU, the node's name and state on its first row only."""
    rows: list[tuple[str, ...]] = []
    for node in nodes:
        state = node["state"] + (" (simulated)" if node.get("simulated") else "")
        gpus = node.get("gpus") or []
        if not gpus:
            rows.append((node["name"], state, "-", "", "", "", "", ""))
        for i, gpu in enumerate(gpus):
            job = gpu.get("job_ref") or ""
            rows.append((node["name"] if i == 0 else "", state if i == 0 else "", str(gpu["index"]),
                         gpu.get("model") or "", f"{round(gpu.get('memory_mb', 0) / 1024)} GiB", util_text(gpu),
                         job, holder_text(gpu)))
    return rows


def fleet_caption(nodes: Sequence[dict[str, Any]]) -> str | None:
    """Lines under the `nanum nodes` table: why a node is drained, its owner and labels, GPUs out of service."""
    lines = []
    for n in nodes:
        if n.get("drain_reason"):
            lines.append(f"! {n['name']} {n['state']}: {n['drain_reason']}")
        for gpu in n.get("gpus") or ():
            if gpu.get("health"):
                lines.append(f"! {n['name']} GPU {gpu['index']} out of service: {gpu['health']} "
                             f"(`nanum node resume {n['name']}` returns it)")
        labels = ",".join(f"{k}={v}" for k, v in sorted((n.get("labels") or {}).items()))
        said = [f"owner {n['owner']}"] if n.get("owner") else []
        said += [f"labels {labels}"] if labels else []
        if said:
            lines.append(f"  {n['name']}: {'; '.join(said)}")
    return "\n".join(lines) or None


def limits_caption(nodes: Sequence[dict[str, Any]]) -> str | None:
    """A line under the `nanum nodes` table for each node that runs jobs without holding them to their --cpus
    and --mem (the agent found no cgroup it could write)."""
    lines = [f"! {n['name']} limits: {n['limits']}" for n in nodes if n.get("limits", "").startswith("not ")]
    return "\n".join(lines) or None


def inventory_caption(nodes: Sequence[dict[str, Any]]) -> str | None:
    """A line under the `nanum nodes` table for each node whose agent reports GPUs it was not accepted with."""
    lines = []
    for n in nodes:
        extra = n.get("unaccepted_gpus") or []
        if extra:
            models = ", ".join(sorted({str(g.get("model") or "unknown") for g in extra}))
            lines.append(f"! {n['name']} reports {len(extra)} GPUs it was not accepted with ({models}); they are not "
                         f"used until an admin runs `nanum node accept {n['name']}`")
    return "\n".join(lines) or None


RIGHT_ALIGNED = frozenset({"ID", "GPUS", "GPU", "JOB", "TIME", "MEMORY", "UTIL"})


def format_table(columns: Sequence[str], rows: Sequence[tuple[str, ...]], width: int | None = None,
                 wide: str | None = None) -> list[str]:
    """Rows as aligned text lines, like `ps` and `squeue`: one line per row, never wrapped. When `width` is
    given and the table is wider, the `wide` column (then the widest others) is cut short with an ellipsis."""
    rows = [tuple(map(printable, row)) for row in rows]
    widths = [max([len(c), *(len(r[i]) for r in rows)]) for i, c in enumerate(columns)]
    if width is not None:
        _fit(widths, list(columns), width, wide)
    lines = []
    for cells in (tuple(columns), *rows):
        parts = [_cell(text, w, columns[i] in RIGHT_ALIGNED) for i, (text, w) in enumerate(zip(cells, widths,
                                                                                                 strict=True))]
        lines.append("  ".join(parts).rstrip())
    return lines


def _fit(widths: list[int], columns: list[str], width: int, wide: str | None) -> None:
    """Shrink column widths in place until the table (with two-space gaps) fits in `width`: first long
    names to 16, then the `wide` column to 20, then the others to 6, then the `wide` one to its header."""
    w = columns.index(wide) if wide in columns else None
    others = sorted((i for i in range(len(widths)) if i != w), key=lambda i: -widths[i])
    steps = [(i, 16) for i in others] + ([(w, 20)] if w is not None else []) + [(i, 6) for i in others]
    steps += [(w, len(columns[w]))] if w is not None else []
    for i, floor in steps:
        excess = sum(widths) + 2 * (len(widths) - 1) - width
        if excess <= 0:
            return
        widths[i] -= min(excess, max(widths[i] - max(floor, len(columns[i])), 0))


def _cell(text: str, width: int, right: bool) -> str:
    if len(text) > width:
        text = text[: max(width - 1, 0)] + "…"
    return text.rjust(width) if right else text.ljust(width)


def print_table(columns: Sequence[str], rows: Sequence[tuple[str, ...]], caption: str | None = None,
                wide: str | None = None, header: bool = True) -> None:
    """Print a table on stdout, fitted to the terminal's width when stdout is one (bold header there)."""
    import os
    import sys

    tty = sys.stdout.isatty()
    width = os.get_terminal_size(sys.stdout.fileno()).columns if tty else _columns_env()
    lines = format_table(columns, rows, width, wide)
    if not header:
        lines = lines[1:]
        if not lines:
            return
    elif tty and not os.environ.get("NO_COLOR"):
        lines[0] = f"\033[1m{lines[0]}\033[0m"
    sys.stdout.write("\n".join(lines) + "\n" + (f"{caption}\n" if caption else ""))


def _columns_env() -> int | None:
    """$COLUMNS when set (so `COLUMNS=100 nanum ps | less` fits); otherwise piped output is never cut."""
    import os

    value = os.environ.get("COLUMNS", "")
    return int(value) if value.isdigit() and int(value) > 0 else None
