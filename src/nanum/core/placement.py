"""Placements: which nodes and which GPU indices a job gets. One small class per placement, found by name.

A placement gets the job, the cycle's `ClusterState` and the (pool, model) buckets the job may use, and returns
one `Placement` per node of the job (a gang gets all its nodes or nothing) or None when it does not fit now.
`caps` limits the GPUs it may take on some nodes (backfill keeps a reservation's GPUs out of reach).
On every node the GPUs come from the island (NVLink group) that fits them most tightly.

- `binpack`: the fullest node that fits, keeping whole nodes free for big jobs.
- `spread`: the emptiest node, spreading load and heat.
- `topology`: like binpack, but prefers a node where the job's GPUs fit inside one island.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import ClassVar, Protocol

from nanum.core.model import Job, Placement
from nanum.core.state import ClusterState, NodeFree

Keys = list[tuple[str | None, str]]
TOPOLOGY_SCAN = 32


class PlacementPolicy(Protocol):
    name: ClassVar[str]

    def place(
        self, state: ClusterState, job: Job, keys: Keys, caps: Mapping[int, int] | None = None
    ) -> tuple[Placement, ...] | None:
        """Choose GPUs for `job`, or None. Must not mutate `state`: the cycle takes the GPUs it accepts."""
        ...


def fits(nf: NodeFree, job: Job, caps: Mapping[int, int] | None) -> bool:
    free = len(nf.free)
    if caps is not None and nf.index in caps:
        free = min(free, caps[nf.index])
    return free >= job.gpus and nf.fits_extras(job)


def _first(nodes: Iterable[NodeFree], job: Job, caps: Mapping[int, int] | None) -> tuple[Placement, ...] | None:
    chosen: list[NodeFree] = []
    for nf in nodes:
        if fits(nf, job, caps):
            chosen.append(nf)
            if len(chosen) == job.nodes:
                return tuple(Placement(c.node.name, c.pick_gpus(job.gpus)) for c in chosen)
    return None


class BinPack:
    name: ClassVar[str] = "binpack"

    def place(
        self, state: ClusterState, job: Job, keys: Keys, caps: Mapping[int, int] | None = None
    ) -> tuple[Placement, ...] | None:
        return _first(state.candidates(keys, job.gpus, fullest_first=True), job, caps)


class Spread:
    name: ClassVar[str] = "spread"

    def place(
        self, state: ClusterState, job: Job, keys: Keys, caps: Mapping[int, int] | None = None
    ) -> tuple[Placement, ...] | None:
        return _first(state.candidates(keys, job.gpus, fullest_first=False), job, caps)


class Topology:
    name: ClassVar[str] = "topology"

    def place(
        self, state: ClusterState, job: Job, keys: Keys, caps: Mapping[int, int] | None = None
    ) -> tuple[Placement, ...] | None:
        if job.nodes > 1:
            return _first(state.candidates(keys, job.gpus, fullest_first=True), job, caps)
        fallback: NodeFree | None = None
        for seen, nf in enumerate(state.candidates(keys, job.gpus, fullest_first=True)):
            if not fits(nf, job, caps):
                continue
            if nf.island_fit(job.gpus):
                return (Placement(nf.node.name, nf.pick_gpus(job.gpus)),)
            fallback = fallback or nf
            if seen >= TOPOLOGY_SCAN:
                break
        return None if fallback is None else (Placement(fallback.node.name, fallback.pick_gpus(job.gpus)),)


PLACEMENTS: dict[str, type[PlacementPolicy]] = {p.name: p for p in (BinPack, Spread, Topology)}
