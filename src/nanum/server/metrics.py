"""`/metrics` for Prometheus: GPUs, jobs, the queue and the scheduler.

Cluster figures are read from the store at scrape time (so every server sharing a database reports the same;
on a large cluster, the view the dashboard read within the second, `services.cluster.shared`); the job counts and
waits are kept from scrape to scrape, each reading only the jobs written since the last (`nanum.server.jobtally`);
the scheduler's cycle time is observed by the scheduling server as it ticks. The processes of one server
(`nanum server --workers`) keep their observations in files of a directory they share (`MULTIPROCESS_ENV`, set
by the first process), so whichever answers a scrape reports the cycles of all of them. Metrics:

- `nanum_gpu_utilization_percent`, `nanum_gpu_memory_used_bytes`, `nanum_gpu_memory_total_bytes`,
  `nanum_gpu_power_watts`, `nanum_gpu_temperature_celsius` {node, gpu, model}: the latest reading;
- `nanum_gpu_allocated` {node, gpu[, lab, user]}: 1 while a job holds the GPU (lab and user name the holder);
- `nanum_gpu_state` {node, gpu, state}: 1 for the GPU's state (busy, idle, free, rogue, drained, down);
- `nanum_gpus` {state}: GPUs per state; `nanum_node_up` {node};
- `nanum_jobs` {state}: jobs per state; `nanum_queue_length` {[lab]}: pending jobs per lab;
- `nanum_job_wait_seconds` {[lab]}: histogram of the time jobs waited before they (last) started;
- `nanum_scheduler_cycle_seconds`: histogram of scheduling cycle times;
- `nanum_idle_jobs` {stage}: running jobs flagged idle or being released.

`/metrics` needs no token, so it names users and labs only when the server runs with `--metrics-names`
(`ServerSettings.metrics_names`); otherwise the lab and user labels are left out and the per-lab series are
summed into one.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from typing import Any

from prometheus_client import CollectorRegistry, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector
from sqlalchemy import func, select

from nanum.server.context import ServerContext
from nanum.server.jobtally import JobTally
from nanum.server.services.cluster import Totals, shared
from nanum.store import JobRow, JobStatsRow, LabRow

WAIT_BUCKETS = (10.0, 60.0, 300.0, 900.0, 3600.0, 4 * 3600.0, 12 * 3600.0, 86400.0, 3 * 86400.0, 7 * 86400.0)
#: Fine around the 100 ms to 1 s a large cluster's cycle takes, so that a percentile read from the histogram
#: (interpolated within its bucket) is not off by half a bucket of 250 ms.
CYCLE_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.25, 0.3, 0.4, 0.5, 0.6, 0.75, 1.0,
                 1.5, 2.5, 5.0, 10.0, 30.0, 60.0)
MIB = 1024 * 1024
#: Where the processes of one server keep their observations (prometheus_client's multi-process mode).
MULTIPROCESS_ENV = "PROMETHEUS_MULTIPROC_DIR"


class Metrics:
    """One registry per app: the cluster collector and the scheduler's cycle histogram."""

    def __init__(self, ctx: ServerContext) -> None:
        # Not described on registering: that would read the whole cluster from the store while the app is made.
        self.registry = CollectorRegistry(auto_describe=False)
        shared = os.environ.get(MULTIPROCESS_ENV)
        if shared:
            from prometheus_client import multiprocess, values

            values.ValueClass = values.get_value_class()  # type: ignore[no-untyped-call]  # into files, read by all
            multiprocess.MultiProcessCollector(self.registry, path=shared)  # type: ignore[no-untyped-call]
        self.cycle = Histogram(
            "nanum_scheduler_cycle_seconds",
            "Time of one scheduling cycle",
            buckets=CYCLE_BUCKETS,
            registry=None if shared else self.registry,
        )
        self.registry.register(ClusterCollector(ctx))

    def observe_cycle(self, seconds: float) -> None:
        self.cycle.observe(seconds)

    def render(self) -> bytes:
        return generate_latest(self.registry)


class ClusterCollector(Collector):
    def __init__(self, ctx: ServerContext) -> None:
        self.ctx = ctx
        self.tally = JobTally(WAIT_BUCKETS)

    @property
    def names(self) -> bool:
        return self.ctx.settings.metrics_names

    def collect(self) -> Iterator[Metric]:
        yield from self._gpus()
        yield from self._jobs()

    def _gpus(self) -> Iterator[Metric]:
        view = shared(self.ctx)
        labels = ["node", "gpu", "model"]
        util = GaugeMetricFamily("nanum_gpu_utilization_percent", "GPU utilisation, latest reading", labels=labels)
        used = GaugeMetricFamily("nanum_gpu_memory_used_bytes", "GPU memory in use, latest reading", labels=labels)
        total = GaugeMetricFamily("nanum_gpu_memory_total_bytes", "GPU memory", labels=labels)
        power = GaugeMetricFamily("nanum_gpu_power_watts", "GPU power draw, latest reading", labels=labels)
        temp = GaugeMetricFamily("nanum_gpu_temperature_celsius", "GPU temperature, latest reading", labels=labels)
        who = ["lab", "user"] if self.names else []
        alloc = GaugeMetricFamily("nanum_gpu_allocated", "1 while a job holds the GPU", labels=["node", "gpu", *who])
        state = GaugeMetricFamily("nanum_gpu_state", "1 for the GPU's current state", labels=["node", "gpu", "state"])
        up = GaugeMetricFamily("nanum_node_up", "1 while the node is up", labels=["node"])
        for node in view.nodes:
            up.add_metric([node.name], 1.0 if node.state == "up" else 0.0)
            for g in node.gpus:
                key = [node.name, str(g.index), g.model]
                total.add_metric(key, g.memory_mb * MIB)
                _maybe(util, key, g.util)
                _maybe(used, key, None if g.memory_used_mb is None else g.memory_used_mb * MIB)
                _maybe(power, key, g.power_w)
                _maybe(temp, key, g.temperature_c)
                holder = [g.lab or "", g.user or ""] if self.names else []
                alloc.add_metric([node.name, str(g.index), *holder], 0.0 if g.job_id is None else 1.0)
                state.add_metric([node.name, str(g.index), g.state], 1.0)
        states = GaugeMetricFamily("nanum_gpus", "GPUs per state", labels=["state"])
        for name in Totals.STATES:
            states.add_metric([name], getattr(view.totals, name))
        yield from (util, used, total, power, temp, alloc, state, up, states)

    def _jobs(self) -> Iterator[Metric]:
        with self.ctx.db.read(one_moment=True) as s:
            self.tally.update(s)  # the jobs written since the last scrape (`nanum.server.jobtally`)
            labs = dict(s.execute(select(LabRow.id, LabRow.name)).all())
            idle = s.execute(
                select(JobStatsRow.idle_stage, func.count())
                .join(JobRow, JobRow.id == JobStatsRow.job_id)
                .where(JobRow.state == "running", JobStatsRow.idle_stage.in_(("flagged", "released")))
                .group_by(JobStatsRow.idle_stage)
            ).all()
        by_state, pending, waits = self.tally.snapshot()
        jobs = GaugeMetricFamily("nanum_jobs", "Jobs per state", labels=["state"])
        for name, count in sorted(by_state.items()):
            jobs.add_metric([name], count)
        length = GaugeMetricFamily("nanum_queue_length", "Pending jobs per lab", labels=["lab"] if self.names else [])
        if self.names:
            for lab_id, lab in sorted(labs.items(), key=lambda item: item[1]):
                length.add_metric([lab], pending.get(lab_id, 0))
        else:
            length.add_metric([], sum(pending.values()))
        flagged = GaugeMetricFamily("nanum_idle_jobs", "Running jobs flagged idle, by stage", labels=["stage"])
        found = dict(idle)
        for stage in ("flagged", "released"):
            flagged.add_metric([stage], found.get(stage, 0))
        rows = [(labs.get(lab_id, str(lab_id)), w.count, w.micros / 1_000_000, *w.cumulative())
                for lab_id, w in sorted(waits.items())]
        yield from (jobs, length, _wait_histogram(rows if self.names else _summed(rows), self.names), flagged)


def _maybe(family: GaugeMetricFamily, labels: list[str], value: float | None) -> None:
    if value is not None:
        family.add_metric(labels, float(value))


def _summed(rows: Sequence[Any]) -> list[tuple[Any, ...]]:
    """The per-lab wait rows as one row for the whole cluster (no lab named)."""
    columns = [list(r)[1:] for r in rows]
    return [("", *(sum(float(v or 0) for v in col) for col in zip(*columns, strict=True)))] if columns else []


def _wait_histogram(rows: Sequence[Any], names: bool) -> HistogramMetricFamily:
    family = HistogramMetricFamily(
        "nanum_job_wait_seconds", "Time jobs waited in the queue before they started", labels=["lab"] if names else []
    )
    for lab, count, total, *cumulative in rows:
        buckets = [(_le(b), float(c or 0)) for b, c in zip(WAIT_BUCKETS, cumulative, strict=True)]
        family.add_metric([lab] if names else [], [*buckets, ("+Inf", float(count))], float(total or 0.0))
    return family


def _le(bound: float) -> str:
    return f"{bound:g}" if bound < 1e6 else repr(bound)
