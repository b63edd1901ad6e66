"""Usage meters: decayed GPU-seconds (for fair-share) and GPU-seconds in the budget period, per lab and per user.

A meter integrates exactly between events: with `rate` GPUs in use since `t`, decayed usage at `t'` is
`D·f + rate·h/ln2·(1 − f)` where `f = 2^(−(t'−t)/h)` — the same exponential decay `nanum.core.decay` applies
(usage seen `h` seconds ago counts half). Budget periods are calendar months (UTC) when trace times are dates,
else 30-day periods from time 0.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import UTC, datetime

from nanum.core import decay

EPOCH_LIKE = 1e8  # a trace whose times exceed this uses dates (epoch seconds)
PERIOD = 30 * 86400.0
LN2 = math.log(2.0)


@dataclass(frozen=True, slots=True)
class Period:
    index: int
    start: float
    end: float
    label: str


def period_of(t: float) -> Period:
    """The budget period holding time `t`: [start, end)."""
    if t >= EPOCH_LIKE:
        moment = datetime.fromtimestamp(t, UTC)
        start = datetime(moment.year, moment.month, 1, tzinfo=UTC)
        end = datetime(moment.year + moment.month // 12, moment.month % 12 + 1, 1, tzinfo=UTC)
        return Period(moment.year * 12 + moment.month, start.timestamp(), end.timestamp(), moment.strftime("%B %Y"))
    index = int(t // PERIOD)
    return Period(index, index * PERIOD, (index + 1) * PERIOD, f"period {index + 1} (30 days)")


class Calendar:
    """period_of with the current period remembered (times mostly move forward)."""

    def __init__(self) -> None:
        self._current: Period | None = None

    def at(self, t: float) -> Period:
        p = self._current
        if p is None or not p.start <= t < p.end:
            p = self._current = period_of(t)
        return p


@dataclass(slots=True)
class Meter:
    half_life: float
    t: float = 0.0
    rate: float = 0.0
    decayed: float = 0.0
    period: int = -1
    period_used: float = 0.0

    def advance(self, t: float, period: Period) -> None:
        dt = t - self.t
        if dt > 0:
            f = decay(1.0, dt, self.half_life)
            self.decayed = self.decayed * f + self.rate * self.half_life / LN2 * (1.0 - f)
        if period.index != self.period:
            self.period_used = self.rate * max(t - max(period.start, self.t), 0.0)
            self.period = period.index
        elif dt > 0:
            self.period_used += self.rate * dt
        self.t = max(self.t, t)

    def change(self, t: float, period: Period, gpus: int) -> None:
        self.advance(t, period)
        self.rate += gpus


class Meters:
    """One meter per name, created on first use."""

    def __init__(self, half_life: float) -> None:
        self.half_life = half_life
        self.by_name: dict[str, Meter] = {}

    def change(self, name: str, t: float, period: Period, gpus: int) -> None:
        meter = self.by_name.get(name)
        if meter is None:
            meter = self.by_name[name] = Meter(self.half_life, t=t, period=period.index)
        meter.change(t, period, gpus)

    def read(self, t: float, period: Period) -> dict[str, tuple[float, float]]:
        """name → (decayed GPU-seconds, GPU-hours in this period) at time t."""
        out: dict[str, tuple[float, float]] = {}
        for name, meter in self.by_name.items():
            meter.advance(t, period)
            out[name] = (meter.decayed, meter.period_used / 3600.0)
        return out
