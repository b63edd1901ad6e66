"""`nanum report`: plan the cluster from its own history.

`nanum report capacity` replays the history (the server's, or any trace and cluster file) on the cluster scaled
and extended and gives one verdict: short, adequate or over-supplied (`nanum.sim.capacity`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import typer

from nanum.cli.app import app
from nanum.cli.common import ServerOpt, TokenOpt, clean_errors, connect, fail

report_app = typer.Typer(help="Reports for planning: capacity verdicts by replay, usage.", no_args_is_help=True)
app.add_typer(report_app, name="report")

#: nanum.core.policy.DEFAULT_POLICY (see nanum.cli.sim).
DEFAULT_POLICY = "gittins+binpack+backfill+preempt"


@report_app.command("capacity")
@clean_errors
def capacity(
    since: str | None = typer.Option(None, "--since", help="The server's history from this date or time (UTC), or "
                                     "this long ago: 90d, 12h, 2w (default 90d when no --trace)."),
    trace: Path | None = typer.Option(None, "--trace", "-t", help="A normalised trace instead of the server's "
                                      "history (with --cluster)."),
    cluster: str | None = typer.Option(None, "--cluster", "-c", help="The cluster of --trace: NxG[:MODEL] or a TOML "
                                       "cluster file."),
    scale: str = typer.Option("0.5,0.75,1,1.25,1.5", "--scale", help="Factors on every node group's node count."),
    add: list[str] = typer.Option([], "--add", help="Nodes to add, one after the other: 8xH100 (one node of 8 "
                                  "H100), 2x8xH100 (two); repeatable."),
    target: str = typer.Option("p95 wait < 1h", "--target", help="What a good cluster achieves: avg|p50|p90|p95|p99 "
                               "wait < DURATION."),
    policy: str | None = typer.Option(None, "--policy", "-p", help="Policy of the replays (default: the server's "
                                      f"policy for its history, else {DEFAULT_POLICY})."),
    as_json: bool = typer.Option(False, "--json", help="Print the options and the verdict as JSON."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress bar."),
    server: ServerOpt = None,
    token: TokenOpt = None,
) -> None:
    """Replay the history on the cluster scaled and extended: average and p95 wait, utilisation and idle GPU-hours
    per option, whether the target holds, and one verdict (short, adequate, over-supplied)."""
    from nanum.sim import ClusterError, TraceError
    from nanum.sim import capacity as cap

    try:
        goal = cap.parse_target(target)
        scales = cap.parse_scales(scale)
        added = [cap.parse_add(a) for a in add]
        jobs, spec, policy_text, source = _history(since, trace, cluster, policy, server, token)
        cap.options(spec, scales, added)  # each a cluster the simulator takes, before any replay
        from nanum.core import Policy, PolicyError

        try:
            Policy.parse(policy_text)
        except PolicyError as e:
            fail(f"--policy: {e}", 2)
    except (ValueError, TraceError, ClusterError) as e:
        fail(str(e), 2)
    if not jobs:
        fail(f"{source} has no jobs to replay; widen --since or give a --trace with jobs", 2)
    outcomes = _replay_all(jobs, spec, scales, added, policy_text, goal, quiet)
    found = cap.verdict(outcomes)
    if as_json:
        typer.echo(json.dumps({"source": source, "cluster": spec.name, "gpus": spec.total_gpus, "jobs": len(jobs),
                               "policy": policy_text, "target": goal.text,
                               "options": [o.as_dict() for o in outcomes], "verdict": found.kind,
                               "verdict_text": found.text, "gpus_change": found.gpus,
                               "smallest_meeting": None if found.smallest is None else found.smallest.option.label},
                              indent=2))
        return
    _print_capacity(outcomes, found, goal, f"{source}: {len(jobs):,} jobs on {spec.name} ({spec.total_gpus:,} GPUs), "
                    f"{policy_text}")


def _history(since: str | None, trace: Path | None, cluster: str | None, policy: str | None,
             server: str | None, token: str | None) -> tuple[list[Any], Any, str, str]:
    """The jobs, cluster spec, policy and a name for where they came from."""
    from nanum.sim import parse_cluster, read_trace
    from nanum.sim.cluster import cluster_from_dict
    from nanum.sim.history import trace_jobs, when

    if trace is not None or cluster is not None:
        if since is not None:
            raise ValueError("give either --since (the server's history) or --trace with --cluster, not both")
        if trace is None or cluster is None:
            raise ValueError("--trace and --cluster go together; e.g. --trace history.csv.gz --cluster history.toml")
        jobs, _ = read_trace(trace)
        return jobs, parse_cluster(cluster), policy or DEFAULT_POLICY, trace.name
    with connect(server, token) as client:
        answer = client.trace(since=when(since or "90d"))
    spec = cluster_from_dict(answer["cluster"])
    if not spec.groups:
        raise ValueError("the server has no nodes with GPUs to replay on; add a node, or give --trace and --cluster")
    return trace_jobs(answer["jobs"]), spec, policy or answer["policy"], f"history since {since or '90d'}"


def _replay_all(jobs: list[Any], spec: Any, scales: Any, added: Any, policy_text: str, goal: Any,
                quiet: bool) -> list[Any]:
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    from nanum.sim import capacity as cap

    console = Console(stderr=True)
    if quiet or not console.is_terminal:
        return cap.search(spec, scales, added, lambda o: cap.replay(jobs, o, policy_text, goal))
    columns = (TextColumn("[bold]{task.description}"), BarColumn(),
               TextColumn("{task.completed:,}/{task.total:,} jobs"), TimeElapsedColumn())
    count = len(cap.options(spec, scales, added))
    with Progress(*columns, console=console, transient=True) as bar:
        task = bar.add_task("replaying", total=len(jobs) * count)
        runs = [0]

        def run(option: Any) -> Any:
            base = runs[0] * len(jobs)
            runs[0] += 1
            bar.update(task, description=f"replaying {option.label}", total=max(len(jobs) * max(runs[0], count),
                                                                                   base + len(jobs)))
            return cap.replay(jobs, option, policy_text, goal, lambda done, _t: bar.update(task, completed=base + done))

        return cap.search(spec, scales, added, run)


def _print_capacity(outcomes: list[Any], found: Any, goal: Any, title: str) -> None:
    from nanum.cli.views import print_table

    rows = [(o.option.label, f"{o.gpus:,}", _dur(o.avg_wait_s), _dur(o.p95_wait_s), f"{100 * o.utilisation:.1f}%",
             f"{o.idle_gpu_hours:,.1f}", ("yes" if o.meets else "no") + (f" ({o.never_run:,} never run)"
                                                                         if o.never_run else ""))
            for o in outcomes]
    typer.echo(title)
    print_table(("OPTION", "GPUS", "AVG WAIT", "P95 WAIT", "UTILISATION", "IDLE GPU-H", f"{goal.text.upper()}"), rows)
    if found.smallest is not None:
        typer.echo(f"smallest option meeting {goal.text}: {found.smallest.option.label} "
                   f"({found.smallest.gpus:,} GPUs)")
    typer.echo(f"verdict: {found.text}")


def _dur(seconds: float) -> str:
    if seconds < 60:
        return f"{seconds:.0f}s"
    if seconds < 3600:
        return f"{seconds / 60:.1f}m"
    if seconds < 86400:
        return f"{seconds / 3600:.1f}h"
    return f"{seconds / 86400:.1f}d"


@report_app.command("usage")
@clean_errors
def usage_report(
    since: str | None = typer.Option(None, "--since", help="From this date or time (UTC), or this long ago: 90d, "
                                     "2w (default: this month)."),
    until: str | None = typer.Option(None, "--until", help="Up to this date (included) or time, or this long ago."),
    by: str = typer.Option("lab", "--by", help="Rows by lab, user, gpu-model, day or week."),
    fmt: str = typer.Option("table", "--format", "-f", help="table, csv, json or html (one self-contained file "
                            "with charts)."),
    output: Path | None = typer.Option(None, "--output", "-o", help="Write to this file instead of the terminal."),
    server: ServerOpt = None,
    token: TokenOpt = None,
) -> None:
    """GPU-hours used against available, allocation against measured GPU utilisation, GPU-hours held while idle,
    waits p50/p95 by lab, work lost to preemption, top users and budget use."""
    from nanum.sim.history import when

    if by not in ("lab", "user", "gpu-model", "day", "week"):
        fail(f"--by: {by!r} is not one of lab, user, gpu-model, day, week", 2)
    if fmt not in ("table", "csv", "json", "html"):
        fail(f"--format: {fmt!r} is not one of table, csv, json, html", 2)
    with connect(server, token) as client:
        report = client.usage_report(since=when(since), until=when(until), by=by)
    from nanum import usage_report as v

    if fmt == "table" and output is None:
        from nanum.cli.views import print_table

        typer.echo(v.title(report))
        typer.echo(v.headline(report))
        print_table(v.headers(by), v.rows(report))
        if by != "lab":
            typer.echo("labs:")
            print_table(v.headers("lab"), v.rows(report, "labs"))
        return
    text = {"csv": v.to_csv, "html": v.to_html}.get(fmt, lambda r: json.dumps(r, indent=2) + "\n")(report)
    if fmt == "table":
        text = "\n".join([v.title(report), v.headline(report), *("  ".join(r) for r in v.rows(report))]) + "\n"
    if output is None:
        typer.echo(text, nl=False)
        return
    try:
        output.write_text(text, encoding="utf-8")
    except OSError as e:
        fail(f"cannot write {output}: {e.strerror or e}; choose a writable path with -o", 2)
    typer.echo(f"wrote {output}")


@report_app.command("predictions")
@clean_errors
def predictions(
    since: str | None = typer.Option(None, "--since", help="The server's history from this date or time (UTC), or "
                                     "this long ago: 90d, 2w (default: all, when no --trace)."),
    trace: Path | None = typer.Option(None, "--trace", "-t", help="A normalised trace instead of the server's "
                                      "history."),
    as_json: bool = typer.Option(False, "--json", help="Print the figures as JSON."),
    server: ServerOpt = None,
    token: TokenOpt = None,
) -> None:
    """Measure the run-time predictor behind the default policy by an online replay (each job predicted from the
    jobs finished before it was submitted): median absolute error, share within 2x, and the shares whose relative
    error is at most 10/50/100/1000%, beside the users' time limits."""
    from nanum.sim.predictions import evaluate

    jobs, source = _jobs(trace, since, None, server, token, finished=True)
    if not jobs:
        fail(f"{source} has no finished jobs to measure predictions on; widen --since or give a --trace", 2)
    found = [a.as_dict() for a in evaluate(jobs)]
    if as_json:
        typer.echo(json.dumps({"source": source, "jobs": len(jobs), "estimators": found}, indent=2))
        return
    from nanum.cli.views import print_table

    typer.echo(f"{source}: {len(jobs):,} jobs, each predicted from the jobs finished before its submission")
    bands = ("10%", "50%", "100%", "1000%")
    print_table(("ESTIMATOR", "COVERED", "MEDIAN ABS ERROR", "WITHIN 2X", "MEDIAN EST/TRUE",
                 *(f"ERR<={b}" for b in bands)), [
        (a["estimator"], f"{a['covered']:,} ({a['covered_percent'] or 0:.1f}%)",
         "-" if a["median_abs_error_s"] is None else _dur(a["median_abs_error_s"]),
         "-" if a["within_2x_percent"] is None else f"{a['within_2x_percent']:.1f}%",
         "-" if a["median_ratio"] is None else f"{a['median_ratio']:.2f}",
         *("-" if a["error_within"] is None else f"{a['error_within'][b]:.1f}%" for b in bands)) for a in found])


@report_app.command("forecast")
@clean_errors
def forecast_report(
    since: str | None = typer.Option(None, "--since", help="The server's history from this date or time (UTC), or "
                                     "this long ago (default: 90d, when no --trace)."),
    trace: Path | None = typer.Option(None, "--trace", "-t", help="A normalised trace instead of the server's "
                                      "history."),
    weeks: int = typer.Option(8, "--weeks", min=1, max=12, help="Weeks to forecast (1-12)."),
    as_json: bool = typer.Option(False, "--json", help="Print the forecast as JSON."),
    server: ServerOpt = None,
    token: TokenOpt = None,
) -> None:
    """GPU-hours demanded per week, for all labs and each lab, for the coming weeks (Holt-Winters: trend and
    weekly seasonality), with the back-tested error of the last 4 weeks beside a naive forecast's."""
    from nanum.sim.forecast import forecast

    jobs, source = _jobs(trace, since, "90d", server, token, finished=False)
    if not jobs:
        fail(f"{source} has no jobs to forecast from; widen --since or give a --trace", 2)
    found = [f.as_dict() for f in forecast(jobs, weeks)]
    if as_json:
        typer.echo(json.dumps({"source": source, "jobs": len(jobs), "forecasts": found}, indent=2))
        return
    from nanum.cli.views import print_table

    typer.echo(f"{source}: GPU-hours demanded per week (GPUs x run time, by submission day)")
    print_table(("LAB", "LAST WEEK", *(f"W+{i + 1}" for i in range(weeks)), "BACK-TEST ERROR", "NAIVE"), [
        (f["lab"], f"{f['last_week_gpu_hours']:,.0f}", *(f"{w:,.0f}" for w in f["weekly_gpu_hours"]),
         "-" if f["backtest_wape_percent"] is None else f"{f['backtest_wape_percent']:.0f}% ({f['backtest_weeks']}w)",
         "-" if f["naive_wape_percent"] is None else f"{f['naive_wape_percent']:.0f}%") for f in found])


def _jobs(trace: Path | None, since: str | None, default_since: str | None, server: str | None, token: str | None,
          *, finished: bool) -> tuple[list[Any], str]:
    """The jobs of `trace`, or of the server's history since `since` (or `default_since`; `finished`: only jobs
    that ended), and a name for where they came from."""
    from nanum.sim import TraceError, read_trace
    from nanum.sim.history import trace_jobs, when

    if trace is not None and since is not None:
        fail("give either --since (the server's history) or --trace, not both", 2)
    if trace is not None:
        try:
            jobs, _ = read_trace(trace)
        except TraceError as e:
            fail(str(e), 2)
        return list(jobs), trace.name
    since = since or default_since
    with connect(server, token) as client:
        rows = client.trace(since=when(since))["jobs"]
    return trace_jobs(r for r in rows if not finished or r["status"] != "running"), (
        "history" + (f" since {since}" if since else ""))
