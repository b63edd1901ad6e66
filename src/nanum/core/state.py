"""ClusterState: the mutable working copy of free capacity inside one cycle, indexed for fast placement.

Nodes are bucketed by (pool, GPU model, free GPU count), where the pool is the owning lab (None for shared
nodes). A placement asks "which node of model M in pools P has at least g free GPUs?" and reads the buckets from g
upwards (binpack) or downwards (spread) instead of scanning every node, so a job that cannot start anywhere is
skipped in O(models × GPUs per node). Buckets are insertion-ordered dicts, so the scan order is deterministic.

`take` and `release` keep the buckets current as the cycle starts, reserves or frees GPUs.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from nanum.core.model import Job, Node, NodeState, Placement, Running, serves, takes_model

INF = float("inf")


@dataclass(slots=True)
class NodeFree:
    """Free capacity of one node. cpus/memory are None when the node does not track them."""

    index: int
    node: Node
    free: set[int]
    cpus: int | None
    memory_mb: int | None
    islands: dict[int, int]  # gpu index -> island
    key: tuple[str | None, str] = ("", "")

    def fits_extras(self, job: Job) -> bool:
        if self.cpus is not None and job.cpus > self.cpus:
            return False
        if self.memory_mb is not None and job.memory_mb > self.memory_mb:
            return False
        return serves(self.node, job)

    def pick_gpus(self, count: int) -> tuple[int, ...]:
        """Best-fit island: the island with the fewest free GPUs that still holds `count`, else lowest indices."""
        by_island: dict[int, list[int]] = {}
        for gpu in sorted(self.free):
            by_island.setdefault(self.islands[gpu], []).append(gpu)
        fitting = [g for g in by_island.values() if len(g) >= count]
        if fitting:
            return tuple(min(fitting, key=lambda g: (len(g), g[0]))[:count])
        return tuple(sorted(self.free)[:count])

    def island_fit(self, count: int) -> bool:
        counts: dict[int, int] = {}
        for gpu in self.free:
            counts[self.islands[gpu]] = counts.get(self.islands[gpu], 0) + 1
        return any(c >= count for c in counts.values())


@dataclass(slots=True)
class ClusterState:
    """Free capacity per node with (pool, model) → free count → nodes buckets."""

    nodes: list[NodeFree]
    by_name: dict[str, NodeFree]
    buckets: dict[tuple[str | None, str], list[dict[int, None]]] = field(default_factory=dict)
    max_gpus_per_node: int = 0
    #: bumped whenever free capacity changes, so callers can cache answers until then.
    version: int = 0
    _keys: dict[tuple[object, ...], list[tuple[str | None, str]]] = field(default_factory=dict)
    #: answers that depend only on the nodes (never on what runs), by kind: kept while this state lives.
    static: dict[str, dict[tuple[object, ...], Any]] = field(default_factory=dict)
    #: when a `CycleCache` carries this state on: every take (True) / release (False), to undo them ...
    journal: list[tuple[bool, Placement, Job]] | None = None
    #: ... and the buckets whose node order those moves disturbed.
    touched: set[tuple[tuple[str | None, str], int]] | None = None

    @classmethod
    def build(cls, nodes: tuple[Node, ...], running: tuple[Running, ...]) -> ClusterState:
        state = cls(nodes=[], by_name={})
        state.max_gpus_per_node = max((len(n.gpus) for n in nodes), default=0)
        by_name = state.by_name
        for i, node in enumerate(nodes):
            islands = {g.index: g.island for g in node.gpus}
            nf = NodeFree(i, node, set(islands).difference(node.busy_gpus), node.cpus or None,
                          node.memory_mb or None, islands, (node.owner, node.gpu_model))
            state.nodes.append(nf)
            by_name[node.name] = nf
        for run in running:
            for p in run.placements:
                held = by_name.get(p.node)
                if held is not None:
                    held.free.difference_update(p.gpus)
                    if held.cpus is not None:
                        held.cpus -= run.job.cpus
                    if held.memory_mb is not None:
                        held.memory_mb -= run.job.memory_mb
        for nf in state.nodes:
            if nf.node.state is NodeState.UP and nf.node.gpus:
                state._bucket(nf.key)[len(nf.free)][nf.index] = None
        return state

    def _bucket(self, key: tuple[str | None, str]) -> list[dict[int, None]]:
        b = self.buckets.get(key)
        if b is None:
            b = [{} for _ in range(self.max_gpus_per_node + 1)]
            self.buckets[key] = b
        return b

    def _move(self, nf: NodeFree, before: int) -> None:
        self.version += 1
        if nf.node.state is not NodeState.UP or not nf.node.gpus:
            return
        b = self.buckets[nf.key]
        del b[before][nf.index]
        b[len(nf.free)][nf.index] = None
        if self.touched is not None:
            self.touched.add((nf.key, len(nf.free)))

    def canonical(self) -> None:
        """Put the touched buckets back in node order, as `build` leaves them."""
        for key, count in self.touched or ():
            bucket = self.buckets[key]
            bucket[count] = dict.fromkeys(sorted(bucket[count]))
        self.touched = None

    def take(self, placement: Placement, job: Job) -> None:
        if self.journal is not None:
            self.journal.append((True, placement, job))
        nf = self.by_name[placement.node]
        before = len(nf.free)
        nf.free.difference_update(placement.gpus)
        if nf.cpus is not None:
            nf.cpus -= job.cpus
        if nf.memory_mb is not None:
            nf.memory_mb -= job.memory_mb
        self._move(nf, before)

    def release(self, placement: Placement, job: Job) -> None:
        nf = self.by_name.get(placement.node)
        if nf is None:
            return
        if self.journal is not None:
            self.journal.append((False, placement, job))
        before = len(nf.free)
        nf.free.update(placement.gpus)
        if nf.cpus is not None:
            nf.cpus += job.cpus
        if nf.memory_mb is not None:
            nf.memory_mb += job.memory_mb
        self._move(nf, before)

    def keys_for(self, job: Job, pools: tuple[str | None, ...] | None) -> list[tuple[str | None, str]]:
        """The (pool, model) buckets a job may use, own pool first. `pools` None: every pool.

        The same list object is returned for the same question, so callers may key caches on it."""
        cache_key = (job.gpu_model, job.gpu_models, job.lab, pools)
        keys = self._keys.get(cache_key)
        if keys is None:
            keys = [
                k
                for k in self.buckets
                if takes_model(job, k[1]) and (pools is None or k[0] in pools)
            ]
            keys.sort(key=lambda k: (k[0] != job.lab, k[0] is not None, k[0] or "", k[1]))
            self._keys[cache_key] = keys
        return keys

    def largest_block(self, keys: list[tuple[str | None, str]]) -> tuple[int, NodeFree | None]:
        best, where = 0, None
        for key in keys:
            b = self.buckets[key]
            for count in range(len(b) - 1, best, -1):
                if b[count]:
                    best, where = count, self.nodes[next(iter(b[count]))]
                    break
        return best, where

    def candidates(
        self, keys: list[tuple[str | None, str]], gpus: int, fullest_first: bool
    ) -> Iterator[NodeFree]:
        """Nodes with at least `gpus` free GPUs: fullest first (binpack) or emptiest first (spread).

        Own-pool buckets are exhausted before others, so an owner's jobs land on its own nodes."""
        top = self.max_gpus_per_node
        counts = range(gpus, top + 1) if fullest_first else range(top, gpus - 1, -1)
        for key in keys:
            b = self.buckets[key]
            for count in counts:
                for idx in b[count]:  # callers stop iterating before they take or release
                    yield self.nodes[idx]
