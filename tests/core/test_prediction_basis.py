"""`HistoryPredictor.explain`: the same number as `predict`, and which history it came from."""

from __future__ import annotations

import pytest

from nanum.core import HistoryPredictor, Job, Prediction
from tests.core.builders import job


def _learned() -> HistoryPredictor:
    p = HistoryPredictor()
    for i, (user, name, gpus, seconds) in enumerate(
        [("alice", "train", 4, 3600.0), ("alice", "train", 4, 5400.0), ("alice", "eval", 1, 600.0),
         ("bob", "sweep", 2, 1200.0)]
    ):
        p.observe(job(100 + i, gpus=gpus, user=user, name=name), seconds)
    return p


@pytest.mark.parametrize(
    ("asked", "expected"),
    [
        pytest.param(job(1, gpus=4, user="alice", name="train"),
                     Prediction(4500.0, "mean of the last 2 finished jobs of alice named train"), id="user-and-name"),
        pytest.param(job(2, gpus=1, user="alice", name="new"),
                     Prediction(600.0, "mean of the last finished job of alice with 1 GPU"), id="user-and-gpus"),
        pytest.param(job(3, gpus=2, user="carol", name="x"),
                     Prediction(1200.0, "mean of the last finished job of lab lab with 2 GPUs"), id="lab-and-gpus"),
        pytest.param(job(4, gpus=8, user="carol", name="x"),
                     Prediction(2700.0, "mean of the last 4 finished jobs of anyone"), id="anyone"),
    ],
)
def test_explain_names_the_history_that_answered(asked: Job, expected: Prediction) -> None:
    p = _learned()
    assert p.explain(asked) == expected
    assert p.predict(asked) == expected.seconds


def test_explain_says_when_nothing_is_known() -> None:
    assert HistoryPredictor().explain(job(1)) == Prediction(None, "no similar finished job")


def test_explain_leaves_predictions_unchanged() -> None:
    p = _learned()
    asked = job(1, gpus=4, user="alice", name="train")
    before = p.predict(asked)
    p.explain(asked)
    p.observe(job(200, gpus=4, user="alice", name="train"), 7200.0)
    assert p.explain(asked).seconds == p.predict(asked) != before
