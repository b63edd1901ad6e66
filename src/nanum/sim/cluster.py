"""Cluster specs for the simulator: `NxG[:MODEL]` on the command line, or a TOML file of node groups and labs.

A TOML cluster file:

```toml
name = "philly-pooled"
lend = true          # owners' idle GPUs run other labs' jobs (pooled); false keeps labs apart (partitioned)
reclaim = true       # an owner under its guarantee preempts borrowers

[[nodes]]            # a node group
count = 64
gpus = 4
model = "P100"       # default "GPU"
cpus = 0             # 0: not tracked
memory_mb = 0
lab = "6214e9"       # the lab that owns these nodes (omit: shared)

[labs.6214e9]        # optional quotas
guaranteed_gpus = 256   # default: the GPUs the lab owns when lend = true, none when lend = false
max_gpus = 300
max_running_jobs = 100
monthly_gpu_hours = 50000
weight = 1.0
```

With `lend = true`, a lab that owns no nodes gets a guarantee of 0: all its jobs borrow and may be reclaimed.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nanum.core import Gpu, Lab, Limits, Node

SPEC_RE = re.compile(r"^([0-9]+)x([0-9]+)(?::([A-Za-z0-9_.\-]+))?$")
DEFAULT_MODEL = "GPU"
GROUP_KEYS = {"count", "gpus", "model", "cpus", "memory_mb", "lab", "name", "islands"}
LAB_KEYS = {"guaranteed_gpus", "max_gpus", "max_running_jobs", "monthly_gpu_hours", "weight"}
#: The most nodes a simulated cluster has, and GPUs one of its nodes has: a replay holds every node and GPU in
#: memory (`--add 99999999x8xH100` grew the command past 800 MB before any job was replayed).
MAX_NODES = 20_000
MAX_GPUS_PER_NODE = 1_024


class ClusterError(ValueError):
    """A cluster spec that cannot be used; the message says what to fix."""


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeGroup:
    count: int
    gpus: int
    model: str = DEFAULT_MODEL
    cpus: int = 0
    memory_mb: int = 0
    lab: str | None = None
    name: str = ""
    islands: int = 1


@dataclass(frozen=True, slots=True, kw_only=True)
class LabSpec:
    """Quotas of one lab. `guaranteed_gpus` None: take the default (see the module docstring)."""

    name: str
    guaranteed_gpus: int | None = None
    max_gpus: int | None = None
    max_running_jobs: int | None = None
    monthly_gpu_hours: float | None = None
    weight: float = 1.0


@dataclass(frozen=True, slots=True, kw_only=True)
class ClusterSpec:
    name: str
    groups: tuple[NodeGroup, ...]
    labs: Mapping[str, LabSpec] = field(default_factory=dict)
    lend: bool = True
    reclaim: bool = True

    def __post_init__(self) -> None:
        nodes = sum(g.count for g in self.groups)
        if nodes > MAX_NODES:
            raise ClusterError(f"cluster {self.name} has {nodes:,} nodes; a simulated cluster has at most "
                               f"{MAX_NODES:,}")
        crowded = next((g for g in self.groups if g.gpus > MAX_GPUS_PER_NODE), None)
        if crowded is not None:
            raise ClusterError(f"cluster {self.name} has nodes of {crowded.gpus:,} GPUs; a simulated node has at most "
                               f"{MAX_GPUS_PER_NODE:,}")

    @property
    def total_gpus(self) -> int:
        return sum(g.count * g.gpus for g in self.groups)

    def owned_gpus(self) -> dict[str, int]:
        owned: dict[str, int] = {}
        for g in self.groups:
            if g.lab is not None:
                owned[g.lab] = owned.get(g.lab, 0) + g.count * g.gpus
        return owned

    def build_nodes(self) -> tuple[Node, ...]:
        """Every node of every group, named `<group name or lab>-NNN`."""
        nodes: list[Node] = []
        for gi, g in enumerate(self.groups):
            prefix = g.name or g.lab or f"node{gi}"
            per_island = max(1, -(-g.gpus // max(g.islands, 1)))
            gpus = tuple(Gpu(i, g.model, 0, i // per_island) for i in range(g.gpus))
            width = max(3, len(str(g.count - 1)))
            for i in range(g.count):
                nodes.append(Node(name=f"{prefix}-{i:0{width}d}", gpus=gpus, cpus=g.cpus,
                                  memory_mb=g.memory_mb, owner=g.lab))
        names = [n.name for n in nodes]
        if len(set(names)) != len(names):
            raise ClusterError(f"cluster {self.name}: two node groups share a name; give each group its own `name`")
        return tuple(nodes)

    def labs_for(self, trace_labs: Iterable[str]) -> dict[str, Lab]:
        """The core's Lab for every lab of the cluster file and of the trace, with guarantees and limits."""
        owned = self.owned_gpus()
        names = sorted(set(trace_labs) | set(self.labs) | set(owned))
        return {name: self._lab(name, owned) for name in names}

    def _lab(self, name: str, owned: Mapping[str, int]) -> Lab:
        spec = self.labs.get(name, LabSpec(name=name))
        guarantee = spec.guaranteed_gpus
        if guarantee is None and self.lend:
            guarantee = owned.get(name, 0)
        limits = Limits(max_gpus=spec.max_gpus, max_running_jobs=spec.max_running_jobs,
                        monthly_gpu_hours=spec.monthly_gpu_hours)
        return Lab(name=name, guaranteed_gpus=guarantee, limits=limits, weight=spec.weight)


def parse_cluster(text: str) -> ClusterSpec:
    """`8x4`, `16x8:A100` or the path of a TOML cluster file."""
    m = SPEC_RE.match(text.strip())
    if m:
        count, gpus = int(m.group(1)), int(m.group(2))
        if count < 1 or gpus < 1:
            raise ClusterError(f"cluster {text!r} needs at least one node with at least one GPU")
        group = NodeGroup(count=count, gpus=gpus, model=m.group(3) or DEFAULT_MODEL)
        return ClusterSpec(name=text.strip(), groups=(group,))
    path = Path(text)
    if not path.exists():
        raise ClusterError(f"cluster {text!r} is neither NxG[:MODEL] (e.g. 8x4:A100) nor an existing TOML file")
    try:
        data = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as e:
        raise ClusterError(f"cannot read cluster file {path}: {e}") from None
    return cluster_from_dict(data, default_name=path.stem)


def cluster_from_dict(data: Mapping[str, Any], default_name: str = "cluster") -> ClusterSpec:
    unknown = set(data) - {"name", "lend", "reclaim", "nodes", "labs", "description"}
    if unknown:
        raise ClusterError(f"unknown cluster key(s) {', '.join(sorted(unknown))}; use name, lend, reclaim, nodes, labs")
    raw_groups = data.get("nodes")
    if not isinstance(raw_groups, list) or not raw_groups:
        raise ClusterError("a cluster file needs at least one [[nodes]] group with count and gpus")
    groups = tuple(_group(i, g) for i, g in enumerate(raw_groups))
    labs_raw = data.get("labs", {})
    if not isinstance(labs_raw, dict):
        raise ClusterError("[labs] must be a table of lab names")
    labs = {name: _lab_spec(name, body) for name, body in labs_raw.items()}
    return ClusterSpec(name=str(data.get("name", default_name)), groups=groups, labs=labs,
                       lend=_bool(data, "lend", True), reclaim=_bool(data, "reclaim", True))


def _bool(data: Mapping[str, Any], key: str, default: bool) -> bool:
    value = data.get(key, default)
    if not isinstance(value, bool):
        raise ClusterError(f"{key} must be true or false, not {value!r}")
    return value


def _int(where: str, body: Mapping[str, Any], key: str, default: int | None, minimum: int = 0) -> int | None:
    value = body.get(key, default)
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise ClusterError(f"{where}: {key} must be a whole number >= {minimum}, not {value!r}")
    return value


def _group(i: int, body: Any) -> NodeGroup:
    where = f"[[nodes]] group {i + 1}"
    if not isinstance(body, dict):
        raise ClusterError(f"{where} must be a table")
    if unknown := set(body) - GROUP_KEYS:
        raise ClusterError(f"{where}: unknown key(s) {', '.join(sorted(unknown))}; use {', '.join(sorted(GROUP_KEYS))}")
    if "count" not in body or "gpus" not in body:
        raise ClusterError(f"{where} needs count and gpus")
    lab = body.get("lab")
    return NodeGroup(
        count=_int(where, body, "count", 1, 1) or 1,
        gpus=_int(where, body, "gpus", 1, 0) or 0,
        model=str(body.get("model", DEFAULT_MODEL)),
        cpus=_int(where, body, "cpus", 0) or 0,
        memory_mb=_int(where, body, "memory_mb", 0) or 0,
        lab=None if lab is None else str(lab),
        name=str(body.get("name", "")),
        islands=_int(where, body, "islands", 1, 1) or 1,
    )


def _lab_spec(name: str, body: Any) -> LabSpec:
    where = f"[labs.{name}]"
    if not isinstance(body, dict):
        raise ClusterError(f"{where} must be a table")
    if unknown := set(body) - LAB_KEYS:
        raise ClusterError(f"{where}: unknown key(s) {', '.join(sorted(unknown))}; use {', '.join(sorted(LAB_KEYS))}")
    budget = body.get("monthly_gpu_hours")
    weight = body.get("weight", 1.0)
    if budget is not None and (not isinstance(budget, int | float) or budget < 0):
        raise ClusterError(f"{where}: monthly_gpu_hours must be a number >= 0")
    if not isinstance(weight, int | float) or weight <= 0:
        raise ClusterError(f"{where}: weight must be a positive number")
    return LabSpec(
        name=name,
        guaranteed_gpus=_int(where, body, "guaranteed_gpus", None),
        max_gpus=_int(where, body, "max_gpus", None),
        max_running_jobs=_int(where, body, "max_running_jobs", None),
        monthly_gpu_hours=None if budget is None else float(budget),
        weight=float(weight),
    )


def to_toml(spec: ClusterSpec, comment: str = "") -> str:
    """A cluster file for `spec` (used by importers that come with a node inventory)."""
    lines = [f"# {line}" for line in comment.splitlines()]
    lines += [f"name = {_q(spec.name)}", f"lend = {str(spec.lend).lower()}", f"reclaim = {str(spec.reclaim).lower()}"]
    for g in spec.groups:
        lines += ["", "[[nodes]]"]
        if g.name:
            lines.append(f"name = {_q(g.name)}")
        lines += [f"count = {g.count}", f"gpus = {g.gpus}", f"model = {_q(g.model)}"]
        if g.cpus:
            lines.append(f"cpus = {g.cpus}")
        if g.memory_mb:
            lines.append(f"memory_mb = {g.memory_mb}")
        if g.lab is not None:
            lines.append(f"lab = {_q(g.lab)}")
    return "\n".join(lines) + "\n"


def _q(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'
