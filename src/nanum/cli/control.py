"""Changing queued jobs: `nanum hold`, `release`, `modify`, `top` and `requeue`.

An ID is a job's (`12`) or one task's (`12_7`: task 7 of array 12). An array's ID means all its tasks (those it
applies to: the waiting ones for `top`, those that run or ended for `requeue`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any

import typer

from nanum.cli.app import app
from nanum.cli.common import Command, JobIdArg, ServerOpt, TokenOpt, UsageProblem, clean_errors, connect
from nanum.cli.jobcmds import each, resolve
from nanum.jobref import job_ref

_Opt = typer.Option
IdsArg = Annotated[list[str], typer.Argument(
    metavar="ID...", show_default=False, help="Job IDs; an array's ID means all its tasks, ID_TASK one task.")]


@app.command(cls=Command)
@clean_errors
def hold(job_ids: IdsArg, server: ServerOpt = None, token: TokenOpt = None) -> None:
    """Keep pending jobs from starting until `nanum release`."""
    each(job_ids, server, token, "hold", "Held")


@app.command(cls=Command)
@clean_errors
def release(job_ids: IdsArg, server: ServerOpt = None, token: TokenOpt = None) -> None:
    """Let held jobs run again, in their place in the queue."""
    each(job_ids, server, token, "release", "Released")


@app.command(cls=Command)
@clean_errors
def top(job_ids: IdsArg, server: ServerOpt = None, token: TokenOpt = None) -> None:
    """Move waiting jobs before your other waiting jobs of their tier (a higher tier, set by admins, stays ahead)."""
    each(job_ids, server, token, "top", "Moved", " before your other waiting jobs of its tier")


@app.command(cls=Command)
@clean_errors
def requeue(job_ids: IdsArg, server: ServerOpt = None, token: TokenOpt = None) -> None:
    """Queue jobs again: a running one is stopped first, an ended one runs again as submitted. An array's ID
    requeues its tasks that run or ended."""
    each(job_ids, server, token, "requeue", "Requeued")


@app.command(cls=Command)
@clean_errors
def modify(
    job_id: JobIdArg,
    time: Annotated[str | None, _Opt("--time", "-t", metavar="DURATION", help="New time limit: 30m, 4h, 1:30:00.")]
    = None,
    gpus: Annotated[int | None, _Opt("--gpus", "-g", metavar="N", help="New GPUs per node.")] = None,
    nodes: Annotated[int | None, _Opt("--nodes", "-N", metavar="K", help="New number of nodes.")] = None,
    gpu_model: Annotated[str | None, _Opt("--gpu-model", metavar="MODEL[,MODEL]", help=(
        "Only GPUs of this model, or of any of these; \"\" for any model."))] = None,
    gpu_mem: Annotated[str | None, _Opt("--gpu-mem", metavar="SIZE", help=(
        "Only GPUs with at least this much memory each: 40G; \"\" for any."))] = None,
    constraint: Annotated[list[str] | None, _Opt("--constraint", metavar="K=V", help=(
        "Only nodes with these labels, in place of those asked for before (repeat for several); \"\" for none."))]
    = None,
    cpus: Annotated[int | None, _Opt("--cpus", "-c", metavar="C", help="New CPU cores per node.")] = None,
    mem: Annotated[str | None, _Opt("--mem", metavar="SIZE", help="New memory per node: 32G; \"\" for no limit.")]
    = None,
    priority: Annotated[int | None, _Opt("--priority", metavar="P", help="New priority, 0..100.")] = None,
    tier: Annotated[int | None, _Opt("--tier", metavar="N", help=(
        "New tier, 0..9 (admins only): every queue order puts a higher tier first."))] = None,
    lab: Annotated[str | None, _Opt("--lab", metavar="LAB", help="Charge another lab.")] = None,
    name: Annotated[str | None, _Opt("--name", "-J", metavar="NAME", help="New name.")] = None,
    server: ServerOpt = None,
    token: TokenOpt = None,
) -> None:
    """Change a job while it waits (pending or held): yours within your limits, anyone's (and its tier) as an
    admin. Options are read as `nanum submit` reads them."""
    from nanum.cli.jobspec import HEADER_OPTIONS, check_bounds, parse_label, parse_mem, parse_models, parse_time
    from nanum.jobfields import CLEARED_BY_NULL, change_text

    def cleared(text: str | None, parse: Callable[[str], Any]) -> Any:
        return _UNSET if text is None else None if not text.strip() else parse(text)

    changes = {
        "time_limit_s": parse_time(time) if time is not None else _UNSET, "gpus": gpus, "nodes": nodes,
        "gpu_model": cleared(gpu_model, parse_models),
        "gpu_memory_mb": cleared(gpu_mem, lambda t: parse_mem(t, "--gpu-mem")),
        "constraints": _UNSET if constraint is None else [parse_label(c) for c in constraint if c.strip()],
        "cpus": cpus, "memory_mb": cleared(mem, parse_mem), "priority": priority,
        "tier": HEADER_OPTIONS["--tier"][1](str(tier)) if tier is not None else None, "lab": lab, "name": name,
    }
    changes = {k: v for k, v in changes.items() if v is not _UNSET and (v is not None or k in CLEARED_BY_NULL)}
    if not changes:
        raise UsageProblem("nothing to change; give --time, --gpus, --nodes, --gpu-model, --gpu-mem, --constraint, "
                           "--cpus, --mem, --priority, --tier, --lab or --name")
    check_bounds(changes)
    with connect(server, token) as client:
        found, task = resolve(client, job_id)
        modified = client.modify(found, **changes)
    whole = not task and modified.get("array_id") == found  # an array's id: every task still waiting
    what = f"array {job_id}'s waiting tasks" if whole else f"job {job_ref(modified)}"
    print(f"Modified {what}: " + ", ".join(f"{k}={change_text(k, v)}" for k, v in changes.items()))


_UNSET: Any = object()
