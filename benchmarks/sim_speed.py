"""Simulator speed: jobs simulated per second on the full Philly trace (82,247 jobs), for each policy.

Replays ../shared/traces/philly-pollux/philly.csv.gz (every job, September to December 2017) on the Philly
clusters of examples/ (pooled and partitioned: 11 VCs, 352 nodes × 4 GPUs), then the peer's setup for a
like-for-like time: the 68,503 jobs of 2017-10-01..11-30 in those VCs at the full Helios sizes (352 × 8 GPUs,
partitioned), where the Helios simulator takes 172 s for FIFO and 694 s for oracle SRTF on this kind of machine.

    .venv/bin/python benchmarks/sim_speed.py [--policies fifo+nobackfill,...] [--clusters pooled,partitioned]
                                             [--no-peer] [--json out.json]

Target: the whole trace under 30 s with the default policy, at least 5× faster than the peer. Seconds are wall
time; `cpu s` is the process's CPU time, steadier when other work shares the machine.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from nanum.core.policy import DEFAULT_POLICY

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "traces"
PHILLY = SHARED / "philly-pollux" / "philly.csv.gz"
POLICIES = ("fifo+nobackfill", "fifo+backfill", "fairshare+backfill", "shortest+backfill", "las+backfill+preempt",
            DEFAULT_POLICY)
CLUSTERS = {"pooled": "philly-pooled.toml", "partitioned": "philly-partitioned.toml"}
#: the peer takes 172 s for FIFO (694 s for oracle SRTF): every policy is compared with its FIFO time.
PEER_SECONDS = {"fifo+nobackfill": 172.0, "las+backfill+preempt": 172.0, DEFAULT_POLICY: 172.0}


def replay(trace: list[Any], cluster: str, policy: str) -> dict[str, Any]:
    from nanum.core import Policy
    from nanum.sim import parse_cluster, simulate

    spec = parse_cluster(str(ROOT / "examples" / cluster))
    started, cpu = time.perf_counter(), time.process_time()
    result = simulate(trace, spec, Policy.parse(policy, lend=spec.lend, reclaim=spec.reclaim))
    wall, cpu = time.perf_counter() - started, time.process_time() - cpu
    return {"policy": policy, "cluster": spec.name, "jobs": len(trace), "seconds": round(wall, 1),
            "cpu_seconds": round(cpu, 1), "jobs_per_second": round(len(trace) / wall), "cycles": result.cycles}


def main() -> int:
    from nanum.sim import Filter, ImportOptions, import_trace
    from nanum.sim.importers import parse_time

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--policies", default=",".join(POLICIES))
    parser.add_argument("--clusters", default="pooled,partitioned")
    parser.add_argument("--no-peer", action="store_true", help="skip the 68,503-job run at the full Helios sizes")
    parser.add_argument("--json", type=Path, help="also write the rows as JSON")
    args = parser.parse_args()
    if not PHILLY.exists():
        print(f"the Philly trace is not at {PHILLY}; this benchmark needs ../shared/traces", file=sys.stderr)
        return 1
    trace, _ = import_trace("philly-pollux", PHILLY, ImportOptions())
    rows = []
    print(f"{'policy':28} {'cluster':22} {'jobs':>7} {'seconds':>8} {'cpu s':>8} {'jobs/s':>8} {'cycles':>8}")
    for policy in args.policies.split(","):
        for name in args.clusters.split(","):
            rows.append(replay(trace, CLUSTERS[name], policy))
            _print(rows[-1])
    if not args.no_peer:
        keep = Filter(since=parse_time("2017-10-01T00:00:00"), until=parse_time("2017-11-30T23:59:00"),
                      labs=frozenset(_helios_vcs()))
        window, _ = import_trace("philly-pollux", PHILLY, ImportOptions(), keep)
        for policy, peer in PEER_SECONDS.items():
            row = replay(window, "philly-helios-full.toml", policy)
            row["peer_seconds"], row["speedup"] = peer, round(peer / row["seconds"], 1)
            rows.append(row)
            _print(row, f"  peer {peer:.0f} s: {row['speedup']}x faster")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2) + "\n")
    return 0


def _helios_vcs() -> list[str]:
    import csv

    with (SHARED / "summaries" / "helios_qssf_philly_vc_nodes.csv").open() as f:
        return [row["vc"] for row in csv.DictReader(f)]


def _print(row: dict[str, Any], extra: str = "") -> None:
    print(f"{row['policy']:28} {row['cluster']:22} {row['jobs']:>7,} {row['seconds']:>8.1f} "
          f"{row['cpu_seconds']:>8.1f} {row['jobs_per_second']:>8,} {row['cycles']:>8,}{extra}", flush=True)


if __name__ == "__main__":
    sys.exit(main())
