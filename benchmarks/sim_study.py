"""The policy study behind docs/simulation.md: every setup × policy, with tables (Markdown) and plots.

Setups (traces from ../shared/traces, cluster files from examples/):

- philly-partitioned / philly-pooled: the Helios Philly setup (68,503 jobs, 2017-10-01..11-30, 11 VCs, 352 × 4 GPUs);
- itp-cluster02 / itp-cluster06 / itp-cluster04: Microsoft ITP clusters (raw ElasticFlow traces).

Writes every run under OUT (default sim-out/study/<setup>/<policy>/), the summaries to OUT/summaries.json, the
tables to OUT/tables.md and the figures to docs/img/. Takes about 20 minutes on two cores.

    .venv/bin/python benchmarks/sim_study.py [--out sim-out/study] [--setups philly-partitioned,...]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "traces"
IMG = ROOT / "docs" / "img"

DEFAULT = "gittins+binpack+backfill+preempt"
LAS_PREEMPT = "las+binpack+backfill+preempt"
POLICIES = ("fifo+nobackfill", "fifo+backfill", "las+backfill", "fairshare+backfill", "shortest+backfill", LAS_PREEMPT,
            DEFAULT)
ORACLE = ("shortest+nobackfill", "shortest+backfill")  # true run times: the peer's oracle, for reference only
SETUPS: dict[str, tuple[str, str, tuple[str, ...]]] = {
    "philly-partitioned": ("philly-helios", "philly-partitioned.toml", ORACLE),
    "philly-pooled": ("philly-helios", "philly-pooled.toml", ()),
    "philly-pooled-half": ("philly-helios", "philly-pooled-half.toml", ()),
    "itp-cluster02": ("itp02", "itp-cluster02.toml", ()),
    "itp-cluster06": ("itp06", "itp-cluster06.toml", ()),
    "itp-cluster04": ("itp04", "itp-cluster04.toml", ()),
}


def traces(names: set[str]) -> dict[str, list[Any]]:
    from nanum.sim import Filter, ImportOptions, import_trace
    from nanum.sim.importers import parse_time

    out: dict[str, list[Any]] = {}
    if "philly-helios" in names:
        keep = Filter(since=parse_time("2017-10-01T00:00:00"), until=parse_time("2017-11-30T23:59:00"),
                      labs=frozenset(_helios_vcs()))
        out["philly-helios"], _ = import_trace("philly-pollux", SHARED / "philly-pollux" / "philly.csv.gz",
                                               ImportOptions(), keep)
    for name in names - {"philly-helios"}:
        raw = SHARED / "microsoft-itp-elasticflow" / "raw" / f"cluster{name[3:]}.csv.gz"
        out[name], _ = import_trace("microsoft-itp", raw, ImportOptions(lab="itp"))
    return out


def _helios_vcs() -> list[str]:
    import csv

    with (SHARED / "summaries" / "helios_qssf_philly_vc_nodes.csv").open() as f:
        return [row["vc"] for row in csv.DictReader(f)]


def run_setup(setup: str, jobs: list[Any], out: Path) -> list[dict[str, Any]]:
    from nanum.core import Policy
    from nanum.sim import SimOptions, parse_cluster, simulate
    from nanum.sim.metrics import jct, queue_delay, summarize
    from nanum.sim.plots import binned, plot_cdfs, plot_series
    from nanum.sim.report import write_run

    _, cluster_file, oracle = SETUPS[setup]
    spec = parse_cluster(str(ROOT / "examples" / cluster_file))
    summaries, cdfs, delays, queues = [], {}, {}, {}
    runs = [(p, "history") for p in POLICIES] + [(p, "oracle") for p in oracle]
    for text, predictor in runs:
        label = text if predictor == "history" else f"{text} (oracle)"
        result = simulate(jobs, spec, Policy.parse(text, lend=spec.lend), SimOptions(predictor=predictor))
        summary = summarize(result, policy_text=label, trace=setup)
        write_run(result, summary, out / setup / label.replace(" ", "_").replace("(", "").replace(")", ""),
                  plots=label in ("fifo+nobackfill", DEFAULT))
        summaries.append(summary)
        if predictor == "history":
            cdfs[label] = [jct(j) for j in result.jobs if j.end is not None]
            delays[label] = [queue_delay(j) for j in result.jobs if j.end is not None]
        if label in ("fifo+nobackfill", "fifo+backfill", LAS_PREEMPT, DEFAULT):
            queues[label] = binned(result.series, 2)
        print(f"{setup:20} {label:34} avg JCT {summary['jct']['avg']:>9,.0f}  avg queue "
              f"{summary['queue_delay']['avg']:>8,.0f}  {summary['simulator']['wall_seconds']:>6.1f} s", flush=True)
    plot_cdfs(cdfs, IMG / f"{setup}-jct-cdf.png", f"JCT CDF: {setup} ({len(jobs):,} jobs)")
    plot_cdfs(delays, IMG / f"{setup}-queue-cdf.png", f"Queueing delay CDF: {setup} (0 s drawn at 1 s)",
              "queueing delay (s)")
    plot_series(queues, IMG / f"{setup}-queue-length.png", f"Pending jobs over time: {setup}", "pending jobs (mean)")
    return summaries


def figures(all_runs: dict[str, list[dict[str, Any]]]) -> None:
    """Per-lab average slowdown, partitioned vs pooled, for FIFO and the default."""
    from nanum.sim.plots import plot_bars

    part, pool = all_runs.get("philly-partitioned"), all_runs.get("philly-pooled")
    if not part or not pool:
        return
    by = {(s["trace"], s["policy_text"]): s for s in part + pool}
    labs = sorted(part[0]["labs"])
    groups = {}
    for setup in ("philly-partitioned", "philly-pooled"):
        for policy in ("fifo+nobackfill", DEFAULT):
            s = by[(setup, policy)]
            groups[f"{setup.split('-')[1]} {policy}"] = [s["labs"][lab]["avg_slowdown"] for lab in labs]
    plot_bars(labs, groups, IMG / "philly-lab-slowdown.png", "Average slowdown per lab (VC)", "avg slowdown",
              log=True)
    queue = {f"{setup.split('-')[1]} {policy}": [by[(setup, policy)]["labs"][lab]["avg_queue_delay"] + 1
                                                  for lab in labs]
             for setup in ("philly-partitioned", "philly-pooled") for policy in ("fifo+nobackfill", DEFAULT)}
    plot_bars(labs, queue, IMG / "philly-lab-queue.png", "Average queueing delay per lab (VC), +1 s for the log axis",
              "seconds", log=True)


def tables(all_runs: dict[str, list[dict[str, Any]]]) -> str:
    from nanum.sim.report import FULL_COLUMNS, markdown_table

    parts = []
    for setup, summaries in all_runs.items():
        parts.append(f"### {setup}\n\n{markdown_table(summaries, FULL_COLUMNS)}\n")
        labs = sorted(summaries[0]["labs"])
        if len(labs) > 1:
            head = "| policy | " + " | ".join(labs) + " |"
            rule = "|---|" + "|".join("---:" for _ in labs) + "|"
            rows = [f"| {s['policy_text']} | " + " | ".join(f"{s['labs'][lab]['avg_slowdown']:.2f}" for lab in labs)
                    + " |" for s in summaries]
            parts.append(f"Average slowdown per lab ({setup}):\n\n" + "\n".join([head, rule, *rows]) + "\n")
        pred = [f"| {s['policy_text']} | {s['predictor'].get('mape_percent', '-')} | "
                f"{s['predictor'].get('median_ratio', '-')} | {s['predictor'].get('within_2x_percent', '-')} |"
                for s in summaries if s["predictor"]["name"] == "history"]
        parts.append("Predictor error (history, online):\n\n| policy | MAPE % | median predicted/true | within 2× % |\n"
                     "|---|---:|---:|---:|\n" + "\n".join(pred) + "\n")
    return "\n".join(parts)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "sim-out" / "study")
    parser.add_argument("--setups", default=",".join(SETUPS))
    args = parser.parse_args()
    if not SHARED.exists():
        print(f"the shared traces are not at {SHARED}", file=sys.stderr)
        return 1
    chosen = [s for s in args.setups.split(",") if s]
    IMG.mkdir(parents=True, exist_ok=True)
    jobs = traces({SETUPS[s][0] for s in chosen})
    all_runs = {setup: run_setup(setup, jobs[SETUPS[setup][0]], args.out) for setup in chosen}
    args.out.mkdir(parents=True, exist_ok=True)
    old = args.out / "summaries.json"
    merged = json.loads(old.read_text()) if old.exists() else {}
    merged.update(all_runs)
    old.write_text(json.dumps(merged, indent=1) + "\n")
    figures(merged)
    (args.out / "tables.md").write_text(tables(merged))
    print(f"wrote {args.out}/tables.md, {old} and figures in {IMG}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
