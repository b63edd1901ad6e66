"""The Typer application every command module registers on."""

from __future__ import annotations

import typer

from nanum.cli.common import Group

app = typer.Typer(
    name="nanum",
    cls=Group,  # usage errors as one `nanum: error:` line
    help="nanum: one queue for your GPU servers.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,  # plain help: Rich would add ~80 ms to every `--help`
)
