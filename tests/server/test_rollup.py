"""GPU readings rolled up into minute and hour buckets: each bucket's means (weighted by the
readings a row stands for; power and temperature over the readings that had them), peaks and count are what
summing the readings by hand gives, for several nodes, GPUs and jobs, and a bucket is written once."""

from __future__ import annotations

import math
import random
from collections import defaultdict
from typing import Any

import pytest
from sqlalchemy import select

from nanum.server.context import ServerContext
from nanum.server.services import accounts, history
from nanum.store import GpuSampleRow, NodeRow, table

FIELDS = ("node_id", "gpu_index", "res", "at", "job_id", "util", "util_max", "memory_mb", "memory_max", "power_w",
          "temperature_c", "n")


def readings(rng: random.Random, nodes: list[int], start: float, minutes: int) -> list[dict[str, Any]]:
    """Raw readings every 5 s (a few seconds late or early) of two GPUs per node, some of them with no power or
    temperature, the GPU's job changing now and then."""
    rows = []
    for node in nodes:
        for gpu in (0, 1):
            job = 0
            for k in range(minutes * 12):
                if rng.random() < 0.05:
                    job = rng.choice((0, 7, 8, 9))
                util = rng.uniform(0, 100)
                memory = rng.randrange(0, 80_000)
                rows.append({
                    "node_id": node, "gpu_index": gpu, "res": 0, "at": start + 5 * k + rng.uniform(0, 4.9),
                    "job_id": job, "util": util, "util_max": util, "memory_mb": float(memory), "memory_max": memory,
                    "power_w": None if rng.random() < 0.2 else rng.uniform(50, 400),
                    "temperature_c": None if rng.random() < 0.2 else rng.uniform(30, 90), "n": 1})
    return rows


def by_hand(rows: list[dict[str, Any]], res: int) -> dict[tuple[Any, ...], dict[str, Any]]:
    groups: dict[tuple[Any, ...], list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        groups[(r["node_id"], r["gpu_index"], math.floor(r["at"] / res) * res, r["job_id"])].append(r)

    def mean(rs: list[dict[str, Any]], field: str) -> float | None:
        had = [r for r in rs if r[field] is not None]
        return sum(r[field] * r["n"] for r in had) / sum(r["n"] for r in had) if had else None

    return {key: {"util": mean(rs, "util"), "util_max": max(r["util_max"] for r in rs),
                  "memory_mb": mean(rs, "memory_mb"), "memory_max": max(r["memory_max"] for r in rs),
                  "power_w": mean(rs, "power_w"), "temperature_c": mean(rs, "temperature_c"),
                  "n": sum(r["n"] for r in rs)}
            for key, rs in groups.items()}


def stored(ctx: ServerContext, res: int) -> dict[tuple[Any, ...], dict[str, Any]]:
    with ctx.db.read() as s:
        found = s.execute(select(table(GpuSampleRow)).where(GpuSampleRow.res == res)).mappings().all()
    return {(r["node_id"], r["gpu_index"], r["at"], r["job_id"]): {k: r[k] for k in FIELDS[5:]} for r in found}


def same(got: dict[tuple[Any, ...], dict[str, Any]], want: dict[tuple[Any, ...], dict[str, Any]]) -> None:
    assert got.keys() == want.keys()
    for key, row in want.items():
        for field, value in row.items():
            assert got[key][field] == (None if value is None else pytest.approx(value)), (key, field)


@pytest.mark.parametrize("seed", [1, 2])
def test_minute_and_hour_buckets_are_the_weighted_means_and_peaks_of_their_readings(ctx: ServerContext,
                                                                                 seed: int) -> None:
    rng = random.Random(seed)
    for name in ("gpu-01", "gpu-02"):
        accounts.add_node(ctx, name)
    with ctx.db.read() as s:
        nodes = list(s.scalars(select(NodeRow.id)))
    start = (1_796_000_000 // 3600) * 3600.0  # on the hour
    raw = readings(rng, nodes, start, minutes=150)
    with ctx.db.write() as s:
        s.connection().execute(table(GpuSampleRow).insert(), raw)
    now = start + 3 * 3600 + history.LAG_S
    minutes = by_hand(raw, 60)
    assert history.rollup(ctx, 60, 0, now) == len(minutes)
    same(stored(ctx, 60), minutes)
    minute_rows = [{"node_id": k[0], "gpu_index": k[1], "at": k[2], "job_id": k[3], **v} for k, v in minutes.items()]
    hours = by_hand(minute_rows, 3600)  # from the minute rows, each standing for its readings
    assert history.rollup(ctx, 3600, 60, now) == len(hours)
    same(stored(ctx, 3600), hours)
    direct = by_hand(raw, 3600)  # utilisation and memory as from the readings themselves (a minute row keeps one
    for key, row in hours.items():  # count, of all its readings, so power and temperature weigh by minute there)
        assert [row[f] for f in ("util", "memory_mb", "util_max", "n")] == pytest.approx(
            [direct[key][f] for f in ("util", "memory_mb", "util_max", "n")])
    with ctx.db.write() as s:  # as if another server had not seen this one's rollup: nothing is written twice
        s.connection().execute(table(GpuSampleRow).delete().where(GpuSampleRow.res == 3600,
                                                                   GpuSampleRow.at > start))
    from nanum.server.services import monitor_settings

    with ctx.db.write() as s:
        monitor_settings.put(s, "rollup.3600", start)
    history.rollup(ctx, 3600, 60, now)
    same(stored(ctx, 3600), hours)
