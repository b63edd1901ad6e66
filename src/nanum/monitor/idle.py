"""Idle detection: when a running job counts as idle, and what happens as its idle time grows.

Pure: readings and the clock come in, a new state and the steps to take come out. The server keeps an
`IdleState` per running job and feeds it every reading its agents report (`observe`); the steps become events
(with their evidence), notifications and, past the second window, a request to checkpoint and stop.

A reading is *active* when any of these holds:

1. some GPU of the job is busy: utilisation above `util_percent` (default 5 %);
2. its GPU memory in use moved by more than `memory_delta_mb` since the previous reading (a model loading);
3. its processes are busy on the CPU: above `cpu_percent` of one core (preprocessing, or waiting on input);
4. a notebook's kernel was active since the previous reading (where the agent can tell).

A reading from a job whose process is gone is ignored: the job is ending. An idle streak starts at the first
idle reading (or at the notebook's last activity, if that is later) and ends at the next active reading.

Steps, by how long the streak has lasted:

- `flag_after` (defaults: 30 min for batch jobs, 2 h for notebooks): FLAG. Shown on the dashboard and in
  `nanum ps`; the owner is notified.
- `release_after` (defaults: 4 h for notebooks, never for batch jobs; a lab may set both): RELEASE. The job
  is asked to checkpoint (SIGTERM, with its preempt file) and its GPUs are released.
- active again after a FLAG: CLEAR.

Example, a notebook with the defaults: idle readings from 10:00 on; at 12:00 → FLAG ("idle 2h: ..."); a cell
runs at 12:20 → CLEAR; idle again from 12:25; at 14:25 → FLAG; at 16:25 → RELEASE.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace

__all__ = ["IdlePolicy", "IdleState", "PolicyError", "Reading", "Stage", "Step", "StepKind", "observe"]


class PolicyError(ValueError):
    """An idle policy setting that is not valid; the message names it."""


class Stage(enum.Enum):
    ACTIVE = "active"
    IDLE = "idle"  # in an idle streak, not flagged yet
    FLAGGED = "flagged"
    RELEASED = "released"  # asked to stop; nothing more happens


class StepKind(enum.Enum):
    FLAG = "idle-flagged"
    CLEAR = "idle-cleared"
    RELEASE = "idle-released"


@dataclass(frozen=True, slots=True, kw_only=True)
class Reading:
    """One reading of one running job (or one node's part of a gang)."""

    time: float
    gpu_util: float  # the highest utilisation among the job's GPUs, percent
    gpu_memory_mb: int  # memory in use on the job's GPUs, summed
    cpu_percent: float = 0.0  # percent of one core, summed over the job's processes
    alive: bool = True
    last_activity: float | None = None  # a notebook kernel's last activity, where known


@dataclass(frozen=True, slots=True, kw_only=True)
class IdleState:
    stage: Stage = Stage.ACTIVE
    idle_since: float | None = None
    last_time: float | None = None
    last_memory_mb: int | None = None
    last_activity: float | None = None


@dataclass(frozen=True, slots=True)
class Step:
    kind: StepKind
    idle_for_s: float
    evidence: str


@dataclass(frozen=True, slots=True, kw_only=True)
class IdlePolicy:
    """Thresholds and windows. A window of None never fires."""

    util_percent: float = 5.0
    memory_delta_mb: int = 256
    cpu_percent: float = 25.0
    batch_flag_s: float | None = 1800.0
    batch_release_s: float | None = None
    notebook_flag_s: float | None = 7200.0
    notebook_release_s: float | None = 14400.0

    def windows(self, kind: str) -> tuple[float | None, float | None]:
        """(flag after, release after) in seconds of idleness for a job of `kind`."""
        if kind == "notebook":
            return self.notebook_flag_s, self.notebook_release_s
        return self.batch_flag_s, self.batch_release_s

    def merged(self, overrides: Mapping[str, object]) -> IdlePolicy:
        """This policy with `overrides` applied (a lab's or the server's settings). Raises PolicyError."""
        known = {f.name for f in fields(self)}
        changes: dict[str, object] = {}
        for key, value in overrides.items():
            if key not in known:
                raise PolicyError(f"unknown idle setting {key!r}; known: {', '.join(sorted(known))}")
            changes[key] = _checked(key, value)
        return replace(self, **changes)  # type: ignore[arg-type]

    def as_dict(self) -> dict[str, float | int | None]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


def _checked(key: str, value: object) -> float | int | None:
    if value is None and key.endswith("_s"):
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        raise PolicyError(f"idle setting {key} must be a number ≥ 0" + (" or null" if key.endswith("_s") else ""))
    return int(value) if key == "memory_delta_mb" else float(value)


def observe(
    state: IdleState, reading: Reading, policy: IdlePolicy, kind: str, now: float
) -> tuple[IdleState, list[Step]]:
    """Fold one reading into `state`; return the new state and the steps to take now (often none).

    Readings older than the last one seen are ignored, as are readings once the job was released."""
    if state.stage is Stage.RELEASED or not reading.alive:
        return state, []
    if state.last_time is not None and reading.time < state.last_time:
        return state, []
    activity = _latest(state.last_activity, reading.last_activity)
    seen = replace(state, last_time=reading.time, last_memory_mb=reading.gpu_memory_mb, last_activity=activity)
    why_active = _activity(state, reading, policy)
    if why_active is not None:
        steps = [Step(StepKind.CLEAR, 0.0, f"active again: {why_active}")] if state.stage is Stage.FLAGGED else []
        return replace(seen, stage=Stage.ACTIVE, idle_since=None), steps
    since = min(state.idle_since if state.idle_since is not None else reading.time, now)
    if activity is not None and activity > since:
        since = min(activity, now)
    seen = replace(seen, idle_since=since, stage=Stage.IDLE if state.stage is Stage.ACTIVE else state.stage)
    return _escalate(seen, reading, policy, kind, now)


def _escalate(
    state: IdleState, reading: Reading, policy: IdlePolicy, kind: str, now: float
) -> tuple[IdleState, list[Step]]:
    assert state.idle_since is not None
    idle_for = now - state.idle_since
    flag_after, release_after = policy.windows(kind)
    steps: list[Step] = []
    stage = state.stage
    if stage is Stage.IDLE and flag_after is not None and idle_for >= flag_after:
        stage = Stage.FLAGGED
        steps.append(Step(StepKind.FLAG, idle_for, evidence(reading, state, policy, idle_for)))
    if release_after is not None and idle_for >= release_after:
        stage = Stage.RELEASED
        steps.append(Step(StepKind.RELEASE, idle_for, evidence(reading, state, policy, idle_for)))
    return replace(state, stage=stage), steps


def _activity(state: IdleState, reading: Reading, policy: IdlePolicy) -> str | None:
    """Why `reading` counts as active, in words; None when it is idle."""
    if reading.gpu_util > policy.util_percent:
        return f"GPU utilisation {reading.gpu_util:.0f}%"
    if state.last_memory_mb is not None and abs(reading.gpu_memory_mb - state.last_memory_mb) > policy.memory_delta_mb:
        return f"GPU memory moved from {_mib(state.last_memory_mb)} to {_mib(reading.gpu_memory_mb)}"
    if reading.cpu_percent > policy.cpu_percent:
        return f"CPU busy ({reading.cpu_percent:.0f}% of a core)"
    if reading.last_activity is not None and state.last_time is not None and reading.last_activity > state.last_time:
        return f"notebook active {_before(reading.time - reading.last_activity)}"
    return None


def evidence(reading: Reading, state: IdleState, policy: IdlePolicy, idle_for: float) -> str:
    """Why the job is judged idle, in one line: every signal with its value."""
    activity = _latest(state.last_activity, reading.last_activity)
    parts = [
        f"idle for {duration(idle_for)}",
        f"GPU utilisation at most {policy.util_percent:g}% (now {reading.gpu_util:.0f}%)",
        f"GPU memory {_mib(reading.gpu_memory_mb)} in use, steady",
        f"CPU {reading.cpu_percent:.0f}% of a core",
        "process alive",
        f"last notebook activity {_before(reading.time - activity)}"
        if activity is not None
        else "no notebook activity seen",
    ]
    return "; ".join(parts)


def duration(seconds: float) -> str:
    """`5400` → `1h 30m`, `95` → `1m 35s`."""
    s = max(int(seconds), 0)
    d, h, m, sec = s // 86400, s % 86400 // 3600, s % 3600 // 60, s % 60
    parts = [(d, "d"), (h, "h"), (m, "m")] if s >= 3600 else [(m, "m"), (sec, "s")]
    return " ".join(f"{n}{u}" for n, u in parts if n) or "0s"


def _mib(mb: int) -> str:
    return f"{mb / 1024:.1f} GiB" if mb >= 1024 else f"{mb} MiB"


def _before(seconds: float) -> str:
    return "at this reading" if seconds < 1 else f"{duration(seconds)} before this reading"


def _latest(a: float | None, b: float | None) -> float | None:
    if a is None:
        return b
    return a if b is None else max(a, b)
