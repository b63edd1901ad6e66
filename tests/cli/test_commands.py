"""The `nanum` commands against a scripted loopback server: output, exit codes, one-line errors."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from nanum.config import credentials_path
from tests.cli.conftest import Nanum
from tests.cli.fakeapi import Answer, FakeApi, job


def test_submit_sends_the_request_and_prints_the_id(api: FakeApi, nanum: Nanum, tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    api.on("POST", "/jobs", job(id=42), status=201)
    result = nanum("submit", "--gpus", "2", "--mem", "32G", "--time", "4h", "--env", "SEED=1",
                   "--priority", "5", "--", "python", "train.py", "--lr", "3e-4")
    assert (result.exit_code, result.stdout) == (0, "Submitted job 42\n")
    (sent,) = api.sent("POST", "/jobs")
    assert re.fullmatch(r"[0-9a-f]{32}", sent.body.pop("client_request_id"))  # one per submission
    assert sent.body == {"command": ["python", "train.py", "--lr", "3e-4"], "name": "python",
                         "workdir": str(tmp_path), "env": {"SEED": "1"}, "gpus": 2, "memory_mb": 32768,
                         "time_limit_s": 14400, "priority": 5}
    assert sent.headers["Authorization"] == "Bearer tok-alice"


def test_submit_with_a_tier_sends_it_and_shows_the_servers_refusal(api: FakeApi, nanum: Nanum) -> None:
    api.on("POST", "/jobs", job(id=7, tier=2), status=201)
    assert nanum("submit", "--tier", "2", "--", "python", "train.py").stdout == "Submitted job 7\n"
    assert api.sent("POST", "/jobs")[0].body["tier"] == 2
    refusal = {"detail": "only an admin may set a job's tier; ask an admin to run `nanum modify ID --tier 2` once "
                         "the job is queued, or leave the tier out"}
    api.on("POST", "/jobs", refusal, status=403)
    result = nanum("submit", "--tier", "2", "--", "python", "train.py")
    assert result.exit_code != 0 and result.stderr == f"nanum: error: {refusal['detail']}\n"


def test_submit_without_dashes_passes_the_programs_own_options_through(api: FakeApi, nanum: Nanum) -> None:
    api.on("POST", "/jobs", job(id=1), status=201)
    assert nanum("submit", "-g", "1", "python", "train.py", "--gpus", "8").exit_code == 0
    assert api.sent("POST", "/jobs")[0].body["command"] == ["python", "train.py", "--gpus", "8"]
    assert api.sent("POST", "/jobs")[0].body["gpus"] == 1


@pytest.mark.parametrize(("header", "args", "requeue"), [
    pytest.param("", ["--requeue"], True, id="flag"),
    pytest.param("", [], None, id="default"),
    pytest.param("#NANUM --no-requeue\n", [], False, id="script-no"),
    pytest.param("#NANUM --no-requeue\n", ["--requeue"], True, id="command-line-wins"),
    pytest.param("#SBATCH --no-requeue\n", [], False, id="sbatch"),
])
def test_requeue_is_asked_for_by_flag_or_script_line(api: FakeApi, nanum: Nanum, tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch, header: str, args: list[str],
                                                      requeue: bool | None) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.sh").write_text(f"#!/bin/bash\n{header}python train.py\n")
    api.on("POST", "/jobs", job(id=3), status=201)
    assert nanum("submit", *args, "train.sh").exit_code == 0
    assert api.sent("POST", "/jobs")[0].body.get("requeue") == requeue


@pytest.mark.parametrize(("header", "args"), [
    pytest.param("", ["--hold"], id="flag"),
    pytest.param("", ["-H"], id="short"),
    pytest.param("#NANUM --hold\n", [], id="script"),
    pytest.param("#SBATCH -H\n", [], id="sbatch"),
    pytest.param("#BSUB -H\n", [], id="bsub"),
])
def test_hold_at_submission_is_asked_for_by_flag_or_script_line(api: FakeApi, nanum: Nanum, tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch, header: str,
                                                                args: list[str]) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.sh").write_text(f"#!/bin/bash\n{header}python train.py\n")
    api.on("POST", "/jobs", job(id=3), status=201)
    assert nanum("submit", *args, "train.sh").exit_code == 0
    assert api.sent("POST", "/jobs")[0].body.get("hold") is True
    assert nanum("submit", "train.sh").exit_code == 0 or header  # without it, not held (unless the script says)
    if not header:
        assert "hold" not in api.sent("POST", "/jobs")[1].body


def test_submit_a_script_with_headers_and_json_output(api: FakeApi, nanum: Nanum, tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    script = tmp_path / "train.sh"
    script.write_text("#!/bin/bash\n#NANUM --gpus 2 --time 30m --no-preempt\npython train.py\n")
    api.on("POST", "/jobs", job(id=5, gpus=4), status=201)
    result = nanum("submit", "--gpus", "4", "--json", "train.sh")
    assert result.exit_code == 0
    assert json.loads(result.stdout) == job(id=5, gpus=4)
    body = api.sent("POST", "/jobs")[0].body
    assert (body["gpus"], body["time_limit_s"], body["preemptible"]) == (4, 1800, False)
    assert body["command"] == ["/bin/bash", str(script)]
    assert body["name"] == "train.sh"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        pytest.param(["--mem", "lots", "--", "true"], "nanum: error: --mem: cannot read 'lots'", id="mem"),
        pytest.param(["--time", "4x", "--", "true"], "nanum: error: --time: cannot read '4x'", id="time"),
        pytest.param(["--env", "1=2", "--", "true"], "nanum: error: --env: '1=2' is not NAME=",
                     id="env"),
        pytest.param([], "nanum: error: nothing to run", id="no-command"),
        pytest.param(["--time", "3000000d", "--", "true"],
                     "nanum: error: --time: at most 365 days may be asked for; give less", id="time-too-long"),
        pytest.param(["--gpus", "5000", "--", "true"], "nanum: error: --gpus: at most 1024 may be", id="gpus"),
        pytest.param(["--mem", "100T", "--", "true"], "nanum: error: --mem: at most 64T may be", id="mem-too-big"),
        pytest.param(["--gpu-mem", "99999999999999999999T", "--", "true"],
                     "nanum: error: --gpu-mem: at most 64T may be asked for; give less", id="gpu-mem-too-big"),
        pytest.param(["--nodes", "0", "--", "true"], "nanum: error: --nodes: 0 is below 1", id="no-nodes"),
        pytest.param(["--tier", "10", "--", "true"], "nanum: error: --tier: 10 must be between 0 and 9", id="tier"),
        pytest.param(["--requeue", "--no-requeue", "--", "true"],
                     "nanum: error: --requeue and --no-requeue contradict each other", id="requeue-both"),
        pytest.param(["--name", "", "--", "true"], "nanum: error: --name is empty; give one, or leave the option "
                     "out for the command's name", id="empty-name"),
        pytest.param(["-D", "", "--", "true"], "nanum: error: --workdir is empty", id="empty-workdir"),
        pytest.param(["--lab=", "--", "true"], "nanum: error: --lab is empty; give one, or leave the option out "
                     "for your default lab", id="empty-lab"),
    ],
)
def test_bad_submissions_are_refused_before_reaching_the_server(api: FakeApi, nanum: Nanum, args: list[str],
                                                               message: str) -> None:
    result = nanum("submit", *args)
    assert result.exit_code == 2
    assert result.stderr.startswith(message)
    assert len(result.stderr.splitlines()) == 1
    assert api.requests == []


def test_a_request_the_server_refuses_exits_2_with_its_reason(api: FakeApi, nanum: Nanum) -> None:
    refusal = {"detail": "needs 64 GPUs on one node; the largest node has 4 (local)"}
    api.on("POST", "/jobs", refusal, status=400)
    result = nanum("submit", "--gpus", "64", "--", "true")
    assert result.exit_code == 2
    assert result.stderr == "nanum: error: needs 64 GPUs on one node; the largest node has 4 (local)\n"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        pytest.param(["ps", "--bogus"], "No such option '--bogus'", id="unknown-option"),
        pytest.param(["submit", "--gpus", "two", "--", "true"], "'two' is not a whole number", id="bad-int"),
        # Python's int reads these as 16 and 2 (or fails with a traceback, for '²'): a command line does not
        pytest.param(["submit", "--gpus", "1_6", "--", "true"], "'1_6' is not a whole number", id="underscore"),
        pytest.param(["submit", "--gpus", "²", "--", "true"], "'²' is not a whole number", id="superscript"),
        pytest.param(["submit", "--gpus", "１６", "--", "true"], "'１６' is not a whole number", id="fullwidth"),
        pytest.param(["modify", "3", "--priority", "+2"], "'+2' is not a whole number", id="modify-plus"),
        pytest.param(["lab", "set", "ml", "--weight", "nan"], "'nan' is not a number", id="float-nan"),
        pytest.param(["lab", "set", "ml", "--weight", "1_0"], "'1_0' is not a number", id="float-underscore"),
        pytest.param(["submit", "--gpus", "9" * 5000, "--", "true"], "at most 1024", id="more-digits-than-int-reads"),
        pytest.param(["submit", "--mem", "9" * 5000 + "G", "--", "true"], "is not a size a machine has",
                     id="more-digits-than-float-holds"),
        pytest.param(["submit", "--time", "9" * 5000, "--", "true"], "is longer than any time limit",
                     id="time-of-more-digits-than-int-reads"),
        pytest.param(["lab", "set", "ml", "--guaranteed-gpus", "1_0"], "--guaranteed-gpus: '1_0' is not a whole number",
                     id="limit-underscore"),
        pytest.param(["user", "set", "bob", "--monthly-gpu-hours", "inf"], "--monthly-gpu-hours: 'inf' is not a number",
                     id="limit-inf"),
        pytest.param(["show"], "Missing argument 'JOB_ID'", id="missing-argument"),
        pytest.param(["user", "bogus"], "No such command 'bogus'", id="unknown-subcommand"),
        pytest.param(["bogus"], "No such command 'bogus'", id="unknown-command"),
    ],
)
def test_usage_errors_are_one_line_and_exit_2(nanum: Nanum, args: list[str], message: str) -> None:
    result = nanum(*args)
    assert result.exit_code == 2
    assert result.stderr.startswith("nanum: error: ")
    assert message in result.stderr
    assert len(result.stderr.splitlines()) == 1


def test_an_unreachable_server_is_one_line_and_exit_1() -> None:
    result = Nanum("http://127.0.0.1:9")("ps")
    assert result.exit_code == 1
    assert result.stderr == ("nanum: error: cannot reach the nanum server at http://127.0.0.1:9; "
                             "is `nanum up` running?\n")


def test_no_configured_server_says_how_to_get_one() -> None:
    result = Nanum(None)("ps")
    assert result.exit_code == 2
    assert "nanum login --server URL --token TOKEN" in result.stderr


def test_ps_prints_a_table_and_json_prints_the_api_list(api: FakeApi, nanum: Nanum) -> None:
    jobs = [job(id=1, state="running", borrowing=True, start_time="2026-11-29T17:00:00Z",
                allocation=[{"node": "local", "gpus": [0]}]),
            job(id=2, user="bob", reason="waiting for 2 GPUs", estimated_start="2026-11-29T17:00:00Z")]
    api.on("GET", "/jobs", jobs)
    table = nanum("ps", env={"COLUMNS": "100"})
    assert table.exit_code == 0
    lines = table.stdout.splitlines()
    assert lines[0].split() == ["ID", "NAME", "USER", "LAB", "STATE", "GPUS", "NODE", "TIME", "REASON"]
    assert "running*" in lines[1] and "local:0" in lines[1]
    assert "starts soon; waiting for 2 GPUs" in lines[2]
    assert lines[3].startswith("* borrowing")
    assert all(len(line) <= 100 for line in lines)
    assert json.loads(nanum("ps", "--json").stdout) == jobs


def test_another_users_control_characters_never_reach_the_terminal(api: FakeApi, nanum: Nanum) -> None:
    """A job named with escape sequences would retitle, clear or rewrite the terminal of whoever lists it."""
    named = job(id=3, user="mallory", name="a\x1b]0;pwned\x07b", command=["ev\x1b[2Jil"], reason="x\x9by")
    api.on("GET", "/jobs", [named])
    api.on("GET", "/jobs/3", named)
    for args in (("ps",), ("show", "3")):
        result = nanum(*args, env={"COLUMNS": "200"})
        assert result.exit_code == 0, result.output
        assert not any(c in result.stdout for c in "\x1b\x07\x9b"), result.stdout
        assert "a^[]0;pwned^Gb" in result.stdout
    assert "ev^[[2Jil" in nanum("show", "3").stdout and "x\\x9by" in nanum("show", "3").stdout
    assert json.loads(nanum("ps", "--json").stdout) == [named]  # JSON carries them escaped, as sent


def test_ps_filters_reach_the_server(api: FakeApi, nanum: Nanum) -> None:
    api.on("GET", "/jobs", [])
    result = nanum("ps", "--all", "--user", "bob", "--state", "failed", "--state", "cancelled")
    assert (result.exit_code, result.stdout, result.stderr) == (0, "", "No jobs.\n")
    assert api.requests[0].query == {"all": ["true"], "user": ["bob"], "state": ["failed", "cancelled"]}


def test_ps_says_when_only_the_latest_finished_jobs_are_listed(api: FakeApi, nanum: Nanum) -> None:
    api.on("GET", "/jobs", [job(id=8, state="completed", exit_code=0), job(id=9, state="failed", exit_code=1),
                            job(id=10, state="running")])
    result = nanum("ps", "--all", "--limit", "2")
    assert result.exit_code == 0 and api.requests[0].query == {"all": ["true"], "limit": ["2"]}
    assert result.stderr == "Finished jobs: the latest 2 are listed; `--limit N` lists more (at most 100,000).\n"
    assert nanum("ps", "--all", "--limit", "3").stderr == ""  # fewer finished than asked for: that is all of them
    assert "--limit" in nanum("ps", "--limit", "0").stderr


def test_show_prints_every_field(api: FakeApi, nanum: Nanum) -> None:
    allocation = [{"node": "local", "gpus": [2, 3]}]
    api.on("GET", "/jobs/7", job(state="completed", exit_code=0, allocation=allocation))
    result = nanum("show", "7")
    assert result.exit_code == 0
    fields = dict(line.split(":", 1) for line in result.stdout.splitlines())
    assert fields["allocation"].strip() == "local gpus 2,3"
    assert fields["exit_code"].strip() == "0"
    assert fields["command"].strip() == "python train.py"
    assert json.loads(nanum("show", "7", "--json").stdout)["allocation"] == allocation


def test_show_prints_the_environment_to_its_owner_and_says_when_it_is_hidden(api: FakeApi, nanum: Nanum) -> None:
    api.on("GET", "/jobs/7", job(env={"WANDB_API_KEY": "k1"}))
    api.on("GET", "/jobs/8", job(id=8, user="bob", env=None))  # another user's job: the server hides it
    mine = nanum("show", "7")
    theirs = nanum("show", "8")
    assert mine.exit_code == theirs.exit_code == 0
    assert "env:" in mine.stdout and "WANDB_API_KEY=k1" in mine.stdout
    env = dict(line.split(":", 1) for line in theirs.stdout.splitlines())["env"]
    assert env.strip() == "(hidden: only the job's owner and admins see it)"


def test_show_of_a_missing_job_exits_2(api: FakeApi, nanum: Nanum) -> None:
    api.on("GET", "/jobs/99", {"detail": "no job 99"}, status=404)
    result = nanum("show", "99")
    assert (result.exit_code, result.stderr) == (2, "nanum: error: no job 99\n")


@pytest.mark.parametrize(
    ("final", "code", "says"),
    [
        pytest.param(job(state="completed", exit_code=0), 0, "", id="completed"),
        pytest.param(job(state="failed", exit_code=3), 3, "", id="failed-with-code"),
        pytest.param(job(state="failed", exit_code=None), 1, "", id="failed-without-code"),
        pytest.param(job(state="failed", exit_code=-9), 137, "", id="killed-by-signal"),
        pytest.param(job(state="cancelled", exit_code=143), 1, "job 7 was cancelled", id="cancelled"),
        pytest.param(job(state="timeout", exit_code=-15), 1, "reached its time limit", id="time-limit"),
    ],
)
def test_wait_exits_with_the_jobs_code(api: FakeApi, nanum: Nanum, final: dict[str, object], code: int,
                                       says: str) -> None:
    api.on("GET", "/jobs/7", job(state="running"), final)
    result = nanum("wait", "7")
    assert result.exit_code == code
    assert says in result.stderr


def test_wait_timeout_exits_124(api: FakeApi, nanum: Nanum) -> None:
    api.on("GET", "/jobs/7", job(state="pending"))
    result = nanum("wait", "7", "--timeout", "0.3")
    assert result.exit_code == 124
    assert result.stderr == "nanum: error: job 7 is still pending after 0.3 s\n"



@pytest.mark.parametrize(("timeout", "says"), [
    ("-1", "-1.0 is not in the range x>=0"),
    ("nan", "'nan' is not a number; write a finite one"),
    ("inf", "'inf' is not a number; write a finite one"),
    ("1e999", "'1e999' is not a number; write a finite one"),
])
def test_wait_refuses_a_timeout_that_is_no_number_of_seconds(api: FakeApi, nanum: Nanum, timeout: str,
                                                              says: str) -> None:
    """NaN waited for ever and -1 said "still running after -1 s"."""
    result = nanum("wait", "7", "--timeout", timeout)
    assert result.exit_code == 2 and says in result.stderr, result.output
    assert api.sent("GET", "/jobs/7") == []


def test_logs_read_all_output_and_follow_until_the_end(api: FakeApi, nanum: Nanum) -> None:
    api.on("GET", "/jobs/7/logs",
           Answer(text="hello\n", headers={"X-Nanum-Log-Offset": "6", "X-Nanum-Job-State": "running"}),
           Answer(text="", headers={"X-Nanum-Log-Offset": "6", "X-Nanum-Job-State": "running"}),
           Answer(text="world\n", headers={"X-Nanum-Log-Offset": "12", "X-Nanum-Job-State": "completed"}),
           Answer(text="", headers={"X-Nanum-Log-Offset": "12", "X-Nanum-Job-State": "completed"}))
    result = nanum("logs", "-f", "7")
    assert (result.exit_code, result.stdout) == (0, "hello\nworld\n")
    offsets = [r.query["offset"][0] for r in api.sent("GET", "/jobs/7/logs")]
    assert offsets == ["0", "6", "6", "12"]  # ended, and the server holds all its output: nothing more to read


def test_logs_of_a_job_that_just_ended_wait_for_the_output_its_node_has_yet_to_send(api: FakeApi,
                                                                                   nanum: Nanum) -> None:
    def at(offset: int, **more: str) -> dict[str, str]:
        return {"X-Nanum-Log-Offset": str(offset), "X-Nanum-Job-State": "completed", **more}

    api.on("GET", "/jobs/7/logs", Answer(text="epoch 1\n", headers=at(8, **{"X-Nanum-Log-Missing": "8"})),
           Answer(text="", headers=at(8, **{"X-Nanum-Log-Missing": "8"})),
           Answer(text="epoch 2\n", headers=at(16)), Answer(text="", headers=at(16)))
    result = nanum("logs", "7")
    assert (result.exit_code, result.stdout, result.stderr) == (0, "epoch 1\nepoch 2\n", "")


def test_cancel_reports_each_job_and_refusals_exit_2(api: FakeApi, nanum: Nanum) -> None:
    api.on("POST", "/jobs/1/cancel", job(id=1, state="cancelled"))
    api.on("POST", "/jobs/2/cancel", {"detail": "job 2 belongs to bob; only bob or an admin may cancel it"},
           status=403)
    result = nanum("cancel", "1", "2")
    assert result.exit_code == 2
    assert result.stdout == "Cancelled job 1\n"
    assert result.stderr == "nanum: error: job 2 belongs to bob; only bob or an admin may cancel it\n"


def test_nodes_table(api: FakeApi, nanum: Nanum) -> None:
    api.on("GET", "/nodes", [{"name": "local", "state": "up", "simulated": True, "cpus": 4, "memory_mb": 1024,
                              "last_seen": None, "gpus": [{"index": 0, "uuid": "u", "model": "A100",
                                                           "memory_mb": 40960, "job_id": 3, "job_ref": "3",
                                                           "user": "bob"}]}])
    result = nanum("nodes")
    assert result.exit_code == 0
    assert result.stdout.splitlines()[1].split() == [
        "local", "up", "(simulated)", "0", "A100", "40", "GiB", "3", "bob"]


def test_login_checks_the_token_then_saves_it(api: FakeApi, nanum: Nanum) -> None:
    api.on("GET", "/me", {"name": "alice", "admin": False, "labs": ["vision"], "default_lab": "vision",
                          "unix_user": "alice"})
    result = nanum("login", "--server", api.url, "--token", "tok-1")
    assert result.exit_code == 0
    assert f"Logged in to {api.url} as alice" in result.stdout
    assert json.loads(credentials_path().read_text()) == {"server": api.url, "token": "tok-1"}
    assert credentials_path().stat().st_mode & 0o077 == 0
    assert api.sent("GET", "/me")[0].headers["Authorization"] == "Bearer tok-1"


def test_login_with_a_bad_token_saves_nothing(api: FakeApi, nanum: Nanum) -> None:
    api.on("GET", "/me", {"detail": "unknown token; ask an admin for one (`nanum user add`)"}, status=401)
    result = nanum("login", "--server", api.url, "--token", "wrong")
    assert result.exit_code == 2
    assert result.stderr.startswith("nanum: error: unknown token")
    assert not credentials_path().exists()


def test_saved_credentials_are_used_when_nothing_else_is_given(api: FakeApi) -> None:
    from nanum.config import save_credentials

    save_credentials(api.url, "saved-tok")
    api.on("GET", "/jobs", [])
    assert Nanum(None)("ps").exit_code == 0
    assert api.requests[0].headers["Authorization"] == "Bearer saved-tok"


def test_user_add_prints_only_the_token(api: FakeApi, nanum: Nanum) -> None:
    api.on("POST", "/users", {"name": "bob", "token": "tok-bob"}, status=201)
    result = nanum("user", "add", "bob", "--lab", "nlp", "--lab", "vision", "--unix-user", "bob2")
    assert (result.exit_code, result.stdout) == (0, "tok-bob\n")
    assert api.requests[0].body == {"name": "bob", "labs": ["nlp", "vision"], "admin": False,
                                    "unix_user": "bob2"}
    assert json.loads(nanum("user", "add", "bob", "--json").stdout) == {"name": "bob", "token": "tok-bob"}


def test_lab_add_sends_only_the_limits_given(api: FakeApi, nanum: Nanum) -> None:
    api.on("POST", "/labs", {"name": "vision", "guaranteed_gpus": 4}, status=201)
    result = nanum("lab", "add", "vision", "--guaranteed-gpus", "4", "--monthly-gpu-hours", "1000")
    assert (result.exit_code, result.stdout) == (0, "Created lab vision\n")
    assert api.requests[0].body == {"name": "vision", "guaranteed_gpus": 4, "monthly_gpu_hours": 1000.0}


def test_node_add_prints_the_node_token(api: FakeApi, nanum: Nanum) -> None:
    api.on("POST", "/nodes", {"name": "gpu-01", "token": "node-tok"}, status=201)
    result = nanum("node", "add", "gpu-01")
    assert (result.exit_code, result.stdout) == (0, "node-tok\n")


def test_non_admins_are_refused_clearly(api: FakeApi, nanum: Nanum) -> None:
    api.on("POST", "/users", {"detail": "only admins may add users"}, status=403)
    result = nanum("user", "add", "eve")
    assert (result.exit_code, result.stderr) == (2, "nanum: error: only admins may add users\n")


def test_server_opens_webhooks_to_named_hosts_and_names_in_metrics_only_when_asked(
    nanum: Nanum, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import nanum.server.runtime as runtime

    started: list[Any] = []
    monkeypatch.setattr(runtime, "start", lambda settings, *args: started.append(settings))
    assert nanum("server", "--home", str(tmp_path)).exit_code == 0
    args = ["--webhook-allow-host", "Hooks.Lab.internal.", "--webhook-allow-host", "[::1]", "--metrics-names"]
    assert nanum("server", "--home", str(tmp_path), *args).exit_code == 0
    assert (started[0].webhook_allow_hosts, started[0].metrics_names) == (frozenset(), False)
    assert started[1].webhook_allow_hosts == {"hooks.lab.internal", "::1"} and started[1].metrics_names


@pytest.mark.parametrize("token", ["tok\nen", "tok\x01", "tok✓"])
def test_a_token_no_server_could_take_is_refused_in_one_sentence(api: FakeApi, nanum: Nanum, token: str) -> None:
    """A token copied with its line break, or mangled, would make an HTTP header the server cannot read (a 400
    blamed on the server) or one the client cannot write (a traceback)."""
    for args in (["ps"], ["submit", "--", "true"]):
        result = nanum(*args, env={"NANUM_TOKEN": token})
        assert result.exit_code == 1 and (result.exception is None or isinstance(result.exception, SystemExit))
        assert result.stderr.startswith("nanum: error: the API token (--token, NANUM_TOKEN or the one saved by "
                                        "`nanum login`) contains a character no token has"), result.output
        assert len(result.stderr.splitlines()) == 1
    assert api.requests == []
