"""How `nanum ps`, `show` and `nodes` render API objects: times, reasons, estimates, and a 100-column fit."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from nanum.cli.views import (
    PS_COLUMNS,
    duration,
    format_table,
    job_time,
    node_rows,
    ps_rows,
    ranges,
    show_lines,
    starts_at,
)
from tests.cli.fakeapi import job

NOW = datetime(2026, 11, 29, 17, 30, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(0, "0:00"), (59, "0:59"), (61, "1:01"), (3600, "1:00:00"), (90061, "1-01:01:01"), (-5, "0:00")],
)
def test_durations_read_like_squeue(seconds: float, text: str) -> None:
    assert duration(seconds) == text


def test_time_is_waiting_running_or_run_time_by_state() -> None:
    pending = job(state="pending", submit_time="2026-11-29T17:20:00Z")
    running = job(state="running", start_time="2026-11-29T17:00:00Z")
    done = job(state="completed", start_time="2026-11-29T16:00:00Z", end_time="2026-11-29T16:00:42Z")
    assert [job_time(j, NOW) for j in (pending, running, done)] == ["10:00", "30:00", "0:42"]


def test_ranges_compress_gpu_indices() -> None:
    assert ranges([0, 1, 2, 3]) == "0-3"
    assert ranges([5, 0, 1, 3]) == "0-1,3,5"
    assert ranges([]) == ""


def test_estimated_start_is_local_clock_time() -> None:
    soon = datetime(2026, 11, 29, 19, 5, tzinfo=UTC)
    local = soon.astimezone()
    text = starts_at("2026-11-29T19:05:00Z", NOW)
    if local.date() == NOW.astimezone().date():
        assert text == f"starts ~{local:%H:%M}"
    else:
        assert text == f"starts ~{local:%b %d %H:%M}"
    assert starts_at("2026-11-29T17:00:00Z", NOW) == "starts soon"
    assert starts_at(None, NOW) == ""


def test_ps_rows_show_where_jobs_run_why_others_wait_and_who_borrows() -> None:
    jobs = [
        job(id=3, state="running", gpus=2, borrowing=True, start_time="2026-11-29T17:29:00Z",
            allocation=[{"node": "gpu-01", "gpus": [0, 1]}]),
        job(id=4, state="pending", reason="2 jobs ahead", estimated_start="2026-11-29T17:00:00Z"),
        job(id=5, state="running", nodes=2, gpus=4, start_time="2026-11-29T17:29:00Z",
            allocation=[{"node": "gpu-01", "gpus": [4, 5, 6, 7]}, {"node": "gpu-02", "gpus": [0, 1, 2, 3]}]),
        job(id=6, state="failed", exit_code=3, start_time="2026-11-29T17:00:00Z",
            end_time="2026-11-29T17:00:05Z"),
    ]
    rows = {row[0]: dict(zip(PS_COLUMNS, row, strict=True)) for row in ps_rows(jobs, NOW)}
    assert rows["3"]["STATE"] == "running*"
    assert rows["3"]["NODE"] == "gpu-01:0-1"
    assert rows["3"]["TIME"] == "1:00"
    assert rows["4"]["REASON"] == "starts soon; 2 jobs ahead"
    assert rows["5"]["GPUS"] == "2x4"
    assert rows["5"]["NODE"] == "gpu-01:4-7 +1"
    assert rows["6"]["REASON"] == "exit 3"


def test_the_ps_table_fits_100_columns_without_wrapping() -> None:
    long_reason = ("2 jobs ahead; reserved to start when job 3 reaches its time limit; "
                   "lab vision is at its max of 8 GPUs")
    jobs = [job(id=1000 + i, name="a-rather-long-experiment-name", user="alexandria", lab="computer-vision",
                reason=long_reason, estimated_start="2026-11-29T19:05:00Z") for i in range(3)]
    lines = format_table(PS_COLUMNS, ps_rows(jobs, NOW), width=100, wide="REASON")
    assert len(lines) == 4
    assert all(len(line) <= 100 for line in lines)
    assert lines[0].split() == list(PS_COLUMNS)
    assert "starts ~" in lines[1]
    assert lines[1].endswith("…")


def test_a_table_is_not_cut_when_there_is_room() -> None:
    lines = format_table(("ID", "NAME"), [("1", "x" * 50)], width=None)
    assert lines == ["ID  NAME", " 1  " + "x" * 50]


def test_show_lists_every_field_known_or_new() -> None:
    shown = dict(show_lines(job(state="running", allocation=[{"node": "gpu-01", "gpus": [0, 1]}],
                                command=["python", "train.py", "--note", "two words"], env={"SEED": "1"},
                                memory_mb=32768, time_limit_s=14400, extra_field="new")))
    assert shown["allocation"] == "gpu-01 gpus 0,1"
    assert shown["command"] == "python train.py --note 'two words'"
    assert shown["env"] == "SEED=1"
    assert shown["memory_mb"] == "32768 MiB"
    assert shown["time_limit_s"] == "14400 s (4:00:00)"
    assert shown["exit_code"] == "-"
    assert shown["extra_field"] == "new"
    task = dict(show_lines(job(id=9, array_id=7, array_task=2)))
    assert task["id"] == "7_2 (task 2 of array 7; job id 9)"
    keys = [k for k, _ in show_lines(job())]
    for key in ("id", "name", "user", "lab", "state", "reason", "estimated_start", "gpus", "nodes",
                "allocation", "submit_time", "start_time", "end_time", "exit_code", "command", "workdir"):
        assert key in keys


def test_nodes_rows_give_every_gpu_its_job_and_user() -> None:
    """The job as `nanum ps` names it: task 1 of array 5 (job id 7) is 5_1."""
    gpu = {"uuid": "u", "model": "A100", "memory_mb": 81920}
    nodes = [{"name": "local", "state": "up", "simulated": True, "cpus": 16, "memory_mb": 65536,
              "last_seen": None, "gpus": [
                  {**gpu, "index": 0, "job_id": 7, "job_ref": "5_1", "user": "alice"},
                  {**gpu, "index": 1, "job_id": 8, "job_ref": "8", "user": "bob"},
                  {**gpu, "index": 2, "job_id": None, "job_ref": None, "user": None},
              ]}]
    assert node_rows(nodes) == [
        ("local", "up (simulated)", "0", "A100", "80 GiB", "", "5_1", "alice"),
        ("", "", "1", "A100", "80 GiB", "", "8", "bob"),
        ("", "", "2", "A100", "80 GiB", "", "", ""),
    ]
