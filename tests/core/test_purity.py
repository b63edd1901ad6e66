"""The core stays pure (no I/O, clock or randomness) and its public surface is exactly `__all__`."""

from __future__ import annotations

import ast
from pathlib import Path
from types import ModuleType

import nanum.core

FORBIDDEN = {"asyncio", "sqlalchemy", "fastapi", "httpx", "time", "random", "socket", "subprocess", "os",
             "threading", "datetime", "pydantic"}


def test_core_imports_no_io_clock_or_randomness() -> None:
    for path in Path(nanum.core.__file__).parent.rglob("*.py"):
        tree = ast.parse(path.read_text())
        names = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
        names |= {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
        assert not {m.split(".")[0] for m in names} & FORBIDDEN, path.name


def test_core_all_is_exactly_the_public_names() -> None:
    public = {n for n, v in vars(nanum.core).items() if not n.startswith("_") and not isinstance(v, ModuleType)}
    assert set(nanum.core.__all__) == public
