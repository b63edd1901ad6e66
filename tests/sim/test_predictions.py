"""`nanum report predictions`: an online replay learns only from jobs finished before each submission."""

from __future__ import annotations

import json
from pathlib import Path

from nanum.sim import TraceJob, write_trace
from nanum.sim.predictions import evaluate
from tests.sim.test_cli import nanum


def test_exact_histories_are_predicted_exactly_and_the_future_never_leaks() -> None:
    # alice's jobs always run 100 s, bob's 1,000 s; one every 2,000 s, so each has finished before the next comes.
    trace = [TraceJob(str(i), 2000.0 * i, 100.0 if i % 2 else 1000.0, 1, user="alice" if i % 2 else "bob",
                      lab="lab", time_limit=200.0 if i % 2 else 2000.0) for i in range(20)]
    model, limit = evaluate(trace)
    assert model.covered == 19  # the first job has nothing to go on
    # alice's first job can only go by bob's (everyone's mean, 10x off); every later one is exact.
    assert model.median_abs_error_s == 0.0 and model.within_2x_percent == round(100 * 18 / 19, 1)
    assert limit.covered == 20 and limit.median_ratio == 2.0 and limit.within_2x_percent == 100.0
    # Relative-error bands: alice's first guess is 900 % off; a limit of twice the run time is 100 % off.
    exact = round(100 * 18 / 19, 1)
    assert model.error_within == {"10%": exact, "50%": exact, "100%": exact, "1000%": 100.0}
    assert limit.error_within == {"10%": 0.0, "50%": 0.0, "100%": 100.0, "1000%": 100.0}
    burst = [TraceJob(str(i), 0.0, 50.0, 1, user="alice", lab="lab") for i in range(5)]
    assert evaluate(burst)[0].covered == 0  # submitted together: none had finished


def test_report_predictions_prints_both_estimators(tmp_path: Path) -> None:
    trace = tmp_path / "t.csv"
    write_trace([TraceJob(str(i), 1000.0 * i, 300.0, 2, user="u", lab="l") for i in range(10)], trace)
    done = nanum("report", "predictions", "--trace", str(trace), "--json")
    assert done.exit_code == 0, done.output
    found = {e["estimator"]: e for e in json.loads(done.output)["estimators"]}
    assert found["history predictor"]["within_2x_percent"] == 100.0 and found["time limit"]["covered"] == 0
    table = nanum("report", "predictions", "--trace", str(trace))
    assert "history predictor  9 (90.0%)" in table.output
    assert "ERR<=10%" in table.output and "ERR<=1000%" in table.output
