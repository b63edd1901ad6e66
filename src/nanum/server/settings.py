"""Server settings: where state lives, which database, and the knobs of the scheduler and the agent protocol."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from nanum.store.db import sqlite_url


@dataclass(frozen=True, slots=True, kw_only=True)
class ServerSettings:
    """`home` holds the SQLite database (unless `db_url` names another), job logs and checkpoints."""

    home: Path
    db_url: str | None = None
    allow_root_jobs: bool = False
    policy: str = "fifo+binpack+backfill"
    estimate_depth: int = 50
    #: A node not heard from for this long is down; its running jobs are requeued.
    node_timeout_s: float = 60.0
    #: The scheduler runs on every event and at least this often.
    tick_interval_s: float = 1.0
    grace_s: float = 60.0
    heartbeat_interval_s: float = 2.0
    checkpoint_root: Path | None = None

    @property
    def database_url(self) -> str:
        return self.db_url or sqlite_url(self.home)

    @property
    def logs_dir(self) -> Path:
        return self.home / "logs"

    @property
    def checkpoints_dir(self) -> Path:
        return self.checkpoint_root or self.home / "checkpoints"
