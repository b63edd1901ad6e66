"""The bodies of `nanum submit`, `ps`, `show` and `cancel`, and of resolving `ID` / `ID_TASK`: plain functions
that import neither click nor Typer, called by the Typer commands (`nanum.cli.jobs`) and by the quick path
(`nanum.cli.fast`) alike."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, cast

from nanum.cli.base import UsageProblem, clean_errors, connect, note, print_json
from nanum.units import all_digits

if TYPE_CHECKING:
    from nanum.cli.jobspec import SubmitOptions
    from nanum.client import Client

#: `--tier` of `nanum submit` and `nanum modify`.
TIER_HELP = ("Admins only: tier 0..9 (default: 0). Every queue order puts a higher tier first; the order, and "
             "then --priority among one user's jobs, decide inside a tier.")


@clean_errors
def submit(command: list[str] | None = None, json: bool = False, server: str | None = None, token: str | None = None,
           **given: Any) -> None:
    """Queue a job: `nanum submit --gpus 2 --time 4h -- python train.py`, or `nanum submit train.sh` (its
    #NANUM lines take these options; #SBATCH and #BSUB lines are read too). `given`: the options of its command
    line (`submit_options`)."""
    import os

    from nanum.cli.jobspec import build_request

    options = submit_options(**given)
    notes: list[str] = []
    body = build_request(list(command or []), options, os.getcwd(), notes)
    for line in notes:
        note(line)
    with connect(server, token) as client:
        job = client.submit(body.pop("command"), **body)
    if json:
        print_json(job)
    elif job.get("array_id") is not None:
        print(f"Submitted array job {job['array_id']} ({options.get('array') or 'from the script'})")
    else:
        print(f"Submitted job {job['id']}")


def submit_options(
    gpus: int | None = None, nodes: int | None = None, gpu_model: str | None = None, gpu_mem: str | None = None,
    constraint: list[str] | None = None, torchrun: bool = False, cpus: int | None = None, mem: str | None = None,
    time: str | None = None, priority: int | None = None, tier: int | None = None, lab: str | None = None,
    name: str | None = None, workdir: str | None = None, env: list[str] | None = None, no_preempt: bool = False,
    hold: bool = False, requeue: bool = False, no_requeue: bool = False, array: str | None = None,
    after: list[str] | None = None, after_ok: list[str] | None = None, after_failed: list[str] | None = None,
    after_any: list[str] | None = None,
    keep_if_unmet: bool = False, retries: int | None = None, output: str | None = None, error: str | None = None,
    environment: str | None = None, dataset: list[str] | None = None,
) -> SubmitOptions:
    """The options of `nanum submit`'s command line, each read as a `#NANUM` line reads it; `nanum run`, `shell`
    and `notebook` give those they take."""
    from nanum.cli.jobspec import (
        HEADER_OPTIONS,
        SubmitOptions,
        parse_env,
        parse_label,
        parse_mem,
        parse_name,
        parse_time,
    )

    if requeue and no_requeue:
        raise UsageProblem("--requeue and --no-requeue contradict each other; give one of them")

    def refs(values: list[str] | None, option: str) -> list[str] | None:
        return [r for v in values for r in HEADER_OPTIONS[option][1](v)] if values else None

    return SubmitOptions(
        gpus=gpus, nodes=nodes, cpus=cpus,
        gpu_model=HEADER_OPTIONS["--gpu-model"][1](gpu_model) if gpu_model is not None else None,
        gpu_memory_mb=parse_mem(gpu_mem, "--gpu-mem") if gpu_mem is not None else None,
        constraints=[parse_label(c) for c in constraint] if constraint else None,
        torchrun=True if torchrun else None, priority=priority, lab=lab, name=name,
        tier=HEADER_OPTIONS["--tier"][1](str(tier)) if tier is not None else None,
        workdir=workdir, memory_mb=parse_mem(mem) if mem is not None else None,
        time_limit_s=parse_time(time) if time is not None else None, env=parse_env(env or []),
        preemptible=False if no_preempt else None, hold=True if hold else None,
        requeue=False if no_requeue else True if requeue else None,
        array=HEADER_OPTIONS["--array"][1](array) if array is not None else None,
        after=refs(after, "--after"), after_ok=refs(after_ok, "--after-ok"),
        after_failed=refs(after_failed, "--after-failed"), after_any=refs(after_any, "--after-any"),
        keep_if_unmet=True if keep_if_unmet else None,
        retries=HEADER_OPTIONS["--retries"][1](str(retries)) if retries is not None else None,
        output=output, error=error,
        environment=parse_name(environment, "--environment") if environment is not None else None,
        datasets=[parse_name(d, "--dataset") for d in dataset] if dataset else None,
    )

@clean_errors
def ps(
    all: bool = False, user: str | None = None, lab: str | None = None, state: list[str] | None = None,
    expand: bool = False, format: str | None = None, fields: str | None = None, noheader: bool = False,
    limit: int | None = None, json: bool = False, server: str | None = None, token: str | None = None,
) -> None:
    """The queue: running and waiting jobs of everyone (why they wait, when they should start)."""
    from nanum.cli import psformat
    from nanum.client._objects import ACTIVE_STATES
    from nanum.server.limits import FINISHED_SHOWN, MAX_FINISHED_SHOWN

    names = psformat.fields_from_format(format) if format else psformat.fields_from_list(fields) if fields else None
    with connect(server, token) as client:
        jobs = client.jobs(all=all, user=user, lab=lab, state=state, limit=limit)
    latest = limit or FINISHED_SHOWN
    if sum(job["state"] not in ACTIVE_STATES for job in jobs) >= latest:
        note(f"Finished jobs: the latest {latest:,} {'is' if latest == 1 else 'are'} listed; `--limit N` lists more "
             f"(at most {MAX_FINISHED_SHOWN:,}).")
    if json:
        print_json(jobs)
        return
    if not jobs:
        if not noheader:
            note("No jobs." if all or state else "No active jobs (`nanum ps --all` shows finished ones).")
        return
    from datetime import UTC, datetime

    from nanum.cli.views import BORROW_MARK, PS_COLUMNS, budget_captions, print_table

    now = datetime.now(UTC)
    listed = cast("list[dict[str, Any]]", jobs)
    shown = listed if expand else psformat.fold(listed)
    if names is not None:
        print_table(psformat.headers(names), psformat.rows(shown, names, now), wide="REASON", header=not noheader)
        return
    rows = psformat.default_rows(shown, now)
    borrowing = any(row[4].endswith(BORROW_MARK) for row in rows)
    captions = [f"{BORROW_MARK} borrowing idle GPUs: preempted first when their lab needs them"] if borrowing else []
    captions += budget_captions(jobs)  # type: ignore[arg-type]
    print_table(PS_COLUMNS, rows, caption=None if noheader else "\n".join(captions) or None, wide="REASON",
                header=not noheader)


@clean_errors
def show(job_id: str, json: bool = False, server: str | None = None, token: str | None = None) -> None:
    """Everything about one job."""
    with connect(server, token) as client:
        job = client.job(resolve(client, job_id)[0])
        waits = chain(client, job) if job.get("after") and not json else []
    if json:
        print_json(job)
        return
    from nanum.cli.views import printable, show_lines

    lines = show_lines(job)  # type: ignore[arg-type]
    lines += [("waits for" if i == 0 else "", printable(line)) for i, line in enumerate(waits)]
    width = max(len(k) for k, _ in lines)
    sys.stdout.write("".join(f"{k + ':' if k else '':<{width + 1}} {v}\n" for k, v in lines))


@clean_errors
def cancel(job_ids: list[str], server: str | None = None, token: str | None = None) -> None:
    """Cancel jobs (yours, or anyone's as an admin); running ones are stopped."""
    each(job_ids, server, token, "cancel", "Cancelled")


def parse_ref(text: str) -> tuple[int, int | None]:
    """'12' -> (12, None); '12_7' -> (12, 7); anything else is refused, naming the forms taken."""
    head, sep, task = text.partition("_")
    if not all_digits(head) or (sep and not all_digits(task)):
        raise UsageProblem(f"{text!r} is not a job ID; give a number such as 12, or 12_7 for task 7 of array 12")
    return int(head), int(task) if sep else None


def resolve(client: Client, text: str) -> tuple[int, bool]:
    """'12' -> (12, False): the job, or every task of array 12; '12_7' -> (task 7's job id, True)."""
    head, task = parse_ref(text)
    if task is None:
        return head, False
    for job in client.array_tasks(head):
        if job.get("array_task") == task:
            return job["id"], True
    raise UsageProblem(f"array {head} has no task {task}; `nanum ps --expand` lists its tasks")


def each(ids: list[str], server: str | None, token: str | None, action: str, done: str, after: str = "") -> None:
    """Run `action` on every ID; report each (`{done} job 12{after}`); exit with the worst failure's code."""
    from nanum.cli.base import exit_code_for_status
    from nanum.client import ApiError
    from nanum.jobref import job_ref

    worst = 0
    with connect(server, token) as client:
        for text in ids:
            try:
                job_id, one = resolve(client, text)
                acted = getattr(client, action)(job_id, one=one)
            except ApiError as exc:
                named = f"job {text}" in exc.detail  # "no job 9999" needs no "job 9999: " before it
                sys.stderr.write(f"nanum: error: {exc.detail if named else f'job {text}: {exc.detail}'}\n")
                worst = max(worst, exit_code_for_status(exc.status))
                continue
            whole = not one and acted.get("array_id") == job_id  # an array's id: every task (not ended)
            print(f"{done} array {text}{after}" if whole else f"{done} job {job_ref(acted)}{after}")
    raise SystemExit(worst)


OPTION = {"started": "--after", "ok": "--after-ok", "failed": "--after-failed", "any": "--after-any"}


def chain(client: Client, job: Mapping[str, Any], depth: int = 0, seen: set[int] | None = None) -> list[str]:
    """The jobs `job` waits for, and theirs in turn, one line each, indented by depth:
    `--after-ok 12: job 12 prep (completed)`."""
    from nanum.client import ApiError

    seen = seen if seen is not None else set()
    lines: list[str] = []
    for kind, target in job.get("after") or ():
        head, _, task = str(target).partition("_")
        try:
            found = client.job(int(head))
        except ApiError:  # a job gone from the store: say so, keep listing
            lines.append(f"{'  ' * depth}{OPTION.get(kind, kind)} {target}: not found")
            continue
        lines.append(f"{'  ' * depth}{OPTION.get(kind, kind)} {target}: {_described(client, found, task)}")
        if found["id"] not in seen and depth < 8:
            seen.add(found["id"])
            lines += chain(client, found, depth + 1, seen)
    return lines


def _described(client: Client, job: Mapping[str, Any], task: str) -> str:
    if job.get("array_id") is None:
        return f"job {job['id']} {job['name']} ({job['state']})"
    tasks = client.array_tasks(int(job["array_id"]))
    if task:
        one = [t for t in tasks if str(t.get("array_task")) == task]
        state = one[0]["state"] if one else "not found"
        return f"task {job['array_id']}_{task} of array {job['array_id']} {job['name']} ({state})"
    counts: dict[str, int] = {}
    for t in tasks:
        counts[t["state"]] = counts.get(t["state"], 0) + 1
    states = ", ".join(f"{n} {s}" for s, n in counts.items())
    return f"array {job['array_id']} {job['name']} ({states})"
