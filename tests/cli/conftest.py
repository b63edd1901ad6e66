"""Fixtures for CLI tests: a scripted loopback server, a clean environment, and an in-process `nanum`."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

from tests.cli.fakeapi import FakeApi


@pytest.fixture
def api() -> Iterator[FakeApi]:
    server = FakeApi()
    yield server
    server.close()


@pytest.fixture(autouse=True)
def clean_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No settings leak in from the machine: empty config dir, no NANUM_* variables."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    for name in ("NANUM_SERVER", "NANUM_TOKEN", "COLUMNS"):
        monkeypatch.delenv(name, raising=False)


class Nanum:
    """Runs `nanum ARGS` in this process against a server URL, like a user at a shell would."""

    def __init__(self, server: str | None) -> None:
        import importlib

        from nanum.cli import COMMAND_MODULES

        for name in COMMAND_MODULES:
            importlib.import_module(f"nanum.cli.{name}")
        from nanum.cli.app import app

        self.app = app
        self.server = server
        self.runner = CliRunner()

    def __call__(self, *args: str, env: dict[str, str] | None = None) -> Result:
        full_env = {"NANUM_SERVER": self.server, "NANUM_TOKEN": "tok-alice"} if self.server else {}
        full_env.update(env or {})
        return self.runner.invoke(self.app, list(args), env=full_env)


@pytest.fixture
def nanum(api: FakeApi) -> Nanum:
    return Nanum(api.url)
