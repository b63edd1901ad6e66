"""How a job's predicted run time reads, the same in `nanum show` and on its web page; each passes its own way of
writing a duration."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def prediction_text(job: dict[str, Any], duration: Callable[[float], str]) -> str | None:
    """`2:10:00 run time (mean of the last 14 finished jobs of alice named train)`, or why there is none; None
    when the job carries no prediction (ended, or not yet seen by a scheduling tick)."""
    basis, seconds, limit = job.get("prediction_basis"), job.get("predicted_runtime_s"), job.get("time_limit_s")
    if not basis:
        return None
    if seconds is None:
        used = f"its time limit {duration(limit)} is used" if limit is not None else "it has no time limit either"
        return f"none ({basis}; {used})"
    capped = f"; its time limit {duration(limit)} is used" if limit is not None and limit < seconds else ""
    return f"{duration(seconds)} run time ({basis}{capped})"
