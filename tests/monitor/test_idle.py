"""Idle detection rules, as tables: which readings count as idle, when a job is flagged, cleared and released."""

from __future__ import annotations

import pytest

from nanum.monitor.idle import IdlePolicy, IdleState, PolicyError, Reading, Stage, StepKind, observe

POLICY = IdlePolicy()
MIN = 60.0


def idle(t: float, **kw: object) -> Reading:
    values: dict[str, object] = {"time": t, "gpu_util": 0.0, "gpu_memory_mb": 4000, "cpu_percent": 1.0}
    values.update(kw)
    return Reading(**values)  # type: ignore[arg-type]


def run(readings: list[Reading], kind: str = "batch", policy: IdlePolicy = POLICY) -> tuple[IdleState, list[str]]:
    """Feed readings at their own time; return the final state and every step taken, as `kind@minute`."""
    state, steps = IdleState(), []
    for r in readings:
        state, new = observe(state, r, policy, kind, r.time)
        steps += [f"{s.kind.value}@{r.time / MIN:g}" for s in new]
    return state, steps


@pytest.mark.parametrize(
    ("reading", "active"),
    [
        pytest.param(idle(0), False, id="nothing-happens"),
        pytest.param(idle(0, gpu_util=5.0), False, id="util-at-threshold-is-idle"),
        pytest.param(idle(0, gpu_util=40.0), True, id="gpu-busy"),
        pytest.param(idle(0, cpu_percent=180.0), True, id="cpu-busy-input-bound"),
        pytest.param(idle(0, gpu_memory_mb=9000), True, id="memory-moved"),
        pytest.param(idle(0, gpu_memory_mb=4200), False, id="memory-jitter"),
        pytest.param(idle(0, last_activity=-5.0), True, id="notebook-activity-since-last-reading"),
        pytest.param(idle(0, last_activity=-500.0), False, id="notebook-activity-before-last-reading"),
    ],
)
def test_which_readings_are_active(reading: Reading, active: bool) -> None:
    before = IdleState(stage=Stage.IDLE, idle_since=-1000.0, last_time=-60.0, last_memory_mb=4000)
    after, _ = observe(before, reading, POLICY, "batch", 0.0)
    assert (after.stage is Stage.ACTIVE) is active
    assert (after.idle_since is None) is active


@pytest.mark.parametrize(
    ("kind", "policy", "minutes", "expected"),
    [
        pytest.param("batch", POLICY, 29, [], id="batch-under-30m"),
        pytest.param("batch", POLICY, 30, ["idle-flagged@30"], id="batch-flagged-at-30m"),
        pytest.param("batch", POLICY, 600, ["idle-flagged@30"], id="batch-never-released-by-default"),
        pytest.param("notebook", POLICY, 119, [], id="notebook-under-2h"),
        pytest.param("notebook", POLICY, 240, ["idle-flagged@120", "idle-released@240"], id="notebook-released-4h"),
        pytest.param(
            "batch",
            POLICY.merged({"batch_flag_s": 600, "batch_release_s": 1200}),
            30,
            ["idle-flagged@10", "idle-released@20"],
            id="lab-policy-releases-batch",
        ),
        pytest.param("batch", POLICY.merged({"batch_flag_s": None}), 600, [], id="flagging-off"),
    ],
)
def test_windows(kind: str, policy: IdlePolicy, minutes: int, expected: list[str]) -> None:
    _, steps = run([idle(m * MIN) for m in range(minutes + 1)], kind, policy)
    assert steps == expected


def test_activity_clears_a_flag_and_starts_a_new_streak() -> None:
    readings = [idle(m * MIN) for m in range(31)] + [idle(31 * MIN, gpu_util=80.0)]
    readings += [idle(m * MIN) for m in range(32, 63)]
    state, steps = run(readings)
    assert steps == ["idle-flagged@30", "idle-cleared@31", "idle-flagged@62"]
    assert state.stage is Stage.FLAGGED and state.idle_since == 32 * MIN


def test_notebook_activity_ends_a_streak() -> None:
    policy = POLICY.merged({"notebook_flag_s": 600})
    readings = [idle(0), idle(MIN, last_activity=50.0), *(idle(m * MIN, last_activity=50.0) for m in range(2, 13))]
    state, steps = run(readings, "notebook", policy)
    assert state.idle_since == 2 * MIN  # the kernel ran a cell at 0:50; the next reading found it idle
    assert steps == ["idle-flagged@12"]


def test_a_late_server_flags_and_releases_at_once() -> None:
    state = IdleState(stage=Stage.IDLE, idle_since=0.0, last_time=0.0, last_memory_mb=4000)
    state, steps = observe(state, idle(5 * 3600.0), POLICY, "notebook", 5 * 3600.0)
    assert [s.kind for s in steps] == [StepKind.FLAG, StepKind.RELEASE]
    assert state.stage is Stage.RELEASED
    state, steps = observe(state, idle(6 * 3600.0, gpu_util=99.0), POLICY, "notebook", 6 * 3600.0)
    assert steps == [] and state.stage is Stage.RELEASED


def test_old_and_dead_readings_are_ignored() -> None:
    state = IdleState(stage=Stage.IDLE, idle_since=0.0, last_time=100.0, last_memory_mb=4000)
    assert observe(state, idle(50.0, gpu_util=99.0), POLICY, "batch", 200.0) == (state, [])
    assert observe(state, idle(150.0, alive=False), POLICY, "batch", 200.0) == (state, [])


def test_evidence_names_every_signal() -> None:
    _, steps = observe(IdleState(idle_since=0.0, stage=Stage.IDLE), idle(1800.0), POLICY, "batch", 1800.0)
    text = steps[0].evidence
    for word in (
        "idle for 30m",
        "GPU utilisation at most 5% (now 0%)",
        "GPU memory 3.9 GiB",
        "CPU 1%",
        "process alive",
        "no notebook activity",
    ):
        assert word in text


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        pytest.param({"batch_flag": 10}, "unknown idle setting 'batch_flag'", id="unknown"),
        pytest.param({"batch_flag_s": -1}, "must be a number ≥ 0 or null", id="negative"),
        pytest.param({"util_percent": None}, "must be a number ≥ 0", id="threshold-null"),
        pytest.param({"cpu_percent": "x"}, "must be a number", id="not-a-number"),
    ],
)
def test_bad_policy_settings_are_refused(overrides: dict[str, object], message: str) -> None:
    with pytest.raises(PolicyError, match=message):
        POLICY.merged(overrides)
