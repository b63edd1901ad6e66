"""GPU use in the terminal: the idle note of `nanum ps`, the GPU lines of `nanum show`, `nanum nodes` columns."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from nanum.cli.common import UsageProblem
from nanum.cli.monitor_views import holder_text, idle_text, usage_lines, util_text
from nanum.cli.monitoring import policy_lines, window
from nanum.cli.views import ps_rows, show_lines
from tests.cli.fakeapi import job

NOW = datetime(2026, 11, 29, 17, 30, 0, tzinfo=UTC)
SUMMARY = {
    "readings": 120,
    "gpu_util_avg": 23.4,
    "gpu_util_peak": 61.0,
    "gpu_memory_avg_mb": 7000,
    "gpu_memory_peak_mb": 9216,
    "gpu_memory_mb": 81920,
    "cpu_avg_percent": 385.0,
    "idle_share": 0.125,
    "hints": ["input-bound: the GPUs averaged 23% while the CPUs were busy", "smaller GPU would do: ..."],
}


def test_ps_says_a_running_job_is_idle() -> None:
    flagged = job(id=1, state="running", idle={"stage": "flagged", "since": "2026-11-29T16:00:00Z", "for_s": 5400})
    released = job(id=2, state="running", idle={"stage": "released", "for_s": 14500})
    rows = ps_rows([flagged, released, job(id=3, state="running")], NOW)
    assert [r[-1] for r in rows] == ["idle 1h 30m, flagged", "idle 4h 01m, being released", ""]
    assert idle_text(job(id=4, state="running", idle={"stage": "flagged", "for_s": 75})) == "idle 1m, flagged"


def test_show_prints_gpu_use_and_the_efficiency_summary_with_hints() -> None:
    ended = job(id=5, state="completed", gpu_util_avg=23.4, efficiency=SUMMARY)
    lines = dict(usage_lines(ended))
    assert lines["gpu_util_avg"] == "23% on average"
    assert lines["efficiency"] == (
        "GPU 23% average, 61% peak; peak memory 9.0 GiB of 80 GiB; idle in 12% of 120 readings; CPU 3.9 cores"
    )
    keys = [k for k, _ in show_lines(ended)]
    assert keys[-4:] == ["gpu_util_avg", "efficiency", "hint", "hint"] and keys.count("efficiency") == 1


def test_nodes_columns_show_use_and_strangers() -> None:
    stranger = {"util": 61.2, "user": None, "outside": [{"pid": 4242, "user": "mallory"}]}
    assert util_text(stranger) == "61%" and util_text({}) == ""
    assert holder_text(stranger) == "outside nanum: pid 4242 mallory"
    assert holder_text({"user": "alice", "outside": []}) == "alice"


def test_idle_windows_on_the_command_line() -> None:
    assert window("30m", "--batch-flag") == 1800.0 and window("2h", "--x") == 7200.0
    assert window("never", "--x") is None and window("inherit", "--x") == "inherit"
    with pytest.raises(UsageProblem, match="--batch-flag: cannot read 'soon'"):
        window("soon", "--batch-flag")


def test_idle_show_marks_what_a_layer_sets_itself() -> None:
    found = {"lab": "vision", "policy": {"util_percent": 5.0, "batch_flag_s": 600.0, "batch_release_s": None},
             "overrides": {"batch_flag_s": 600}}  # fmt: skip
    assert policy_lines(found) == [
        "Idle policy of lab vision (* set here; the rest follows the defaults or the server):",
        "util_percent         5",
        "batch_flag           10m *",
        "batch_release        never",
    ]
