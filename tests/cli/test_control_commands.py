"""`nanum hold`, `release`, `modify`, `top`, `requeue` and task IDs (`12_7`) against a scripted server."""

from __future__ import annotations

from tests.cli.conftest import Nanum
from tests.cli.fakeapi import FakeApi

JOB = {"id": 12, "name": "t", "state": "pending", "array_id": None, "array_task": None}


def test_hold_and_release_each_id_and_a_task_by_its_index(nanum: Nanum, api: FakeApi) -> None:
    api.on("GET", "/jobs", [{**JOB, "id": 19, "array_id": 12, "array_task": 7}])
    api.on("POST", "/jobs/12/hold", {**JOB, "array_id": 12, "array_task": 0})  # the array's id: every task
    api.on("POST", "/jobs/19/hold", {**JOB, "id": 19, "array_id": 12, "array_task": 7})
    api.on("POST", "/jobs/20/hold", {**JOB, "id": 20})
    result = nanum("hold", "12", "12_7", "20")
    assert result.exit_code == 0, result.output
    assert result.stdout == "Held array 12\nHeld job 12_7\nHeld job 20\n"
    assert api.sent("POST", "/jobs/19/hold")[0].query == {"one": ["true"]}
    assert api.sent("POST", "/jobs/12/hold")[0].query == {}
    assert api.sent("GET", "/jobs")[0].query == {"array": ["12"]}
    missing = nanum("release", "12_9")
    assert missing.exit_code == 2 and "array 12 has no task 9" in missing.stderr


def test_modify_sends_only_what_was_given(nanum: Nanum, api: FakeApi) -> None:
    api.on("PATCH", "/jobs/12", JOB)
    result = nanum("modify", "12", "--time", "2h", "-J", "new", "--gpus", "2")
    assert result.exit_code == 0, result.output
    assert api.sent("PATCH", "/jobs/12")[0].body == {"time_limit_s": 7200, "gpus": 2, "name": "new"}
    nothing = nanum("modify", "12")
    assert nothing.exit_code == 2 and "nothing to change; give --time" in nothing.stderr
    api.on("PATCH", "/jobs/20", {**JOB, "id": 20, "array_id": 20, "array_task": 0})  # an array's id
    api.on("GET", "/jobs", [{**JOB, "id": 22, "array_id": 20, "array_task": 2}])
    api.on("PATCH", "/jobs/22", {**JOB, "id": 22, "array_id": 20, "array_task": 2})
    assert nanum("modify", "20", "--gpus", "1").stdout == "Modified array 20's waiting tasks: gpus=1\n"
    assert nanum("modify", "20_2", "--gpus", "1").stdout == "Modified job 20_2: gpus=1\n"


def test_modify_changes_where_a_job_runs_and_empty_means_any(nanum: Nanum, api: FakeApi) -> None:
    api.on("PATCH", "/jobs/12", JOB)
    result = nanum("modify", "12", "-N", "2", "--gpu-model", "A100, H100", "--gpu-mem", "40G", "--constraint",
                   "net=ib", "--constraint", "rack=b", "-c", "4", "--mem", "16G")
    assert result.exit_code == 0, result.output
    assert api.sent("PATCH", "/jobs/12")[0].body == {
        "nodes": 2, "gpu_model": "A100,H100", "gpu_memory_mb": 40960, "constraints": ["net=ib", "rack=b"],
        "cpus": 4, "memory_mb": 16384}
    cleared = nanum("modify", "12", "--gpu-model", "", "--gpu-mem", "", "--constraint", "", "--mem", "")
    assert cleared.exit_code == 0, cleared.output
    assert api.sent("PATCH", "/jobs/12")[1].body == {
        "gpu_model": None, "gpu_memory_mb": None, "constraints": [], "memory_mb": None}
    assert cleared.stdout == "Modified job 12: gpu_model=any, gpu_memory_mb=any, constraints=none, memory_mb=any\n"
    for words, said in ((["--constraint", "net"], "--constraint: cannot read 'net'"),
                        (["--gpu-mem", "lots"], "--gpu-mem: cannot read 'lots'"),
                        (["--gpu-model", "A100;rm"], "--gpu-model: cannot read 'A100;rm'"),
                        (["--gpu-mem", "99999999T"], "--gpu-mem: at most 64T may be asked for; give less"),
                        (["--mem", "100T"], "--mem: at most 64T may be asked for; give less"),
                        (["--time", "400d"], "--time: at most 365 days may be asked for; give less"),
                        (["--nodes", "0"], "--nodes: 0 is below 1; give 1 or more")):
        refused = nanum("modify", "12", *words)
        assert refused.exit_code == 2 and said in refused.stderr, refused.output
    assert len(api.sent("PATCH", "/jobs/12")) == 2


def test_modify_sends_a_tier_within_0_to_9(nanum: Nanum, api: FakeApi) -> None:
    api.on("PATCH", "/jobs/12", {**JOB, "tier": 3})
    result = nanum("modify", "12", "--tier", "3")
    assert (result.exit_code, result.stdout) == (0, "Modified job 12: tier=3\n"), result.output
    assert api.sent("PATCH", "/jobs/12")[0].body == {"tier": 3}
    high = nanum("modify", "12", "--tier", "10")
    assert high.exit_code == 2 and "--tier: 10 must be between 0 and 9" in high.stderr
    assert len(api.sent("PATCH", "/jobs/12")) == 1


def test_top_and_requeue(nanum: Nanum, api: FakeApi) -> None:
    api.on("POST", "/jobs/12/top", JOB)
    api.on("POST", "/jobs/12/requeue", JOB)
    assert nanum("top", "12").stdout == "Moved job 12 before your other waiting jobs of its tier\n"
    assert nanum("requeue", "12").stdout == "Requeued job 12\n"
    # an array's id acts on all its tasks, as hold and cancel do; ID_TASK on one
    api.on("POST", "/jobs/20/requeue", {**JOB, "id": 20, "array_id": 20, "array_task": 0})
    api.on("POST", "/jobs/20/top", {**JOB, "id": 20, "array_id": 20, "array_task": 0})
    assert nanum("requeue", "20").stdout == "Requeued array 20\n"
    assert nanum("top", "20").stdout == "Moved array 20 before your other waiting jobs of its tier\n"
    assert [r.query for r in api.sent("POST", "/jobs/20/requeue")] == [{}]  # not one task: every task
    api.on("POST", "/jobs/13/requeue", {"detail": "job 13 is pending, not running or ended; it is already "
                                                  "waiting to run"}, status=409)
    refused = nanum("requeue", "13")
    assert refused.exit_code == 2 and refused.stderr == (
        "nanum: error: job 13 is pending, not running or ended; it is already waiting to run\n")
