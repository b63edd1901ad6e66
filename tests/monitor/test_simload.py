"""What simulated GPUs show for a job's declared load."""

from __future__ import annotations

import pytest

from nanum.monitor.simload import DEFAULT_UTIL, LoadError, phases, sim_memory, sim_util


@pytest.mark.parametrize(
    ("env", "elapsed", "expected"),
    [
        pytest.param({}, 0, DEFAULT_UTIL, id="default-busy"),
        pytest.param({"NANUM_SIM_UTIL": "35"}, 100, 35.0, id="constant"),
        pytest.param({"NANUM_SIM_UTIL": "0"}, 100, 0.0, id="idle"),
        pytest.param({"NANUM_SIM_UTIL": "95@60,0"}, 59, 95.0, id="first-phase"),
        pytest.param({"NANUM_SIM_UTIL": "95@60,0"}, 61, 0.0, id="last-phase-holds"),
        pytest.param({"NANUM_SIM_UTIL": "10@5,50@5,80"}, 7, 50.0, id="middle-phase"),
        pytest.param({"NANUM_SIM_UTIL": "lots"}, 0, DEFAULT_UTIL, id="bad-spec-is-default"),
    ],
)
def test_util(env: dict[str, str], elapsed: float, expected: float) -> None:
    assert sim_util(env, elapsed) == expected


def test_jitter_spreads_busy_but_not_idle() -> None:
    assert sim_util({}, 0, jitter=1.0) == DEFAULT_UTIL + 5
    assert sim_util({"NANUM_SIM_UTIL": "0"}, 0, jitter=1.0) == 0.0
    assert sim_util({"NANUM_SIM_UTIL": "99"}, 0, jitter=1.0) == 100.0


@pytest.mark.parametrize("spec", ["x", "101", "50@-1", "50@x"])
def test_bad_phases(spec: str) -> None:
    with pytest.raises(LoadError, match="NANUM_SIM_UTIL"):
        phases(spec)


def test_memory() -> None:
    assert sim_memory({}, 10000, busy=True, before_mb=0) == 4000
    assert sim_memory({}, 10000, busy=False, before_mb=4000) == 4000  # a loaded model stays loaded
    assert sim_memory({"NANUM_SIM_MEM": "0.5"}, 10000, busy=True, before_mb=0) == 5000
    assert sim_memory({"NANUM_SIM_MEM": "1234"}, 10000, busy=False, before_mb=0) == 1234
