"""Capacity verdicts by replay (`nanum report capacity`): is the cluster short, adequate or over-supplied?

The history (a trace) is replayed through the simulator on the cluster as it is and on variants of it: scaled
(every node group's node count times a factor, rounded, at least one node in all) or extended (`--add 8xH100`: one
more node of 8 H100; `2x8xH100`: two). Each replay gives the average and p95 wait, the GPU utilisation, the GPU-hours
that stood idle, and whether the target (e.g. `p95 wait < 1h`) holds. A job the variant can never run fails the
target: its wait is unbounded.

The verdict compares the cluster as it is (the option `x1`) with the smallest option that meets the target:

- the cluster misses the target and a larger option meets it: **short: add about N GPUs (≈ K nodes of M)**, N the
  GPUs that option adds, M the GPUs per node of the added (or the largest) node group;
- the cluster meets it and an option at least one node smaller does too: **over-supplied: about N GPUs idle most of
  the time**, N the GPUs that option removes;
- otherwise **adequate**. When no option meets the target the verdict says so and names the largest one tried.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from nanum.core import Policy
from nanum.sim.cluster import ClusterError, ClusterSpec, NodeGroup
from nanum.sim.engine import SimOptions, Simulation
from nanum.sim.metrics import percentile, queue_delay
from nanum.sim.traces import TraceJob
from nanum.units import decimal_number

ADD_RE = re.compile(r"^(?:([0-9]+)x)?([0-9]+)x([A-Za-z][A-Za-z0-9_.\-]*)$")
TARGET_RE = re.compile(r"^(avg|mean|p50|p90|p95|p99)\s+wait\s*<\s*(\S+)$", re.IGNORECASE)
DURATION_RE = re.compile(r"^([0-9]+(?:\.[0-9]+)?)\s*(s|m|min|h|d)?$")
SECONDS = {"s": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0, "d": 86400.0, None: 1.0}
DEFAULT_SCALES = (0.5, 0.75, 1.0, 1.25, 1.5)


@dataclass(frozen=True, slots=True)
class Target:
    """`p95 wait < 1h`: the statistic of the jobs' queueing delays and its limit in seconds."""

    stat: str
    limit_s: float
    text: str

    def holds(self, avg: float, p95: float, waits: Sequence[float]) -> bool:
        value = {"avg": avg, "mean": avg, "p95": p95}.get(self.stat)
        if value is None:
            value = percentile(waits, float(self.stat[1:]))
        return value < self.limit_s


@dataclass(frozen=True, slots=True)
class Option:
    """One cluster to replay on: its label (`x0.75`, `+8xH100`), the spec, and the scale it came from."""

    label: str
    spec: ClusterSpec
    scale: float = 1.0
    added: tuple[NodeGroup, ...] = ()


@dataclass(frozen=True, slots=True)
class Outcome:
    option: Option
    gpus: int
    jobs: int
    never_run: int
    avg_wait_s: float
    p95_wait_s: float
    utilisation: float
    idle_gpu_hours: float
    meets: bool

    def as_dict(self) -> dict[str, object]:
        return {"option": self.option.label, "gpus": self.gpus, "jobs": self.jobs, "never_run": self.never_run,
                "avg_wait_s": round(self.avg_wait_s, 1), "p95_wait_s": round(self.p95_wait_s, 1),
                "utilisation": round(self.utilisation, 4), "idle_gpu_hours": round(self.idle_gpu_hours, 1),
                "meets_target": self.meets}


@dataclass(frozen=True, slots=True)
class Verdict:
    kind: str  # short, adequate, over-supplied
    text: str
    gpus: int  # GPUs to add (short) or that stand idle (over-supplied); 0 when adequate
    smallest: Outcome | None  # the smallest option that meets the target


def parse_target(text: str) -> Target:
    m = TARGET_RE.match(text.strip())
    if not m:
        raise ValueError(f"target {text!r} is not like 'p95 wait < 1h'; write avg|p50|p90|p95|p99 wait < DURATION")
    return Target(m.group(1).lower(), duration(m.group(2)), text.strip())


def duration(text: str) -> float:
    """`1h`, `30m`, `90s`, `2d` or plain seconds."""
    m = DURATION_RE.match(text.strip().lower())
    if not m:
        raise ValueError(f"duration {text!r} is not like 90s, 30m, 1h or 2d")
    return float(m.group(1)) * SECONDS[m.group(2)]


def parse_add(text: str) -> NodeGroup:
    """`8xH100` (one node of 8 H100) or `2x8xH100` (two)."""
    m = ADD_RE.match(text.strip())
    if not m or int(m.group(2)) < 1 or (m.group(1) is not None and int(m.group(1)) < 1):
        raise ValueError(f"--add {text!r} is not like 8xH100 (one node of 8 H100) or 2x8xH100 (two such nodes)")
    return NodeGroup(count=int(m.group(1) or 1), gpus=int(m.group(2)), model=m.group(3), name=f"added-{m.group(3)}")


def parse_scales(text: str) -> tuple[float, ...]:
    read = [decimal_number(x.strip()) for x in text.split(",") if x.strip()]
    scales = tuple(s for s in read if s is not None)
    if len(scales) != len(read):
        raise ValueError(f"--scale {text!r} is not a list of numbers like 0.5,0.75,1,1.25,1.5")
    if not scales or any(s <= 0 for s in scales):
        raise ValueError(f"--scale {text!r} needs positive factors like 0.5,0.75,1,1.25,1.5")
    return scales


def scaled(spec: ClusterSpec, factor: float) -> ClusterSpec:
    """Every node group's count times `factor`, rounded; groups rounded to none are dropped, one node kept in all."""
    groups = [replace(g, count=round(g.count * factor)) for g in spec.groups]
    kept = tuple(g for g in groups if g.count > 0)
    if not kept:
        largest = max(spec.groups, key=lambda g: g.gpus)
        kept = (replace(largest, count=1),)
    return replace(spec, name=f"{spec.name} x{factor:g}", groups=kept)


def extended(spec: ClusterSpec, added: Sequence[NodeGroup]) -> ClusterSpec:
    groups = list(spec.groups)
    for i, g in enumerate(added):
        groups.append(replace(g, name=f"{g.name}-{i}"))
    return replace(spec, name=f"{spec.name} +{'+'.join(f'{g.count}x{g.gpus}x{g.model}' for g in added)}",
                   groups=tuple(groups))


def options(spec: ClusterSpec, scales: Sequence[float], added: Sequence[NodeGroup]) -> list[Option]:
    """The cluster as it is (`x1`), each scale, and with `added` the cluster plus each addition in turn."""
    found = [Option(f"x{s:g}", scaled(spec, s) if s != 1 else spec, s) for s in sorted(set(scales) | {1.0})]
    for n in range(1, len(added) + 1):
        more = tuple(added[:n])
        found.append(Option("+" + "+".join(f"{g.count}x{g.gpus}x{g.model}".removeprefix("1x") for g in more),
                            extended(spec, more), 1.0, more))
    return found


def replay(trace: list[TraceJob], option: Option, policy_text: str, target: Target,
           progress: Callable[[int, int], None] | None = None, sim_options: SimOptions | None = None) -> Outcome:
    """Replay `trace` on the option's cluster and measure it against `target`."""
    spec = option.spec
    policy = Policy.parse(policy_text, lend=spec.lend, reclaim=spec.reclaim)
    result = Simulation(trace, spec, policy, sim_options).run(progress)
    done = [j for j in result.jobs if j.end is not None]
    waits = [queue_delay(j) for j in done]
    never = len(result.jobs) - len(done)
    first = min((j.trace.submit_time for j in result.jobs), default=0.0)
    last = max((j.end for j in done if j.end is not None), default=first)
    busy = sum((s.end - s.start) * len(s.gpus) for s in result.segments)
    available = result.total_gpus * max(last - first, 0.0)
    avg = sum(waits) / len(waits) if waits else 0.0
    p95 = percentile(waits, 95)
    return Outcome(option, result.total_gpus, len(result.jobs), never, avg, p95,
                   busy / available if available else 0.0, max(available - busy, 0.0) / 3600.0,
                   never == 0 and target.holds(avg, p95, waits))


def verdict(outcomes: Sequence[Outcome]) -> Verdict:
    """Short, adequate or over-supplied, from the outcomes of `options` (see the module docstring)."""
    now = next(o for o in outcomes if o.option.label == "x1")
    meeting = sorted((o for o in outcomes if o.meets), key=lambda o: (o.gpus, o.option.label))
    smallest = meeting[0] if meeting else None
    if not now.meets:
        smallest = next((o for o in meeting if o.gpus > now.gpus), None)
        if smallest is None:
            largest = max(outcomes, key=lambda o: o.gpus)
            return Verdict("short", f"short: even the largest option tried ({largest.option.label}, "
                           f"{largest.gpus:,} GPUs) misses the target; try larger --scale factors", 0, None)
        gap = smallest.gpus - now.gpus
        per_node = (smallest.option.added[-1].gpus if smallest.option.added
                    else max(g.gpus for g in now.option.spec.groups))
        nodes = math.ceil(gap / per_node)
        return Verdict("short", f"short: add about {gap:,} GPUs (≈ {nodes} node{'s' * (nodes != 1)} of {per_node})",
                       gap, smallest)
    per_node = min(g.gpus for g in now.option.spec.groups)
    assert smallest is not None
    if now.gpus - smallest.gpus >= per_node:
        spare = now.gpus - smallest.gpus
        return Verdict("over-supplied", f"over-supplied: about {spare:,} GPUs idle most of the time", spare, smallest)
    return Verdict("adequate", "adequate", 0, smallest)


#: Larger factors tried, doubling, when no option given meets the target; at most this factor.
MAX_SCALE = 16.0
#: Replays spent narrowing the gap between the largest option that misses the target and the smallest that meets it.
REFINE_STEPS = 6


def search(spec: ClusterSpec, scales: Sequence[float], added: Sequence[NodeGroup],
           run: Callable[[Option], Outcome]) -> list[Outcome]:
    """Replay every option (`run`), then, so that the verdict's N is close: double the largest factor while none
    meets the target, and bisect factors between the largest option missing it and the smallest meeting it, to
    within one node. Options that give the same nodes as one already replayed are skipped."""
    outcomes: list[Outcome] = []
    seen: set[tuple[int, ...]] = set()

    def tried(option: Option) -> Outcome | None:
        key = tuple(g.count for g in option.spec.groups) + tuple(g.gpus for g in option.spec.groups)
        if option.added or key not in seen:
            seen.add(key)
            outcomes.append(run(option))
            return outcomes[-1]
        return None

    given = options(spec, scales, added)
    for option in sorted(given, key=lambda o: o.label != "x1"):  # the cluster as it is first: duplicates drop
        tried(option)
    factor = max(scales)
    while not any(o.meets for o in outcomes) and factor < MAX_SCALE:
        factor *= 2
        try:
            larger = Option(f"x{factor:g}", scaled(spec, factor), factor)
        except ClusterError:  # larger than the simulator takes: the largest tried stands
            break
        tried(larger)
    for _ in range(REFINE_STEPS):
        pair = _gap(outcomes)
        if pair is None:
            break
        low, high = pair
        middle = round((low.option.scale + high.option.scale) / 2, 3)
        candidate = Option(f"x{middle:g}", scaled(spec, middle), middle)
        if candidate.spec.total_gpus in (low.gpus, high.gpus) or tried(candidate) is None:
            break
    return sorted(outcomes, key=lambda o: (bool(o.option.added), o.gpus, o.option.scale, len(o.option.added)))


def _gap(outcomes: Sequence[Outcome]) -> tuple[Outcome, Outcome] | None:
    """The scaled option that meets the target with the fewest GPUs and the largest one below it that misses it."""
    scaled_only = [o for o in outcomes if not o.option.added]
    meeting = [o for o in scaled_only if o.meets]
    if not meeting:
        return None
    high = min(meeting, key=lambda o: o.gpus)
    below = [o for o in scaled_only if not o.meets and o.gpus < high.gpus]
    if not below:
        return None
    return max(below, key=lambda o: o.gpus), high
