"""What every client command shares: the --server/--token options, the client they resolve to, and the
rule that a failure is one `nanum: error: ...` line on stderr with exit code 1 (failed) or 2 (bad usage or
refused request).

The parts that need neither click nor Typer are in `nanum.cli.base` (re-exported here).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Annotated, Any, NoReturn

import click
import typer
import typer.core

from nanum.cli.base import (
    UsageProblem,
    clean_errors,
    connect,
    exit_code_for_status,
    fail,
    note,
    print_json,
)
from nanum.units import all_digits, decimal_number, whole_number

__all__ = ["Command", "Group", "JobIdArg", "JsonOpt", "ServerOpt", "TokenOpt", "UsageProblem", "clean_errors",
           "connect", "digits", "exit_code_for_status", "fail", "note", "print_json"]

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


class _Strict(click.ParamType[Any]):
    """A number read as it is written on a command line, or refused: click's INT and FLOAT are Python's `int` and
    `float`, which also read '1_6' as 16, '１６' and ' 16' (and, for `float`, 'nan' and 'inf': a `--timeout nan`
    waited for ever)."""

    reads: Callable[[str], object]  # the text's value, or None where it is not written plainly
    refusal: str

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        read = type(self).reads(value) if isinstance(value, str) else value  # the number, not click's reading of it
        if read is None:
            self.fail(f"{value!r} {self.refusal}", param, ctx)
        return super().convert(read, param, ctx)


class _StrictInt(_Strict, click.types.IntParamType):
    reads = staticmethod(whole_number)
    refusal = "is not a whole number; give digits only, such as 3"


class _StrictIntRange(_StrictInt, click.IntRange):
    pass


class _StrictFloat(_Strict, click.types.FloatParamType):
    reads = staticmethod(decimal_number)
    refusal = "is not a number; write a finite one as 2, 0.5 or 1e3"


class _StrictFloatRange(_StrictFloat, click.FloatRange):
    pass


def _strict(kind: click.ParamType[Any]) -> click.ParamType[Any]:
    """`kind`, reading numbers as they are written on a command line (`_Strict`)."""
    if isinstance(kind, _Strict):
        return kind
    if isinstance(kind, click.IntRange | click.FloatRange):
        strict = _StrictIntRange if isinstance(kind, click.IntRange) else _StrictFloatRange
        bounds: dict[str, Any] = {"min": kind.min, "max": kind.max, "min_open": kind.min_open,
                                  "max_open": kind.max_open, "clamp": kind.clamp}
        return strict(**bounds)
    if type(kind) is click.types.IntParamType:
        return _StrictInt()
    if type(kind) is click.types.FloatParamType:
        return _StrictFloat()
    return kind


def _read_numbers_strictly(group: click.Group) -> None:
    for command in (group, *group.commands.values()):
        for param in command.params:
            param.type = _strict(param.type)
        if command is not group and isinstance(command, click.Group):
            _read_numbers_strictly(command)


class Command(_OneLineUsageErrors, typer.core.TyperCommand):
    """A command whose usage errors are one line: `@app.command(cls=Command)`."""


class Group(_OneLineUsageErrors, typer.core.TyperGroup):
    """A command group whose usage errors are one line, and whose commands' numbers are ASCII digits (`_strict`):
    `typer.Typer(cls=Group)`."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        _read_numbers_strictly(self)

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
