"""The allocations checker: proves from a run's files alone that the schedule it reports was physically possible.

It reads `allocations.csv`, `jobs.csv` and `nodes.csv` of a run directory and checks that

1. no GPU was ever held by two jobs at once, and every GPU index exists on its node (so no node is over capacity);
2. every run of a gang holds the same number of GPUs on each of its nodes, all from the same start to the same end;
3. every job that finished held GPUs for exactly its run time plus its lost work (restart costs and work since the
   last checkpoint), and `start_time`, `end_time`, `jct` and `queue_delay` in jobs.csv agree with its runs;
4. nothing started before it was submitted.

Each violation is one line naming the job, node and times; an empty list means the run is sound.
"""

from __future__ import annotations

import csv
from collections import defaultdict
from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path

TOLERANCE = 1e-3  # seconds: files round times to milliseconds


@dataclass(frozen=True, slots=True)
class Alloc:
    job: str
    node: str
    gpus: tuple[int, ...]
    start: float
    end: float


def _read(path: Path) -> list[dict[str, str]]:
    if not path.exists():
        raise FileNotFoundError(f"{path} is missing; point the checker at the output directory of `nanum sim`")
    with path.open(newline="") as f:
        return list(csv.DictReader(f))


def check_run(out: Path, limit: int = 50) -> list[str]:
    """All violations found in the run directory `out` (at most `limit`, plus a count of the rest)."""
    nodes = {r["node"]: int(r["gpus"]) for r in _read(out / "nodes.csv")}
    allocs = [Alloc(r["job_id"], r["node"], tuple(int(g) for g in r["gpus"].split()), float(r["start"]),
                    float(r["end"])) for r in _read(out / "allocations.csv")]
    jobs = _read(out / "jobs.csv")
    problems = _gpu_overlaps(allocs, nodes) + _gangs(allocs) + _jobs(allocs, jobs)
    if len(problems) > limit:
        problems = [*problems[:limit], f"... and {len(problems) - limit} more"]
    return problems


def _gpu_overlaps(allocs: list[Alloc], nodes: dict[str, int]) -> list[str]:
    problems: list[str] = []
    by_gpu: dict[tuple[str, int], list[Alloc]] = defaultdict(list)
    for a in allocs:
        if a.node not in nodes:
            problems.append(f"job {a.job} ran on node {a.node}, which the cluster does not have")
            continue
        if a.end < a.start:
            problems.append(f"job {a.job} on {a.node} ends ({a.end}) before it starts ({a.start})")
        for g in a.gpus:
            if not 0 <= g < nodes[a.node]:
                problems.append(f"job {a.job} held GPU {g} of {a.node}, which has only {nodes[a.node]} GPUs")
            by_gpu[(a.node, g)].append(a)
        if len(set(a.gpus)) != len(a.gpus):
            problems.append(f"job {a.job} lists a GPU twice on {a.node} at {a.start}")
    for (node, gpu), runs in sorted(by_gpu.items()):
        runs.sort(key=lambda a: (a.start, a.end))
        for prev, cur in pairwise(runs):
            if cur.start < prev.end - TOLERANCE:
                problems.append(f"GPU {gpu} of {node} held by job {prev.job} ({prev.start}–{prev.end}) and job "
                                f"{cur.job} ({cur.start}–{cur.end}) at once")
    return problems


def _gangs(allocs: list[Alloc]) -> list[str]:
    problems: list[str] = []
    runs: dict[tuple[str, float], list[Alloc]] = defaultdict(list)
    for a in allocs:
        runs[(a.job, a.start)].append(a)
    for (job, start), parts in runs.items():
        if len({len(p.gpus) for p in parts}) > 1 or len({p.end for p in parts}) > 1:
            problems.append(f"job {job}'s run from {start} holds different GPU counts or ends on its nodes")
        if len({p.node for p in parts}) != len(parts):
            problems.append(f"job {job}'s run from {start} lists a node twice")
    return problems


def _jobs(allocs: list[Alloc], jobs: list[dict[str, str]]) -> list[str]:
    problems: list[str] = []
    runs: dict[str, set[tuple[float, float]]] = defaultdict(set)
    for a in allocs:
        runs[a.job].add((a.start, a.end))
    for row in jobs:
        job, mine = row["job_id"], sorted(runs.get(row["job_id"], ()))
        if not row["end_time"]:
            if mine:
                problems.append(f"job {job} has runs but no end_time (status {row['status']})")
            continue
        submit, start, end = float(row["submit_time"]), float(row["start_time"]), float(row["end_time"])
        held = sum(e - s for s, e in mine)
        expected = float(row["duration"]) + float(row["lost_seconds"])
        if not mine:
            problems.append(f"job {job} finished without ever holding a GPU")
            continue
        if abs(held - expected) > TOLERANCE * max(1, len(mine)):
            problems.append(f"job {job} held GPUs for {held:.3f} s, expected its run time plus lost work = "
                            f"{expected:.3f} s")
        if mine[0][0] < submit - TOLERANCE:
            problems.append(f"job {job} started at {mine[0][0]}, before it was submitted at {submit}")
        if abs(mine[0][0] - start) > TOLERANCE or abs(max(e for _, e in mine) - end) > TOLERANCE:
            problems.append(f"job {job}: start_time/end_time disagree with its runs")
        if abs(float(row["jct"]) - (end - submit)) > TOLERANCE or \
                abs(float(row["queue_delay"]) - (end - submit - held)) > TOLERANCE * (1 + len(mine)):
            problems.append(f"job {job}: jct or queue_delay disagrees with its submit, end and runs")
        if int(row["preemptions"]) != len(mine) - 1:
            problems.append(f"job {job} reports {row['preemptions']} preemptions but ran {len(mine)} times")
    return problems
