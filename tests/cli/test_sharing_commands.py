"""The fair-sharing commands against a scripted loopback server: lab and user quotas, usage, priority, checkpoint,
and the budget warnings and preemption in `ps` and `show`."""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path

import pytest

from tests.cli.conftest import Nanum
from tests.cli.fakeapi import FakeApi, job

LAB = {"name": "vision", "guaranteed_gpus": 4, "max_gpus": None, "max_running_jobs": 10,
       "monthly_gpu_hours": 500.0, "weight": 2.0, "grace_s": 30.0}


def test_lab_set_sends_only_what_changes_and_none_removes_a_limit(api: FakeApi, nanum: Nanum) -> None:
    api.on("PATCH", "/labs/vision", LAB)
    result = nanum("lab", "set", "vision", "--max-gpus", "none", "--monthly-gpu-hours", "500", "--grace", "30")
    assert result.exit_code == 0, result.output
    assert result.stdout == ("Lab vision: guaranteed 4 GPUs, max 10 jobs, 500 GPU-hours a month, weight 2, "
                             "grace 30 s\n")
    assert api.sent("PATCH", "/labs/vision")[0].body == {"max_gpus": None, "monthly_gpu_hours": 500.0,
                                                        "grace_s": 30.0}


@pytest.mark.parametrize(("args", "message"), [
    pytest.param(["--max-gpus", "many"], "--max-gpus: 'many' is not a whole number", id="word"),
    pytest.param(["--max-gpus", "1.5"], "--max-gpus: '1.5' is not a whole number", id="fraction"),
    pytest.param(["--monthly-gpu-hours", "-3"], "--monthly-gpu-hours must not be negative", id="negative"),
    pytest.param([], "nothing to change", id="nothing"),
])
def test_lab_set_refuses_bad_values_in_one_line(nanum: Nanum, args: list[str], message: str) -> None:
    result = nanum("lab", "set", "vision", *args)
    assert result.exit_code == 2 and result.stderr.startswith("nanum: error: ") and message in result.stderr


def test_lab_add_takes_a_grace(api: FakeApi, nanum: Nanum) -> None:
    api.on("POST", "/labs", LAB, status=201)
    assert nanum("lab", "add", "vision", "--guaranteed-gpus", "4", "--grace", "1").exit_code == 0
    assert api.sent("POST", "/labs")[0].body == {"name": "vision", "guaranteed_gpus": 4, "grace_s": 1.0}


def test_lab_show_prints_usage_budget_and_history(api: FakeApi, nanum: Nanum) -> None:
    detail = {**LAB, "members": ["alice", "bob"], "running_jobs": 2, "pending_jobs": 1, "gpus_in_use": 6,
              "borrowed_gpus": 2, "month": "2026-11", "used_gpu_hours": 420.5, "lost_gpu_hours": 1.25,
              "budget": {"used_gpu_hours": 420.5, "budget_gpu_hours": 500.0, "percent": 84.1,
                         "warning": "lab vision has used 84% of its 500 GPU-hours for November"},
              "history": [{"time": "2026-11-02T09:00:00.000Z", "actor": "admin", "action": "set",
                           "changes": {"weight": [1.0, 2.0]}, "message": "admin set weight 1 -> 2"}]}
    api.on("GET", "/labs/vision", detail)
    result = nanum("lab", "show", "vision")
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert "members:            alice, bob\n" in out
    assert "2 running (6 GPUs, 2 borrowed), 1 pending" in out
    assert "used 2026-11:       420.5 GPU-hours of 500 (84%)" in out
    assert "lost to preemption: 1.25 GPU-hours" in out
    assert "warning:            lab vision has used 84%" in out
    assert out.endswith("history:\n  2026-11-02 09:00:00  admin: admin set weight 1 -> 2\n")


def test_user_set_sends_the_users_limits(api: FakeApi, nanum: Nanum) -> None:
    api.on("PATCH", "/users/bob", {"name": "bob", "admin": False, "labs": ["nlp"], "default_lab": "nlp",
                                   "unix_user": None, "max_gpus": 2, "max_running_jobs": None,
                                   "monthly_gpu_hours": None})
    result = nanum("user", "set", "bob", "--max-gpus", "2", "--max-running-jobs", "none")
    assert result.exit_code == 0, result.output
    assert result.stdout == "User bob: max gpus 2, max running jobs none, monthly gpu hours none\n"
    assert api.sent("PATCH", "/users/bob")[0].body == {"max_gpus": 2, "max_running_jobs": None}


USAGE = {"since": "2026-11-01T00:00:00.000Z", "until": "2026-12-01T00:00:00.000Z", "by": "lab", "lab": None,
         "user": None, "rows": [
             {"key": "nlp", "gpu_hours": 12.5, "gpu_seconds": 45000.0, "jobs": 3, "avg_wait_s": 75.0,
              "lost_gpu_hours": 0.5, "budget_gpu_hours": None, "budget_percent": None},
             {"key": "vision", "gpu_hours": 420.5, "gpu_seconds": 1513800.0, "jobs": 40, "avg_wait_s": None,
              "lost_gpu_hours": 0.0, "budget_gpu_hours": 500.0, "budget_percent": 84.1}],
         "total": {"key": "total", "gpu_hours": 433.0, "gpu_seconds": 1558800.0, "jobs": 43, "avg_wait_s": 75.0,
                   "lost_gpu_hours": 0.5, "budget_gpu_hours": None, "budget_percent": None}}


def test_usage_prints_a_table_with_a_total(api: FakeApi, nanum: Nanum) -> None:
    api.on("GET", "/usage", USAGE)
    result = nanum("usage", "--month", "2026-11")
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0] == "GPU usage from 2026-11-01 00:00:00 to 2026-12-01 00:00:00 UTC, by lab"
    assert lines[1].split() == ["LAB", "GPU-HOURS", "JOBS", "AVG", "WAIT", "LOST", "GPU-H", "BUDGET"]
    assert lines[3].split() == ["vision", "420.50", "40", "-", "0.00", "84%", "of", "500"]
    assert lines[4].split()[:4] == ["TOTAL", "433.00", "43", "1:15"]
    assert api.sent("GET", "/usage")[0].query == {"month": ["2026-11"]}


def test_usage_csv_is_unrounded_with_a_total_row(api: FakeApi, nanum: Nanum) -> None:
    api.on("GET", "/usage", USAGE)
    result = nanum("usage", "--csv", "--since", "2026-11-01", "--until", "2026-11-30", "--by", "lab")
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0] == "by,key,gpu_hours,gpu_seconds,jobs,avg_wait_s,lost_gpu_hours,budget_gpu_hours,budget_percent"
    assert lines[2] == "lab,vision,420.5,1513800.0,40,,0.0,500.0,84.1"
    assert lines[-1].startswith("lab,total,433.0,")
    assert api.sent("GET", "/usage")[0].query == {"since": ["2026-11-01"], "until": ["2026-11-30"], "by": ["lab"]}


def test_usage_refuses_month_with_since(nanum: Nanum) -> None:
    result = nanum("usage", "--month", "2026-11", "--since", "2026-11-01")
    assert result.exit_code == 2 and "either --month or --since/--until" in result.stderr


def test_priority_shows_weighted_factors_in_queue_order(api: FakeApi, nanum: Nanum) -> None:
    api.on("GET", "/priority", {"policy": "fairshare+binpack+backfill",
                                "weights": {"age": 1000.0, "fairshare": 10000.0, "priority": 10000.0, "size": 1000.0},
                                "jobs": [{"job_id": 12, "job_ref": "9_3", "name": "t", "user": "bob", "lab": "nlp",
                                          "rank": 1,
                                          "priority": 9625.0, "factors": {"age": 0.5, "fairshare": 0.9,
                                                                          "priority": 0.0, "size": 0.125},
                                          "user_fairshare": 0.75, "tier": 2}]})
    result = nanum("priority")
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0].startswith("Queue order: fairshare+binpack+backfill.")
    assert lines[1] == "RANK: higher TIER first (set by admins), then FAIRSHARE, then USERSHARE, then submit time."
    assert lines[2].split()[:5] == ["RANK", "JOBID", "USER", "LAB", "TIER"]
    assert lines[3].split() == ["1", "9_3", "bob", "nlp", "2", "9625", "500", "9000", "0", "125", "0.750"]


def test_priority_under_the_default_order_states_its_rule_and_lists_jobs_by_rank(api: FakeApi, nanum: Nanum) -> None:
    row = {"name": "t", "user": "bob", "lab": "nlp", "priority": 5000.0, "user_fairshare": 1.0,
           "factors": {"age": 0.0, "fairshare": 0.5, "priority": 0.0, "size": 0.0}}
    api.on("GET", "/priority", {"policy": "gittins+binpack+backfill+preempt",
                                "weights": {"age": 1000.0, "fairshare": 10000.0, "priority": 10000.0, "size": 1000.0},
                                "jobs": [{**row, "job_id": 14, "job_ref": "14", "rank": 1, "priority": 5500.0,
                                          "factors": {**row["factors"], "priority": 0.5}},
                                         {**row, "job_id": 13, "job_ref": "13", "rank": 2}]})
    result = nanum("priority")
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[1].startswith("RANK: higher TIER first (set by admins), then short class first")
    assert "Gittins index x 2^((F - 0.5)/4)" in lines[1] and "--priority reorders only its owner's own jobs" in lines[1]
    assert [line.split()[:2] for line in lines[3:]] == [["1", "14"], ["2", "13"]]


def test_checkpoint_inside_a_job_touches_the_mark_without_a_server(nanum: Nanum, tmp_path: Path) -> None:
    no_server = Nanum(None)
    result = no_server("checkpoint", env={"NANUM_JOB_ID": "9", "NANUM_CHECKPOINT_DIR": str(tmp_path)})
    assert (result.exit_code, result.stdout) == (0, "Checkpoint recorded for job 9\n")
    assert (tmp_path / ".checkpoint").exists()
    before = os.stat(tmp_path / ".checkpoint").st_mtime
    os.utime(tmp_path / ".checkpoint", (before - 100, before - 100))
    assert no_server("checkpoint", "-q", env={"NANUM_JOB_ID": "9", "NANUM_CHECKPOINT_DIR": str(tmp_path)}).stdout == ""
    assert os.stat(tmp_path / ".checkpoint").st_mtime > before - 50


def test_checkpoint_tells_the_server_too_when_it_can(api: FakeApi, nanum: Nanum, tmp_path: Path) -> None:
    api.on("POST", "/jobs/9/checkpoint", job(id=9, state="running"))
    result = nanum("checkpoint", env={"NANUM_JOB_ID": "9", "NANUM_CHECKPOINT_DIR": str(tmp_path)})
    assert result.exit_code == 0 and len(api.sent("POST", "/jobs/9/checkpoint")) == 1


def test_checkpoint_outside_a_job_needs_an_id(nanum: Nanum) -> None:
    result = Nanum(None)("checkpoint")
    assert result.exit_code == 2 and "NANUM_JOB_ID is not set" in result.stderr


def test_ps_shows_budget_warnings_once_and_a_preempting_jobs_reason(api: FakeApi, nanum: Nanum) -> None:
    warning = "lab vision has used 85% of its 100 GPU-hours for November"
    api.on("GET", "/jobs", [
        job(id=1, state="running", borrowing=True, reason="preempting: lab nlp reclaims its guaranteed GPUs",
            start_time="2026-11-29T17:00:00Z", budget_warning=warning),
        job(id=2, budget_warning=warning),
    ])
    result = nanum("ps")
    assert result.exit_code == 0, result.output
    assert "preempting: lab nlp" in result.stdout
    assert result.stdout.count(f"! {warning}") == 1
    assert "* borrowing idle GPUs" in result.stdout


def test_show_lists_hint_checkpoint_lost_work_and_segments(api: FakeApi, nanum: Nanum) -> None:
    api.on("GET", "/jobs/7", job(state="pending", reason="lab vision has used its 1 GPU-hours", reason_code="budget",
                                 hint="an admin can raise the budget: nanum lab set vision --monthly-gpu-hours H",
                                 preemptions=1, lost_gpu_hours=0.25, last_checkpoint="2026-11-29T17:10:00.000Z",
                                 segments=[{"start": "2026-11-29T17:00:00.000Z", "end": "2026-11-29T17:15:00.000Z",
                                            "gpus": 4, "gpu_hours": 1.0, "outcome": "preempted", "wait_s": 3.0,
                                            "lost_gpu_hours": 0.25}]))
    result = nanum("show", "7")
    assert result.exit_code == 0, result.output
    fields = dict(line.split(":", 1) for line in result.stdout.splitlines())
    assert fields["hint"].strip().startswith("an admin can raise the budget")
    assert fields["lost_gpu_hours"].strip() == "0.250 GPU-hours"
    assert fields["segments"].strip().endswith("4 GPUs preempted (1.000 GPU-h)")
    assert json.loads(nanum("show", "7", "--json").stdout)["preemptions"] == 1


@pytest.mark.parametrize("args", [
    ["report", "usage"], ["report", "forecast"], ["report", "predictions"], ["report", "capacity"],
    ["trace", "export", "-o", "out.csv"],
])
def test_reports_say_in_one_line_what_went_wrong(args: list[str], tmp_path: Path) -> None:
    """The report commands and `trace export` read the server's history: an error answer or an unreachable server
    is one line and an exit code, as for every other command, not a traceback."""
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    result = Nanum(f"http://127.0.0.1:{port}")(*[str(tmp_path / a) if a == "out.csv" else a for a in args])
    assert result.exit_code == 1 and isinstance(result.exception, SystemExit), result.output
    assert result.stderr == f"nanum: error: cannot reach the nanum server at http://127.0.0.1:{port}; is `nanum up` " \
                            "running?\n"


def test_a_report_says_the_servers_refusal(nanum: Nanum, api: FakeApi) -> None:
    api.on("GET", "/reports/usage", {"detail": "invalid since 'yesterday': write a date (2026-11-01)"}, status=422)
    result = nanum("report", "usage", "--since", "yesterday")
    assert result.exit_code == 2 and result.stderr == "nanum: error: invalid since 'yesterday': write a date " \
                                                      "(2026-11-01)\n", result.output
