"""What every client command shares: the --server/--token options, the client they resolve to, and the
rule that a failure is one `nanum: error: ...` line on stderr with exit code 1 (failed) or 2 (bad usage or
refused request).

The parts that need neither click nor Typer are in `nanum.cli.base` (re-exported here).
"""

from __future__ import annotations

import math
import sys
from typing import Annotated, Any, NoReturn

import click
import typer
import typer.core

from nanum.cli.base import (
    UsageProblem,
    all_digits,
    clean_errors,
    connect,
    exit_code_for_status,
    fail,
    note,
    print_json,
)

__all__ = ["Command", "Group", "JobIdArg", "JsonOpt", "ServerOpt", "TokenOpt", "UsageProblem", "clean_errors",
           "connect", "digits", "exit_code_for_status", "fail", "finite", "note", "print_json"]

ServerOpt = Annotated[
    str | None,
    typer.Option("--server", envvar="NANUM_SERVER", show_envvar=False, metavar="URL",
                 help="Server URL, or several comma-separated (servers sharing one database: the first that "
                 "answers is used) (default: $NANUM_SERVER, else the one `nanum login` or `nanum up` saved)."),
]
TokenOpt = Annotated[
    str | None,
    typer.Option("--token", envvar="NANUM_TOKEN", show_envvar=False, metavar="TOKEN",
                 help="API token (default: $NANUM_TOKEN, else the saved one)."),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print the API's JSON instead of text.")]
#: One job: its id, or ID_TASK for an array's task; a command reads it with `nanum.cli.jobcmds.resolve`.
JobIdArg = Annotated[str, typer.Argument(metavar="ID", show_default=False,
                                         help="Job ID, or ID_TASK for one task of an array (see `nanum ps`).")]


def digits(text: str) -> int:
    """`typer.Argument(..., parser=digits)` for a number that names something (a token, a sweep): ASCII digits
    only. click's INT is Python's `int`, which reads '1_0' as 10: `nanum token revoke 1_0` revoked token 10."""
    if not all_digits(text):
        raise typer.BadParameter(f"{text!r} is not a number; give digits only, such as 3")
    return int(text)


def finite(option: str) -> Any:
    """An option's callback that refuses NaN and infinity for a number of seconds (a range check lets both
    through): `typer.Option(..., min=0, callback=finite("--timeout"))`."""
    def check(value: float | None) -> float | None:
        if value is not None and not math.isfinite(value):
            raise typer.BadParameter(f"{value} is not a number of seconds; give a finite one, such as 5",
                                     param_hint=option)
        return value

    return check


class _OneLineUsageErrors:
    """Parse errors (unknown option, bad or missing value) as one `nanum: error:` line and exit 2, instead of
    a usage box."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        try:
            return super().parse_args(ctx, args)  # type: ignore[misc, no-any-return]
        except click.UsageError as exc:
            _usage_error(ctx, exc)


def _usage_error(ctx: click.Context, exc: click.UsageError) -> NoReturn:
    if not exc.format_message():  # "no arguments: show the help", which click has printed
        raise exc
    message = exc.format_message()
    hint = message[message.rfind(" Did you mean"):] if " Did you mean" in message else ""
    if hint and message.endswith(hint + hint):  # click and typer both add the suggestion
        message = message[: -len(hint)]
    sys.stderr.write(f"nanum: error: {message} (see `{ctx.command_path} --help`)\n")
    ctx.exit(2)


class Command(_OneLineUsageErrors, typer.core.TyperCommand):
    """A command whose usage errors are one line: `@app.command(cls=Command)`."""


class Group(_OneLineUsageErrors, typer.core.TyperGroup):
    """A command group whose usage errors are one line: `typer.Typer(cls=Group)`."""

    def resolve_command(self, ctx: click.Context, args: list[str]) -> Any:
        try:
            return super().resolve_command(ctx, args)
        except click.UsageError as exc:
            _usage_error(ctx, exc)

    def invoke(self, ctx: click.Context) -> Any:
        """Also for subcommands declared without `cls=Command`: their parse errors surface here."""
        try:
            return super().invoke(ctx)
        except click.UsageError as exc:
            _usage_error(exc.ctx or ctx, exc)
