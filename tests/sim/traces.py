"""Where the real public traces are: `$NANUM_TRACES`, else `../shared/traces` beside the checkout."""

from __future__ import annotations

import os
from pathlib import Path


def shared_traces() -> Path:
    """The directory of real traces the trace tests read (they are skipped when it does not exist)."""
    given = os.environ.get("NANUM_TRACES")
    return Path(given).expanduser() if given else Path(__file__).resolve().parents[2].parent / "shared" / "traces"
