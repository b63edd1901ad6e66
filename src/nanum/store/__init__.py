"""The store: SQLAlchemy models, Alembic migrations and the database connection.

The store is the single source of truth for desired state: what should run where. SQLite (WAL) in the state
directory by default, PostgreSQL for production (`--db postgresql+psycopg://...`).
"""

from nanum.store.db import Database, sqlite_url
from nanum.store.environments import DatasetRow, EnvironmentRow
from nanum.store.migrate import upgrade
from nanum.store.models import (
    AllocationRow,
    AuditRow,
    Base,
    EventRow,
    JobRow,
    LabRow,
    MembershipRow,
    NodeRow,
    SegmentRow,
    TokenRow,
    UsageRow,
    UserRow,
    table,
)
from nanum.store.monitoring import ContactRow, GpuSampleRow, JobStatsRow, MonitorSettingRow, NodeLiveRow

__all__ = [
    "AllocationRow",
    "AuditRow",
    "Base",
    "ContactRow",
    "Database",
    "DatasetRow",
    "EnvironmentRow",
    "EventRow",
    "GpuSampleRow",
    "JobRow",
    "JobStatsRow",
    "LabRow",
    "MembershipRow",
    "MonitorSettingRow",
    "NodeLiveRow",
    "NodeRow",
    "SegmentRow",
    "TokenRow",
    "UsageRow",
    "UserRow",
    "sqlite_url",
    "table",
    "upgrade",
]
