"""The Typer application every command module registers on."""

from __future__ import annotations

import typer

app = typer.Typer(
    name="nanum",
    help="nanum: one queue for your GPU servers.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
