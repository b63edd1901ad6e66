"""PNG plots of simulated runs: JCT CDF, GPU utilisation and queue length over time (matplotlib, no display)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from itertools import pairwise
from pathlib import Path
from typing import Any

from nanum.sim.engine import SimResult
from nanum.sim.metrics import jct

DAY = 86400.0
BINS = 600


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def binned(series: Sequence[tuple[float, int, int]], column: int, bins: int = BINS) -> tuple[list[float], list[float]]:
    """Time-weighted mean of a step series (value holds until the next point) in `bins` equal time bins."""
    if len(series) < 2:
        return [s[0] for s in series], [float(s[column]) for s in series]
    t0, t1 = series[0][0], series[-1][0]
    width = max((t1 - t0) / bins, 1e-9)
    sums = [0.0] * bins
    for (ta, *va), (tb, *_) in pairwise(series):
        value = va[column - 1]
        while ta < tb:
            b = min(int((ta - t0) / width), bins - 1)
            edge = min(t0 + (b + 1) * width, tb)
            if edge <= ta:  # rounding at the last bin edge
                edge = tb
            sums[b] += value * (edge - ta)
            ta = edge
    return [(t0 + (i + 0.5) * width - t0) / DAY for i in range(bins)], [s / width for s in sums]


def plot_run(result: SimResult, summary: Mapping[str, Any], out: Path) -> list[Path]:
    plt = _pyplot()
    title = f"{summary['policy_text']} on {summary['cluster']}"
    paths = [plot_cdfs({summary["policy_text"]: [jct(j) for j in result.jobs if j.end is not None]},
                       out / "jct_cdf.png", f"JCT CDF: {title}")]
    days, busy = binned(result.series, 1)
    fig, ax = plt.subplots(figsize=(8, 3.2))
    total = max(result.total_gpus, 1)
    ax.plot(days, [100 * b / total for b in busy], lw=0.8)
    ax.set(xlabel="days since first submission", ylabel="GPUs allocated (%)", ylim=(0, 105),
           title=f"Utilisation: {title}")
    paths.append(_save(plt, fig, out / "utilisation.png"))
    days, queued = binned(result.series, 2)
    fig, ax = plt.subplots(figsize=(8, 3.2))
    ax.plot(days, queued, lw=0.8, color="tab:red")
    ax.set(xlabel="days since first submission", ylabel="pending jobs (mean)", title=f"Queue length: {title}")
    paths.append(_save(plt, fig, out / "queue_length.png"))
    return paths


def plot_cdfs(named: Mapping[str, Sequence[float]], path: Path, title: str, xlabel: str = "JCT (s)") -> Path:
    """CDFs of several samples of seconds on a log axis (values below 1 s drawn at 1 s), one line each."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 4))
    for name, values in named.items():
        data = sorted(max(v, 1.0) for v in values)
        if data:
            ax.plot(data, [(i + 1) / len(data) for i in range(len(data))], lw=1.2, label=name)
    ax.set(xscale="log", xlabel=xlabel, ylabel="fraction of jobs", ylim=(0, 1), title=title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")
    return _save(plt, fig, path)


def plot_bars(labels: Sequence[str], groups: Mapping[str, Sequence[float]], path: Path, title: str,
              ylabel: str, log: bool = False) -> Path:
    """Grouped bars: one group per label, one bar per series."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(min(14, max(7, 0.3 * len(labels) * len(groups))), 4.5))
    width = 0.8 / max(len(groups), 1)
    for k, (name, values) in enumerate(groups.items()):
        ax.bar([i + k * width for i in range(len(labels))], values, width, label=name)
    ax.set_xticks([i + width * (len(groups) - 1) / 2 for i in range(len(labels))], labels, rotation=30, ha="right")
    ax.set(ylabel=ylabel, title=title)
    if log:
        ax.set_yscale("log")
    ax.legend(fontsize=8)
    ax.grid(axis="y", alpha=0.3)
    return _save(plt, fig, path)


def plot_series(named: Mapping[str, tuple[Sequence[float], Sequence[float]]], path: Path, title: str,
                ylabel: str) -> Path:
    """Several (days, values) lines on one time axis."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(8, 3.4))
    for name, (days, values) in named.items():
        ax.plot(days, values, lw=0.8, label=name)
    ax.set(xlabel="days since first submission", ylabel=ylabel, title=title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return _save(plt, fig, path)


def _save(plt: Any, fig: Any, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
