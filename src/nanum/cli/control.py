"""Changing queued jobs: `nanum hold`, `release`, `modify`, `top` and `requeue`.

An ID is a job's (`12`), which for an array means all its tasks, or one task's (`12_7`: task 7 of array 12).
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Annotated

import typer

from nanum.cli.app import app
from nanum.cli.common import Command, ServerOpt, TokenOpt, UsageProblem, clean_errors, connect

if TYPE_CHECKING:
    from nanum.client import Client

_Opt = typer.Option
IdsArg = Annotated[list[str], typer.Argument(
    metavar="ID...", show_default=False, help="Job IDs; an array's ID means all its tasks, ID_TASK one task.")]
IdArg = Annotated[str, typer.Argument(metavar="ID", show_default=False, help="Job ID (see `nanum ps`).")]


def resolve(client: Client, text: str) -> tuple[int, bool]:
    """'12' -> (12, False): the job, or every task of array 12; '12_7' -> (task 7's job id, True)."""
    head, sep, task = text.partition("_")
    if not head.isdigit() or (sep and not task.isdigit()):
        raise UsageProblem(f"{text!r} is not a job ID; give a number such as 12, or 12_7 for task 7 of array 12")
    if not sep:
        return int(head), False
    for job in client.array_tasks(int(head)):
        if job.get("array_task") == int(task):
            return job["id"], True
    raise UsageProblem(f"array {head} has no task {task}; `nanum ps --expand` lists its tasks")


def each(ids: list[str], server: str | None, token: str | None, action: str, done: str) -> None:
    """Run `action` on every ID; report each; exit with the worst failure's code."""
    from nanum.cli.common import exit_code_for_status
    from nanum.client import ApiError

    worst = 0
    with connect(server, token) as client:
        for text in ids:
            try:
                job_id, one = resolve(client, text)
                getattr(client, action)(job_id, one=one)
            except ApiError as exc:
                named = f"job {text}" in exc.detail  # "no job 9999" needs no "job 9999: " before it
                sys.stderr.write(f"nanum: error: {exc.detail if named else f'job {text}: {exc.detail}'}\n")
                worst = max(worst, exit_code_for_status(exc.status))
                continue
            print(f"{done} job {text}")
    raise typer.Exit(worst)


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
def top(job_id: IdArg, server: ServerOpt = None, token: TokenOpt = None) -> None:
    """Move a waiting job before your other waiting jobs."""
    with connect(server, token) as client:
        client.top(resolve(client, job_id)[0])
    print(f"Moved job {job_id} before your other waiting jobs")


@app.command(cls=Command)
@clean_errors
def requeue(job_id: IdArg, server: ServerOpt = None, token: TokenOpt = None) -> None:
    """Queue a job again: a running one is stopped first, an ended one runs again as submitted."""
    with connect(server, token) as client:
        client.requeue(resolve(client, job_id)[0])
    print(f"Requeued job {job_id}")


@app.command(cls=Command)
@clean_errors
def modify(
    job_id: IdArg,
    time: Annotated[str | None, _Opt("--time", "-t", metavar="DURATION", help="New time limit: 30m, 4h, 1:30:00.")]
    = None,
    gpus: Annotated[int | None, _Opt("--gpus", "-g", metavar="N", help="New GPUs per node.")] = None,
    priority: Annotated[int | None, _Opt("--priority", metavar="P", help="New priority, 0..100.")] = None,
    lab: Annotated[str | None, _Opt("--lab", metavar="LAB", help="Charge another lab.")] = None,
    name: Annotated[str | None, _Opt("--name", "-J", metavar="NAME", help="New name.")] = None,
    server: ServerOpt = None,
    token: TokenOpt = None,
) -> None:
    """Change a job while it waits (pending or held): yours within your limits, anyone's as an admin."""
    from nanum.cli.jobspec import parse_time

    changes = {"time_limit_s": parse_time(time) if time is not None else None, "gpus": gpus, "priority": priority,
               "lab": lab, "name": name}
    changes = {k: v for k, v in changes.items() if v is not None}
    if not changes:
        raise UsageProblem("nothing to change; give --time, --gpus, --priority, --lab or --name")
    with connect(server, token) as client:
        job_id_, _ = resolve(client, job_id)
        client.modify(job_id_, **changes)
    print(f"Modified job {job_id}: " + ", ".join(f"{k}={v}" for k, v in changes.items()))


OPTION = {"started": "--after", "ok": "--after-ok", "failed": "--after-failed", "any": "--after-any"}


def chain(client: Client, job: dict[str, object], depth: int = 0, seen: set[int] | None = None) -> list[str]:
    """The jobs `job` waits for, and theirs in turn, one line each, indented by depth:
    `--after-ok 12: job 12 prep (completed)`."""
    from nanum.client import ApiError

    seen = seen if seen is not None else set()
    lines: list[str] = []
    for kind, target in job.get("after") or ():  # type: ignore[attr-defined]
        head, _, task = str(target).partition("_")
        try:
            found = client.job(int(head))
        except ApiError:  # a job gone from the store: say so, keep listing
            lines.append(f"{'  ' * depth}{OPTION.get(kind, kind)} {target}: not found")
            continue
        lines.append(f"{'  ' * depth}{OPTION.get(kind, kind)} {target}: {_described(client, found, task)}")
        if found["id"] not in seen and depth < 8:
            seen.add(found["id"])
            lines += chain(client, found, depth + 1, seen)  # type: ignore[arg-type]
    return lines


def _described(client: Client, job: dict[str, object], task: str) -> str:
    if job.get("array_id") is None:
        return f"job {job['id']} {job['name']} ({job['state']})"
    tasks = client.array_tasks(int(job["array_id"]))  # type: ignore[call-overload]
    if task:
        tasks = [t for t in tasks if str(t.get("array_task")) == task]
    counts: dict[str, int] = {}
    for t in tasks:
        counts[t["state"]] = counts.get(t["state"], 0) + 1
    states = ", ".join(f"{n} {s}" for s, n in counts.items())
    return f"array {job['array_id']} {job['name']} ({states})"
