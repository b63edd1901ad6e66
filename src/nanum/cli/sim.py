"""`nanum trace import` and `nanum sim`: turn public traces into nanum's format and replay them through the core."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import typer

from nanum.cli.app import app
from nanum.cli.common import ServerOpt, TokenOpt, clean_errors, connect, fail

#: nanum.core.policy.DEFAULT_POLICY, spelled out so that `nanum` starts without importing the core (a test pins it).
DEFAULT_POLICY = "gittins+binpack+backfill+preempt"

trace_app = typer.Typer(help="Import public GPU-cluster traces into nanum's trace format.", no_args_is_help=True)
sim_app = typer.Typer(help="Replay a trace through nanum's scheduler on a simulated cluster.",
                      invoke_without_command=True)
app.add_typer(trace_app, name="trace")
app.add_typer(sim_app, name="sim")


def _fail(message: str, code: int = 2) -> None:
    """One `nanum: error:` line, as every other command: exit 2 for a bad input, 1 for a run found unsound."""
    fail(message, code)


def _err(line: str) -> None:
    typer.echo(line, err=True)


@trace_app.command("import")
@clean_errors
def trace_import(
    raw: Path = typer.Argument(..., help="Raw trace file (or a directory of Gavel per-VC traces)."),
    fmt: str = typer.Option(..., "--format", "-f", help="philly-pollux, microsoft-itp, alibaba-openb, gavel, "
                                                      "tiresias or nanum."),
    output: Path = typer.Option(..., "--output", "-o", help="Normalised trace to write (.csv or .csv.gz)."),
    nodes: Path | None = typer.Option(None, "--nodes", help="alibaba-openb: node list; also writes a cluster file."),
    cluster_out: Path | None = typer.Option(None, "--cluster-out", help="Where --nodes writes the cluster file "
                                            "(default: beside the output, .toml)."),
    throughputs: Path | None = typer.Option(None, "--throughputs", help="gavel: Gavel's throughput JSON."),
    worker: str = typer.Option("v100", "--worker", help="gavel: worker type whose throughputs set run times."),
    lab: str = typer.Option("", "--lab", help="Lab for traces that name none (e.g. microsoft-itp)."),
    since: str | None = typer.Option(None, "--since", help="Keep jobs submitted at or after this time "
                                     "(2017-10-01T00:00:00 UTC, or seconds)."),
    until: str | None = typer.Option(None, "--until", help="Keep jobs submitted at or before this time."),
    labs: str | None = typer.Option(None, "--labs", help="Keep only these labs (comma-separated), or the labs "
                                    "that own nodes in a cluster TOML file."),
    as_json: bool = typer.Option(False, "--json", help="Print the import report as JSON."),
) -> None:
    """Convert a raw public trace into nanum's normalised trace; every skipped row is reported with its reason."""
    from nanum.sim import ClusterError, Filter, ImportOptions, TraceError, import_trace, write_trace
    from nanum.sim.importers import parse_time

    try:
        keep = Filter(since=None if since is None else parse_time(since),
                      until=None if until is None else parse_time(until), labs=_labs(labs))
        jobs, report = import_trace(fmt, raw, ImportOptions(lab=lab, nodes=nodes, throughputs=throughputs,
                                                            worker=worker), keep)
        written = write_trace(jobs, output)
        spec_path = _write_openb_cluster(nodes, cluster_out, output) if nodes is not None else None
    except (TraceError, ClusterError, ValueError, OSError) as e:
        _fail(str(e))
        return
    if as_json:
        typer.echo(json.dumps({
            "source": report.source, "rows": report.rows, "imported": written, "skipped": len(report.problems),
            "reasons": dict(report.reasons()), "notes": dict(report.notes),
            "skipped_lines": [[p.line, p.why] for p in report.problems[:1000]],
            "output": str(output), "cluster": None if spec_path is None else str(spec_path),
        }, indent=2))
        return
    for line in report.summary_lines():
        typer.echo(line)
    typer.echo(f"wrote {written:,} jobs to {output}" + (f" and the cluster to {spec_path}" if spec_path else ""))


@trace_app.command("export")
@clean_errors
def trace_export(
    output: Path = typer.Option(..., "--output", "-o", help="Trace to write (.csv or .csv.gz); the cluster file "
                                "goes beside it (.toml)."),
    since: str | None = typer.Option(None, "--since", help="Jobs submitted from this date or time (UTC), or this "
                                     "long ago: 90d, 12h, 2w (default: all)."),
    until: str | None = typer.Option(None, "--until", help="Jobs submitted before this date or time, or this long "
                                     "ago."),
    server: ServerOpt = None,
    token: TokenOpt = None,
) -> None:
    """Write the server's finished and running jobs as a normalised trace, with the cluster (nodes, models, labs,
    quotas) as a cluster file beside it, so that `nanum sim` replays the history unchanged."""
    from nanum.sim.history import export, when

    with connect(server, token) as client:
        answer = client.trace(since=when(since), until=when(until))
    try:
        written, cluster = export(answer, output)
    except OSError as e:
        _fail(f"cannot write {output}: {e.strerror or e}; choose a writable path with -o")
        return
    skipped = "; ".join(f"{n} left out: {why}" for why, n in answer.get("skipped", {}).items())
    left = f" ({skipped})" if skipped else ""
    typer.echo(f"wrote {written:,} jobs to {output} and the cluster to {cluster}{left}")
    typer.echo(f"replay: nanum sim --trace {output} --cluster {cluster} --policy {answer['policy']} --out run")


def _labs(text: str | None) -> frozenset[str] | None:
    if text is None:
        return None
    if text.endswith(".toml"):
        from nanum.sim import parse_cluster

        return frozenset(parse_cluster(text).owned_gpus())
    return frozenset(x.strip() for x in text.split(",") if x.strip())


def _write_openb_cluster(nodes: Path, cluster_out: Path | None, output: Path) -> Path:
    from nanum.sim.cluster import to_toml
    from nanum.sim.openb import openb_cluster

    spec = openb_cluster(nodes)
    stem = output.name.removesuffix(".gz").removesuffix(".csv")
    path = cluster_out or output.with_name(f"{stem}.toml")
    path.write_text(to_toml(spec, f"GPU nodes of {nodes.name} (Alibaba GPU v2023), grouped by shape."))
    return path


@sim_app.callback()
def sim(
    ctx: typer.Context,
    trace: Path | None = typer.Option(None, "--trace", "-t", help="Normalised trace (nanum trace import)."),
    cluster: str | None = typer.Option(None, "--cluster", "-c", help="NxG[:MODEL] (e.g. 16x8:A100) or a TOML "
                                       "cluster file."),
    policy: str | None = typer.Option(None, "--policy", "-p", help="ORDER[+PLACEMENT][+backfill|+nobackfill], "
                                      f"e.g. las+binpack+backfill (default: {DEFAULT_POLICY}, as `nanum up`)."),
    out: Path | None = typer.Option(None, "--out", "-o", help="Output directory."),
    compare: str | None = typer.Option(None, "--compare", help="Several policies, comma-separated: one run "
                                       "each (in OUT/<policy>/), one table."),
    as_json: bool = typer.Option(False, "--json", help="Print the summaries as JSON."),
    restart_cost: float = typer.Option(60.0, "--restart-cost", help="Seconds a preempted job needs to restart."),
    checkpoint_interval: float = typer.Option(1800.0, "--checkpoint-interval", help="Seconds of work between "
                                              "checkpoints (0: none; a preempted job loses all its run)."),
    predictor: str = typer.Option("history", "--predictor", help="history (learned online), none, or oracle "
                                  "(true run times; a reference only)."),
    plots: bool = typer.Option(True, "--plots/--no-plots", help="Write PNG plots."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress bar."),
) -> None:
    """Replay TRACE on CLUSTER under POLICY (or each of --compare) and write jobs.csv, allocations.csv,
    summary.json and plots to OUT. `nanum sim check OUT` verifies a run."""
    if ctx.invoked_subcommand is not None:
        return
    missing = [name for name, v in (("--trace", trace), ("--cluster", cluster), ("--out", out)) if v is None]
    if missing:
        _fail(f"missing {', '.join(missing)}; e.g. nanum sim --trace t.csv.gz --cluster 8x8 --out run")
    if policy is None and compare is None:
        policy = DEFAULT_POLICY
    assert trace is not None and cluster is not None and out is not None
    policies = ([policy] if policy else []) + [p.strip() for p in (compare or "").split(",") if p.strip()]
    summaries = _run_all(trace, cluster, policies, out, compare is not None, as_json, quiet, plots,
                         {"restart_cost": restart_cost, "checkpoint_interval": checkpoint_interval,
                          "predictor": predictor})
    if as_json:
        typer.echo(json.dumps(summaries if compare else summaries[0], indent=2))


def _run_all(trace: Path, cluster_text: str, policies: list[str], out: Path, many: bool, as_json: bool,
             quiet: bool, plots: bool, options: dict[str, Any]) -> list[dict[str, Any]]:
    from rich.console import Console

    from nanum.core import Policy, PolicyError
    from nanum.sim import ClusterError, SimOptions, TraceError, parse_cluster, read_trace
    from nanum.sim.report import compare_table

    try:
        spec = parse_cluster(cluster_text)
        parsed = [(text, Policy.parse(text, lend=spec.lend, reclaim=spec.reclaim)) for text in policies]
        sim_options = SimOptions(**options)
        jobs, report = read_trace(trace)
    except (TraceError, ClusterError, PolicyError, ValueError) as e:
        _fail(str(e))
        raise AssertionError from None
    if report.problems:
        for line in report.summary_lines():
            _err(line)
    console = Console(stderr=True)
    summaries = []
    for text, pol in parsed:
        where = out / _slug(text) if many else out
        summaries.append(_run_one(jobs, spec, pol, sim_options, text, trace, where, plots,
                                  show=not quiet and console.is_terminal))
    if not as_json:
        stdout = Console()
        if not stdout.is_terminal:
            stdout = Console(width=200)
        stdout.print(compare_table(summaries, f"{trace.name} on {spec.name} ({spec.total_gpus:,} GPUs, "
                                                 f"{'pooled' if spec.lend else 'partitioned'})"))
        for s in summaries:
            if s["unschedulable"]["count"]:
                typer.echo(f"{s['policy_text']}: {s['unschedulable']['count']:,} jobs can never run on this cluster: "
                           + "; ".join(f"{why} ({n})" for why, n in s["unschedulable"]["reasons"].items()))
        typer.echo(f"wrote {out}")
    return summaries


def _run_one(jobs: list[Any], spec: Any, pol: Any, options: Any, text: str, trace: Path, where: Path,
             plots: bool, show: bool) -> dict[str, Any]:
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    from nanum.sim import SimError, Simulation
    from nanum.sim.metrics import summarize
    from nanum.sim.report import write_run

    simulation = Simulation(jobs, spec, pol, options)
    try:
        if show:
            columns = (TextColumn(f"[bold]{text}"), BarColumn(), TextColumn("{task.completed:,}/{task.total:,} jobs"),
                       TimeElapsedColumn())
            with Progress(*columns, transient=True) as bar:
                task = bar.add_task(text, total=len(jobs))
                result = simulation.run(lambda done, total: bar.update(task, completed=done))
        else:
            result = simulation.run()
    except SimError as e:
        _fail(f"{text}: {e}")
        raise AssertionError from None
    summary = summarize(result, policy_text=text, trace=str(trace))
    write_run(result, summary, where, plots=plots)
    return summary


def _slug(text: str) -> str:
    return "".join(c if c.isalnum() or c in "+-_." else "_" for c in text)


@sim_app.command("check")
@clean_errors
def check(out: Path = typer.Argument(..., help="Output directory of a `nanum sim` run.")) -> None:
    """Prove a run sound from its files: no GPU held twice, no node over capacity, every job ran exactly its run
    time plus lost work, nothing started before it was submitted."""
    from nanum.sim.check import check_run

    try:
        problems = check_run(out)
    except (FileNotFoundError, ValueError, KeyError) as e:
        _fail(f"cannot check {out}: {e}")
        return
    if problems:
        for p in problems:
            _err(p)
        _fail(f"{out}: {len(problems)} problem(s) found", 1)
    typer.echo(f"{out}: sound (no GPU held twice, no node over capacity, run times exact, no early start)")
    sys.stdout.flush()
