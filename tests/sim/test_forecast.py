"""The demand forecast on generated histories with known futures: a weekly pattern on a steady rise is continued,
and its back-test says so."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from nanum.sim import TraceJob, write_trace
from nanum.sim.forecast import ALL, forecast
from tests.sim.test_cli import nanum

DAY = 86400.0
PATTERN = (10, 12, 12, 12, 10, 2, 2)  # GPU-hours demanded on each weekday: quiet weekends


def history(weeks: int, growth: float = 0.0) -> list[TraceJob]:
    """One job a day (two labs alternating by week): PATTERN's GPU-hours, plus `growth` more each week."""
    jobs = []
    for d in range(7 * weeks):
        hours = PATTERN[d % 7] + growth * d / 7
        jobs.append(TraceJob(str(d), d * DAY + 3600, hours * 3600 / 2, 2, lab="a" if d % 2 else "b"))
    return jobs


def test_a_weekly_pattern_with_a_steady_rise_is_continued() -> None:
    found = {f.lab: f for f in forecast(history(10, growth=6.0), weeks=4)}
    total = found[ALL]
    week = sum(PATTERN)  # 60 GPU-hours, plus 7 x 6 x (week number) from the rise
    expected = [week + 42 * (10 + i) + 18 for i in range(4)]  # the mean day of week w is 6 * (w + 3/7) higher
    assert total.weekly == pytest.approx(expected, rel=0.08)
    assert total.backtest_wape_percent is not None and total.backtest_wape_percent < 8
    assert total.backtest_weeks == 4 and "weekly seasonality" in total.method
    assert {"a", "b"} <= set(found)


def test_a_short_history_is_forecast_without_seasonality_or_back_test() -> None:
    (only,) = forecast(history(2)[:10], weeks=2)
    assert only.backtest_wape_percent is None and only.backtest_weeks == 0 and "seasonality" not in only.method


def test_report_forecast_prints_weeks_and_the_back_test(tmp_path: Path) -> None:
    trace = tmp_path / "t.csv"
    write_trace(history(8), trace)
    done = nanum("report", "forecast", "--trace", str(trace), "--weeks", "4", "--json")
    assert done.exit_code == 0, done.output
    first = json.loads(done.output)["forecasts"][0]
    assert first["lab"] == ALL and len(first["weekly_gpu_hours"]) == 4
    assert first["weekly_gpu_hours"] == pytest.approx([60.0] * 4, rel=0.05)  # a flat pattern stays flat
    table = nanum("report", "forecast", "--trace", str(trace), "--weeks", "2")
    assert table.output.splitlines()[1].split()[:5] == ["LAB", "LAST", "WEEK", "W+1", "W+2"]
