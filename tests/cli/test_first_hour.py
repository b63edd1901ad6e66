"""A new user's first hour, command by command: each stumble a new user met once, tried as they would."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from nanum.config import credentials_path
from tests.cli.conftest import Nanum
from tests.cli.fakeapi import FakeApi

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
def test_make_run_takes_a_port() -> None:
    planned = subprocess.run(["make", "-n", "-W", "pyproject.toml", "run", "PORT=9000"], cwd=ROOT, text=True,
                             capture_output=True, check=True).stdout.splitlines()
    assert planned[-1].endswith("nanum up --port 9000")
    plain = subprocess.run(["make", "-n", "run"], cwd=ROOT, text=True, capture_output=True, check=True)
    assert plain.stdout.splitlines()[-1].endswith("nanum up")


def test_lab_set_prints_the_servers_warning(api: FakeApi, nanum: Nanum) -> None:
    warning = "lab vision is guaranteed 8 GPUs but the cluster has 4; the guarantee cannot be met until more GPUs join"
    api.on("PATCH", "/labs/vision", {"name": "vision", "guaranteed_gpus": 8, "weight": 1.0, "warning": warning})
    result = nanum("lab", "set", "vision", "--guaranteed-gpus", "8")
    assert result.exit_code == 0, result.output
    assert result.stderr == f"warning: {warning}\n"
