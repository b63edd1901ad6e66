"""The quick path parses `nanum submit`, `ps`, `show` and `cancel` exactly as the Typer commands do, or leaves
the command line to them."""

from __future__ import annotations

from typing import Any

import pytest

from nanum.cli import fast, jobcmds
from tests.cli.conftest import Nanum

SAME = [
    ["submit", "--", "python", "train.py"],
    ["submit", "--tier", "3", "--priority=5", "--", "python", "train.py"],
    ["submit", "-g", "2", "--time=4h", "-J", "run", "-e", "A=1", "--env", "B=2", "train.sh", "--lr", "1"],
    ["submit", "--gpus", "0", "--cpus=0", "--array", "0-9%2", "--after-ok", "1", "--after-ok", "2,3",
     "--keep-if-unmet", "--retries", "2", "-o", "out-%j", "--error", "err", "--json", "--", "sh", "-c", "x"],
    ["submit", "--no-preempt", "--no-requeue", "-D", "/srv", "--mem", "1G", "-N2", "-c4", "run.sh", "-g", "9"],
    ["submit", "--requeue", "-N2", "--torchrun", "train.py"],
    ["ps"],
    ["ps", "-a", "-u", "alice", "--lab", "vision", "-s", "pending", "--state", "held", "--expand", "-h"],
    ["ps", "--format", "%i %u %T %r", "--json"],
    ["ps", "--fields=id,state", "--server", "http://x:1", "--token", "t"],
    ["show", "12"],
    ["show", "12_3", "--json"],
    ["show", "--json", "12"],
    ["cancel", "1", "2", "3_4"],
]
LEFT_TO_TYPER = [
    ["submit", "--help"], ["ps", "--all=1"], ["ps", "-ah"], ["ps", "--colour"], ["show"], ["show", "1", "2"],
    ["cancel"], ["submit", "--gpus", "two", "x"], ["submit", "--gpus"], ["ps", "-x"],
    # numbers Python's int reads (or fails on, '²') and Typer refuses
    ["submit", "--gpus", "1_6", "x"], ["submit", "--gpus", "²", "x"], ["submit", "-g", "１", "x"],
    ["submit", "--retries= 2", "x"],
]


def test_the_spec_is_read_from_the_typer_commands() -> None:
    assert fast.spec_from_app() == fast.SPEC, "regenerate SPEC as its comment says"


@pytest.mark.parametrize("argv", SAME, ids=" ".join)
def test_the_quick_path_passes_what_typer_passes(argv: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[dict[str, Any]] = []
    name = argv[0]

    def record(*args: Any, **kwargs: Any) -> None:
        seen.append(kwargs if not args else dict(zip(("job_ids", "server", "token"), args, strict=False)))

    monkeypatch.setattr(jobcmds, name, record)
    result = Nanum(None)(*argv)
    assert result.exit_code == 0, result.output
    typer_args = {k: v for k, v in seen[0].items() if v not in (None, False)}
    assert fast.run(argv)
    quick = {k: v for k, v in seen[1].items() if v not in (None, False)}
    assert {k: list(v) if isinstance(v, tuple) else v for k, v in quick.items()} == {
        k: list(v) if isinstance(v, tuple) else v for k, v in typer_args.items()}


@pytest.mark.parametrize("argv", LEFT_TO_TYPER, ids=" ".join)
def test_what_the_quick_path_cannot_parse_is_left_to_typer(argv: list[str]) -> None:
    assert fast.run(argv) is False
