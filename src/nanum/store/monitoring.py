"""The monitoring schema: GPU readings at three resolutions, each node's latest reading, per-job tallies and idle
state, monitoring settings, and how to reach each user.

`gpu_samples` holds readings at full rate (`res` 0) and rolled up into 1-minute (`res` 60) and 1-hour (`res`
3600) buckets: `at` is the reading's time or the bucket's start, `n` the readings in it, `util`/`memory_mb`
their averages and `util_max`/`memory_max` their peaks. `job_id` 0 means no job held the GPU. Old rows are
pruned per resolution.
Created by migration 0003_monitoring.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import JSON, Float, ForeignKey, Index, Integer, String, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

from nanum.store.models import Base


class GpuSampleRow(Base):
    __tablename__ = "gpu_samples"
    __table_args__ = (
        UniqueConstraint("node_id", "gpu_index", "res", "at", "job_id", name="uq_gpu_samples"),
        Index("ix_gpu_samples_job", "job_id", "res", "at"),
        Index("ix_gpu_samples_res_at", "res", "at"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    node_id: Mapped[int] = mapped_column(ForeignKey("nodes.id", ondelete="CASCADE"))
    gpu_index: Mapped[int] = mapped_column(Integer)
    res: Mapped[int] = mapped_column(Integer)
    at: Mapped[float] = mapped_column(Float)
    job_id: Mapped[int] = mapped_column(Integer, default=0)
    util: Mapped[float] = mapped_column(Float)
    util_max: Mapped[float] = mapped_column(Float)
    memory_mb: Mapped[float] = mapped_column(Float)
    memory_max: Mapped[int] = mapped_column(Integer)
    power_w: Mapped[float | None] = mapped_column(Float)
    temperature_c: Mapped[float | None] = mapped_column(Float)
    n: Mapped[int] = mapped_column(Integer, default=1)


class NodeLiveRow(Base):
    """A node's latest reading: `gpus` as the agent sent them, `jobs` its job samples, `rogue` the indices of
    GPUs on which a process no job owns runs."""

    __tablename__ = "node_live"

    node_id: Mapped[int] = mapped_column(ForeignKey("nodes.id", ondelete="CASCADE"), primary_key=True)
    time: Mapped[float] = mapped_column(Float)
    gpus: Mapped[list[dict[str, Any]]] = mapped_column(JSON)
    jobs: Mapped[list[dict[str, Any]]] = mapped_column(JSON)
    rogue: Mapped[list[int]] = mapped_column(JSON)


class JobStatsRow(Base):
    """A job's running tally of readings (see `nanum.monitor.efficiency.Tally`), its latest figures, its idle
    state (see `nanum.monitor.idle.IdleState`), and once it ended its efficiency summary and a compact timeline
    `[[t, util, memory_mb], ...]`."""

    __tablename__ = "job_stats"

    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), primary_key=True)
    readings: Mapped[int] = mapped_column(Integer, default=0)
    util_sum: Mapped[float] = mapped_column(Float, default=0.0)
    util_peak: Mapped[float] = mapped_column(Float, default=0.0)
    memory_sum: Mapped[float] = mapped_column(Float, default=0.0)
    memory_peak: Mapped[int] = mapped_column(Integer, default=0)
    cpu_sum: Mapped[float] = mapped_column(Float, default=0.0)
    idle: Mapped[int] = mapped_column(Integer, default=0)
    first: Mapped[float | None] = mapped_column(Float)
    last: Mapped[float | None] = mapped_column(Float)
    util_now: Mapped[float | None] = mapped_column(Float)
    memory_now: Mapped[int | None] = mapped_column(Integer)
    cpu_now: Mapped[float | None] = mapped_column(Float)
    gpu_model: Mapped[str | None] = mapped_column(String(64))
    gpu_memory_mb: Mapped[int | None] = mapped_column(Integer)
    idle_stage: Mapped[str] = mapped_column(String(16), default="active")
    idle_since: Mapped[float | None] = mapped_column(Float)
    idle_last_time: Mapped[float | None] = mapped_column(Float)
    idle_last_memory: Mapped[int | None] = mapped_column(Integer)
    idle_last_activity: Mapped[float | None] = mapped_column(Float)
    flagged_at: Mapped[float | None] = mapped_column(Float)
    #: node id (as a string) → time of the last reading counted from that node, so a resent one counts once.
    marks: Mapped[dict[str, float]] = mapped_column(JSON, default=dict)
    summary: Mapped[dict[str, Any] | None] = mapped_column(JSON(none_as_null=True))
    timeline: Mapped[list[list[float]] | None] = mapped_column(JSON(none_as_null=True))


class MonitorSettingRow(Base):
    """Monitoring settings by key: `idle` (the server's idle policy), `idle.lab.<id>` (a lab's), `notify`
    (webhook and SMTP), `web.secret` (signs dashboard sessions), `rollup.<res>` (how far rollups got)."""

    __tablename__ = "monitor_settings"

    key: Mapped[str] = mapped_column(String(64), primary_key=True)
    value: Mapped[Any] = mapped_column(JSON)


class ContactRow(Base):
    """Where a user hears about their jobs: an email address and/or a personal webhook."""

    __tablename__ = "contacts"

    user_id: Mapped[int] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), primary_key=True)
    email: Mapped[str | None] = mapped_column(String(255))
    webhook: Mapped[str | None] = mapped_column(String(1024))
