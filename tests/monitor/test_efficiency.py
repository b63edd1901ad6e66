"""The efficiency summary a finished job keeps, and its hints."""

from __future__ import annotations

import pytest

from nanum.monitor.efficiency import Tally, summarize

MODELS = {"A100": 81920, "L4": 23034, "T4": 15360}


def tally(n: int, *, util: float, memory: int, cpu: float = 0.0, idle_every: int = 0) -> Tally:
    t = Tally()
    for i in range(n):
        is_idle = bool(idle_every) and i % idle_every == 0
        u = 0.0 if is_idle else util
        t = t.add(time=float(i), util=u, util_max=u, memory=memory, memory_max=memory, cpu=cpu, idle=is_idle)
    return t


def hints(t: Tally, *, gpus: int = 1, cpus: int = 4, model: str = "A100", memory: int = 81920) -> list[str]:
    summary = summarize(t, gpus=gpus, gpu_model=model, gpu_memory_mb=memory, cpus=cpus, models=MODELS)
    assert summary is not None
    return [h.split(":")[0] for h in summary["hints"]]


@pytest.mark.parametrize(
    ("t", "kw", "expected"),
    [
        pytest.param(tally(10, util=95, memory=60000, cpu=350), {}, [], id="healthy"),
        pytest.param(tally(10, util=20, memory=60000, cpu=350), {}, ["input-bound"], id="input-bound"),
        pytest.param(tally(10, util=20, memory=60000, cpu=100), {}, ["underused"], id="low-util-quiet-cpus"),
        pytest.param(tally(10, util=20, memory=60000, cpu=80), {"cpus": 0}, ["input-bound"], id="no-cpus-reserved"),
        pytest.param(tally(10, util=95, memory=9000, cpu=10), {}, ["smaller GPU would do"], id="smaller-gpu"),
        pytest.param(
            tally(10, util=95, memory=9000), {"model": "L4", "memory": 23034}, ["smaller GPU would do"], id="l4-to-t4"
        ),
        pytest.param(
            tally(10, util=95, memory=14000), {"model": "L4", "memory": 23034}, [], id="nothing-smaller-holds-it"
        ),
        pytest.param(tally(10, util=95, memory=60000, idle_every=1), {}, ["mostly idle"], id="mostly-idle"),
    ],
)
def test_hints(t: Tally, kw: dict[str, object], expected: list[str]) -> None:
    assert hints(t, **kw) == expected  # type: ignore[arg-type]


def test_summary_figures() -> None:
    t = tally(4, util=80, memory=10240, cpu=50, idle_every=2)
    summary = summarize(t, gpus=1, gpu_model="A100", gpu_memory_mb=81920, cpus=1, models=MODELS)
    assert summary is not None
    assert summary["gpu_util_avg"] == 40.0 and summary["gpu_util_peak"] == 80.0
    assert summary["gpu_memory_peak_mb"] == 10240 and summary["idle_share"] == 0.5
    assert "peak memory 10 GiB of 80 GiB; T4 (15 GiB) would hold it (--gpu-model T4)" in summary["hints"][0]


def test_no_readings_no_summary() -> None:
    assert summarize(Tally(), gpus=1, gpu_model="A100", gpu_memory_mb=81920, cpus=1, models=MODELS) is None
