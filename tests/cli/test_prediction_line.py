"""`nanum show`'s one `prediction` line from a job's `predicted_runtime_s` and `prediction_basis`."""

from __future__ import annotations

from typing import Any

import pytest

from nanum.cli.views import duration, show_lines
from nanum.predicted import prediction_text

BASIS = "mean of the last 14 finished jobs of alice named train"


@pytest.mark.parametrize(
    ("job", "expected"),
    [
        pytest.param({"predicted_runtime_s": 7800.0, "prediction_basis": BASIS, "time_limit_s": 14400},
                     f"2:10:00 run time ({BASIS})", id="predicted"),
        pytest.param({"predicted_runtime_s": 7800.0, "prediction_basis": BASIS, "time_limit_s": 3600},
                     f"2:10:00 run time ({BASIS}; its time limit 1:00:00 is used)", id="capped-by-limit"),
        pytest.param({"predicted_runtime_s": None, "prediction_basis": "no similar finished job", "time_limit_s": None},
                     "none (no similar finished job; it has no time limit either)", id="nothing-known"),
        pytest.param({"predicted_runtime_s": None, "prediction_basis": None, "time_limit_s": 60}, None,
                     id="not-predicted"),
    ],
)
def test_prediction_text(job: dict[str, Any], expected: str | None) -> None:
    assert prediction_text(job, duration) == expected


def test_show_puts_the_prediction_after_the_time_limit_on_one_line() -> None:
    job = {"id": 7, "time_limit_s": 14400, "priority": 0, "predicted_runtime_s": 7800.0, "prediction_basis": BASIS}
    assert [k for k, _ in show_lines(job)] == ["id", "time_limit_s", "prediction", "priority"]
