"""Demand forecast: GPU-hours demanded per week, by lab, for the next weeks (`nanum report forecast`).

Demand is what jobs asked for, not what they got: each job's GPUs times its run time, counted on the UTC day it was
submitted (so a short cluster's queue does not hide demand). The daily series is fitted with Holt-Winters
exponential smoothing from statsmodels: additive damped trend and additive weekly seasonality (period 7 days)
when there are at least three weeks of history, the trend alone with one to three weeks, the mean with less. Days
are summed into weeks starting on the day after the history ends.

The back-test says how good it is: the model is fitted on the history without its last `holdout` weeks and its
forecast of those weeks compared with what was demanded. Error is WAPE, the sum of absolute weekly errors over
the sum of weekly demand (0 %: exact; 100 %: as bad as forecasting nothing).
"""

from __future__ import annotations

import math
import warnings
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from nanum.sim.jobs import DEFAULT_LAB
from nanum.sim.traces import TraceJob

DAY = 86400.0
ALL = "all labs"


@dataclass(frozen=True, slots=True)
class Forecast:
    lab: str
    history_weeks: float
    weekly: tuple[float, ...]  # GPU-hours demanded in each coming week
    last_week: float  # GPU-hours demanded in the last 7 days of history
    backtest_wape_percent: float | None  # None: too little history to hold weeks out
    backtest_weeks: int
    method: str
    naive_wape_percent: float | None = None  # the same back-test for "every week like the last one"

    def as_dict(self) -> dict[str, Any]:
        return {"lab": self.lab, "history_weeks": round(self.history_weeks, 1), "last_week_gpu_hours":
                round(self.last_week, 1), "weekly_gpu_hours": [round(w, 1) for w in self.weekly],
                "backtest_wape_percent": self.backtest_wape_percent, "backtest_weeks": self.backtest_weeks,
                "naive_wape_percent": self.naive_wape_percent, "method": self.method}


def daily_demand(trace: Sequence[TraceJob]) -> tuple[float, dict[str, list[float]]]:
    """The first UTC day of the trace and, per lab and for all labs, GPU-hours demanded on each day since."""
    if not trace:
        return 0.0, {}
    first = min(t.submit_time for t in trace) // DAY
    days = int(max(t.submit_time for t in trace) // DAY - first) + 1
    series: dict[str, list[float]] = defaultdict(lambda: [0.0] * days)
    for t in trace:
        day = int(t.submit_time // DAY - first)
        hours = t.num_gpus * t.duration / 3600.0
        series[t.lab or DEFAULT_LAB][day] += hours
        series[ALL][day] += hours
    return first * DAY, dict(series)


def predict(daily: Sequence[float], weeks: int) -> tuple[list[float], str]:
    """Weekly GPU-hours for the next `weeks` weeks from a daily series, and the method used."""
    days = 7 * weeks
    if len(daily) < 7:
        mean = sum(daily) / len(daily) if daily else 0.0
        return [7 * mean] * weeks, "mean"
    from statsmodels.tsa.holtwinters import ExponentialSmoothing

    seasonal = len(daily) >= 21
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # convergence notes on short or flat series; the back-test shows the fit
        model = ExponentialSmoothing(list(daily), trend="add", damped_trend=True,
                                     seasonal="add" if seasonal else None, seasonal_periods=7 if seasonal else None,
                                     initialization_method="estimated")
        path = model.fit().forecast(days)
    values = [max(float(v), 0.0) if math.isfinite(float(v)) else 0.0 for v in path]
    method = "Holt-Winters, damped trend + weekly seasonality" if seasonal else "Holt, damped trend"
    return [sum(values[7 * w: 7 * w + 7]) for w in range(weeks)], method


def backtest(daily: Sequence[float], holdout: int) -> tuple[float | None, float | None, int]:
    """WAPE (%) of forecasting the last `holdout` weeks from the days before them, of the naive forecast (every
    week like the last one seen) beside it, and the weeks held out: fewer when the history is short (at least three
    weeks are kept to fit on)."""
    weeks = min(holdout, (len(daily) - 21) // 7)
    if weeks < 1:
        return None, None, 0
    cut = len(daily) - 7 * weeks
    guess, _ = predict(daily[:cut], weeks)
    actual = [sum(daily[cut + 7 * w: cut + 7 * w + 7]) for w in range(weeks)]
    naive = [sum(daily[cut - 7: cut])] * weeks
    total = sum(actual)
    if total <= 0:
        return None, None, weeks
    return _wape(guess, actual, total), _wape(naive, actual, total), weeks


def _wape(guess: Sequence[float], actual: Sequence[float], total: float) -> float:
    return round(100.0 * sum(abs(g - a) for g, a in zip(guess, actual, strict=True)) / total, 1)


def forecast(trace: Sequence[TraceJob], weeks: int = 8, holdout: int = 4, min_days: int = 14) -> list[Forecast]:
    """All labs first, then each lab with at least `min_days` of history, by demand."""
    _, series = daily_demand(trace)
    out = []
    for lab, daily in sorted(series.items(), key=lambda kv: (kv[0] != ALL, -sum(kv[1]))):
        if lab != ALL and (len(daily) < min_days or len(series) == 2):
            continue  # too short to say anything, or the only lab (the same as all labs)
        weekly, method = predict(daily, weeks)
        wape, naive, held = backtest(daily, holdout)
        out.append(Forecast(lab, len(daily) / 7, tuple(weekly), sum(daily[-7:]), wape, held, method, naive))
    return out
