"""A new user's first hour, command by command: each stumble a new user met once, tried as they would."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from nanum.config import credentials_path
from tests.cli.conftest import Nanum
from tests.cli.fakeapi import Answer, FakeApi

ROOT = Path(__file__).resolve().parents[2]


def test_login_takes_the_url_as_its_argument(api: FakeApi) -> None:
    api.on("GET", "/me", {"name": "alice", "admin": False, "labs": ["vision"], "default_lab": "vision",
                          "unix_user": "alice"})
    result = Nanum(None)("login", api.url, "--token", "tok-1")
    assert result.exit_code == 0, result.output
    assert f"Logged in to {api.url} as alice" in result.stdout
    assert json.loads(credentials_path().read_text()) == {"server": api.url, "token": "tok-1"}


def test_login_without_a_url_says_how_to_give_one() -> None:
    result = Nanum(None)("login", "--token", "tok-1")
    assert result.exit_code == 2
    assert result.stderr == "nanum: error: give the server's URL: `nanum login http://HOST:8765`\n"


@pytest.mark.parametrize("args", [("login", "--help"), ("up", "--help"), ("server", "--help")])
def test_help_names_the_default_port(args: tuple[str, ...]) -> None:
    """The server listens on 8765 by default; no help text may send people to another port."""
    out = Nanum(None)(*args, env={"COLUMNS": "200"}).stdout
    assert "8470" not in out
    assert "8765" in out


def test_no_source_names_the_old_port() -> None:
    hits = [str(p) for p in (ROOT / "src").rglob("*.py") if "8470" in p.read_text()]
    assert hits == []


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
def _make_plan(*args: str) -> list[str]:
    """The commands `make -n ARGS` would run (as from a shell: not the make that runs this suite, whose
    MAKEFLAGS would add 'Entering directory' lines)."""
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")}
    done = subprocess.run(["make", "--no-print-directory", "-n", *args], cwd=ROOT, text=True, env=env,
                          capture_output=True, check=True)
    return done.stdout.splitlines()


def test_make_run_takes_a_port() -> None:
    assert _make_plan("-W", "pyproject.toml", "run", "PORT=9000")[-1].endswith("nanum up --port 9000")
    assert _make_plan("run")[-1].endswith("nanum up")


def test_lab_set_prints_the_servers_warning(api: FakeApi, nanum: Nanum) -> None:
    warning = "lab vision is guaranteed 8 GPUs but the cluster has 4; the guarantee cannot be met until more GPUs join"
    api.on("PATCH", "/labs/vision", {"name": "vision", "guaranteed_gpus": 8, "weight": 1.0, "warning": warning})
    result = nanum("lab", "set", "vision", "--guaranteed-gpus", "8")
    assert result.exit_code == 0, result.output
    assert result.stderr == f"warning: {warning}\n"


def test_cancel_of_a_job_that_does_not_exist_says_so_once(api: FakeApi, nanum: Nanum) -> None:
    api.on("POST", "/jobs/9999/cancel", {"detail": "no job 9999"}, status=404)
    api.on("POST", "/jobs/2/cancel", {"detail": "only its owner or an admin may cancel it"}, status=403)
    result = nanum("cancel", "9999", "2")
    assert result.exit_code == 2
    assert result.stderr == ("nanum: error: no job 9999\n"
                             "nanum: error: job 2: only its owner or an admin may cancel it\n")


def test_logs_follow_on_a_pending_job_says_it_waits_and_for_what(api: FakeApi, nanum: Nanum) -> None:
    pending = {"X-Nanum-Log-Offset": "0", "X-Nanum-Job-State": "pending"}
    api.on("GET", "/jobs/7/logs", Answer(text="", headers=pending),
           Answer(text="hello\n", headers={"X-Nanum-Log-Offset": "6", "X-Nanum-Job-State": "completed"}),
           Answer(text="", headers={"X-Nanum-Log-Offset": "6", "X-Nanum-Job-State": "completed"}))
    api.on("GET", "/jobs/7", {"id": 7, "state": "pending", "reason": "waiting for 2 GPUs (all 4 in use)"})
    result = nanum("logs", "-f", "7")
    assert (result.exit_code, result.stdout) == (0, "hello\n")
    assert result.stderr == ("job 7 is pending: waiting for 2 GPUs (all 4 in use); its output will follow once it "
                             "starts (Ctrl-C stops watching; the job stays queued)\n")


def test_logs_follow_on_a_running_job_says_nothing_extra(api: FakeApi, nanum: Nanum) -> None:
    done = {"X-Nanum-Log-Offset": "3", "X-Nanum-Job-State": "completed"}
    api.on("GET", "/jobs/7/logs", Answer(text="hi\n", headers=done), Answer(text="", headers=done))
    result = nanum("logs", "-f", "7")
    assert (result.exit_code, result.stdout, result.stderr) == (0, "hi\n", "")
    assert api.sent("GET", "/jobs/7") == []


def _readme_section(title: str) -> str:
    text = (ROOT / "README.md").read_text()
    start = text.index(f"## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start:end if end >= 0 else None]


def test_the_readmes_job_script_is_the_example_and_reads_as_documented() -> None:
    from nanum.cli.jobspec import read_script_header

    section = _readme_section("Job scripts")
    script = section[section.index("#!/bin/bash"):]
    script = script[:script.index("```")]
    example = ROOT / "examples" / "train.sh"
    assert script == example.read_text()
    options = read_script_header(example)
    assert [options[k] for k in ("gpus", "time_limit_s", "memory_mb", "cpus")] == [2, 4 * 3600, 32 * 1024, 8]
    assert [options[k] for k in ("lab", "name", "priority", "preemptible")] == ["vision", "resnet50", 10, False]
    assert options["env"] == {"WANDB_MODE": "offline", "SEED": "1"}


def test_the_readme_documents_exactly_the_options_a_nanum_line_takes() -> None:
    import re

    from nanum.cli.jobspec import FLAGS, HEADER_OPTIONS, REPEATED, SHORT_OPTIONS

    section = _readme_section("Job scripts")
    prose = section[section.rindex("```") :]
    documented = set(re.findall(r"`(--[a-z-]+)", prose))
    assert documented == {*HEADER_OPTIONS, *FLAGS, *REPEATED, "--env"}
    assert set(re.findall(r"`(-[a-zA-Z])`", prose)) == set(SHORT_OPTIONS)


def test_root_keeps_nanums_state_where_the_jobs_it_runs_as_their_users_can_reach_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Under /root (closed to other users) a job could neither write its checkpoint directory nor read its
    preemption notice: `make run` as root gave every job both under /root/.local/share/nanum."""
    from nanum.config import SYSTEM_HOME, default_home

    monkeypatch.delenv("NANUM_HOME", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    personal = tmp_path / ".local" / "share" / "nanum"
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    assert default_home() == SYSTEM_HOME == Path("/var/lib/nanum")
    personal.mkdir(parents=True)  # an earlier run's state: used still, not left behind
    assert default_home() == personal
    personal.rmdir()
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    assert default_home() == personal
    monkeypatch.setenv("NANUM_HOME", str(tmp_path / "given"))
    assert default_home() == tmp_path / "given"
