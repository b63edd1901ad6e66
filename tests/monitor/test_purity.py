"""The monitoring rules stay pure: no I/O, no clock, no randomness (the server and agent pass readings and time)."""

from __future__ import annotations

import ast
from pathlib import Path

import nanum.monitor

FORBIDDEN = {"asyncio", "sqlalchemy", "fastapi", "httpx", "time", "random", "socket", "subprocess", "os",
             "threading", "datetime", "pydantic", "urllib"}  # fmt: skip


def test_monitor_rules_import_no_io_clock_or_randomness() -> None:
    for path in Path(nanum.monitor.__file__).parent.rglob("*.py"):
        tree = ast.parse(path.read_text())
        names = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
        names |= {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
        assert not {m.split(".")[0] for m in names} & FORBIDDEN, path.name
