"""SVG charts drawn on the server: a utilisation timeline and bar charts. No script needed to show them; the job
page's script only swaps in fresh `points` from the JSON endpoint, which carries the same geometry."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime

WIDTH, HEIGHT = 720, 200
PAD_LEFT, PAD_RIGHT, PAD_TOP, PAD_BOTTOM = 40, 12, 10, 24


@dataclass(frozen=True, slots=True)
class Tick:
    x: float
    label: str


@dataclass(frozen=True, slots=True)
class Timeline:
    """A line per series over [t0, t1]; y is 0-100 % (memory as a share of the GPU's)."""

    util: str
    memory: str
    ticks: tuple[Tick, ...]
    empty: bool
    width: int = WIDTH
    height: int = HEIGHT
    left: int = PAD_LEFT
    right: int = WIDTH - PAD_RIGHT
    top: int = PAD_TOP
    bottom: int = HEIGHT - PAD_BOTTOM
    grid: tuple[tuple[float, str], ...] = field(default=())


def timeline(points: list[list[float]], t0: float, t1: float, memory_total_mb: int | None) -> Timeline:
    """`points` are `[t, util, memory_mb]` rows (see `nanum.server.services.history`)."""
    t1 = max(t1, t0 + 1.0)
    plot_w, plot_h = WIDTH - PAD_LEFT - PAD_RIGHT, HEIGHT - PAD_TOP - PAD_BOTTOM

    def x(t: float) -> float:
        return PAD_LEFT + plot_w * min(max((t - t0) / (t1 - t0), 0.0), 1.0)

    def y(value: float) -> float:
        return PAD_TOP + plot_h * (1 - min(max(value, 0.0), 100.0) / 100.0)

    if len(points) == 1:  # one reading: a short stroke, so it shows
        points = [points[0], [points[0][0] + (t1 - t0) / 200, *points[0][1:]]]
    util = " ".join(f"{x(p[0]):.1f},{y(p[1]):.1f}" for p in points)
    share = (lambda mb: 100.0 * mb / memory_total_mb) if memory_total_mb else (lambda mb: 0.0)
    memory = " ".join(f"{x(p[0]):.1f},{y(share(p[2])):.1f}" for p in points) if memory_total_mb else ""
    grid = tuple((y(v), f"{v}%") for v in (0, 25, 50, 75, 100))
    return Timeline(util, memory, _ticks(t0, t1, x), not points, grid=grid)


def _ticks(t0: float, t1: float, x: object) -> tuple[Tick, ...]:
    span = t1 - t0
    steps = (10, 30, 60, 300, 900, 1800, 3600, 6 * 3600, 86400, 7 * 86400)
    step = next((s for s in steps if span / s <= 6), 30 * 86400)
    fmt = "%H:%M:%S" if step < 60 else "%H:%M" if span < 2 * 86400 else "%m-%d"
    first = (int(t0) // step + 1) * step
    assert callable(x)
    return tuple(Tick(x(t), datetime.fromtimestamp(t, UTC).strftime(fmt)) for t in range(first, int(t1), step))


@dataclass(frozen=True, slots=True)
class Bar:
    label: str
    value: float
    x: float
    y: float
    w: float
    h: float
    text: str


@dataclass(frozen=True, slots=True)
class Bars:
    bars: tuple[Bar, ...]
    width: int
    height: int
    max_value: float
    unit: str


#: The least top of a bar chart's scale (one GPU-hour): values are shown to a tenth, and a few GPU-seconds drawn
#: against themselves filled the whole chart while reading "0.0".
MIN_TOP = 1.0


def columns(items: list[tuple[str, float]], unit: str, width: int = WIDTH, height: int = 160) -> Bars:
    """Vertical bars (e.g. GPU-hours per day), labelled below every few bars."""
    top = max(max((v for _, v in items), default=0.0), MIN_TOP)
    slot = (width - PAD_LEFT - 20) / max(len(items), 1)
    plot_h = height - PAD_TOP - PAD_BOTTOM
    bars = []
    for i, (label, value) in enumerate(items):
        h = plot_h * value / top
        bars.append(Bar(label, value, PAD_LEFT + i * slot + 1, PAD_TOP + plot_h - h, max(slot - 2, 1), h,
                        f"{label}: {value:,.1f} {unit}"))  # fmt: skip
    return Bars(tuple(bars), width, height, top, unit)


def rows(items: list[tuple[str, float]], unit: str, width: int = WIDTH, row_h: int = 22) -> Bars:
    """Horizontal bars (e.g. GPU-hours per user), largest first."""
    items = sorted(items, key=lambda kv: -kv[1])
    top = max(max((v for _, v in items), default=0.0), MIN_TOP)
    label_w, plot_w = 140, width - 140 - 90
    bars = tuple(
        Bar(label, value, label_w, i * row_h + 3, max(plot_w * value / top, 1), row_h - 6, f"{value:,.1f} {unit}")
        for i, (label, value) in enumerate(items)
    )
    return Bars(bars, width, max(len(items), 1) * row_h, top, unit)
