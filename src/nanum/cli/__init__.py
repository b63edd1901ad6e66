"""The `nanum` command line. Command modules are imported here so they register on the app."""

from __future__ import annotations

import importlib

COMMAND_MODULES = ("demo", "jobs", "control", "admin", "agent", "runtime", "sim", "sharing", "monitoring")


def main() -> None:
    from nanum.cli.app import app

    for name in COMMAND_MODULES:
        importlib.import_module(f"nanum.cli.{name}")
    app()
