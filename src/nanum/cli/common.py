"""What every client command shares: the --server/--token options, the client they resolve to, and the
rule that a failure is one `nanum: error: ...` line on stderr with exit code 1 (failed) or 2 (bad usage or
refused request).

Kept free of heavy imports: httpx and rich load only when a command talks to a server or draws a table.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated, Any, NoReturn, TypeVar

import click
import typer
import typer.core

if TYPE_CHECKING:
    from nanum.client import Client

F = TypeVar("F", bound=Callable[..., Any])

ServerOpt = Annotated[
    str | None,
    typer.Option("--server", envvar="NANUM_SERVER", show_envvar=False, metavar="URL",
                 help="Server URL (default: $NANUM_SERVER, else the one `nanum login` or `nanum up` saved)."),
]
TokenOpt = Annotated[
    str | None,
    typer.Option("--token", envvar="NANUM_TOKEN", show_envvar=False, metavar="TOKEN",
                 help="API token (default: $NANUM_TOKEN, else the saved one)."),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print the API's JSON instead of text.")]


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


class UsageProblem(Exception):
    """A bad value on the command line or in a script header: exit code 2."""


def fail(message: str, code: int = 1) -> NoReturn:
    """Print `nanum: error: MESSAGE` on stderr and exit."""
    sys.stderr.write(f"nanum: error: {message}\n")
    raise typer.Exit(code)


def note(message: str) -> None:
    """A line for the person at the terminal (stderr, so stdout stays parseable)."""
    sys.stderr.write(f"{message}\n")


def connect(server: str | None, token: str | None) -> Client:
    """The client for the resolved settings; exits with a clear line when no server is configured."""
    from nanum.client import Client, resolve_settings

    url, tok = resolve_settings(server, token)
    if url is None:
        fail("no nanum server configured; start one with `nanum up`, or run "
             "`nanum login --server URL --token TOKEN`, or set NANUM_SERVER and NANUM_TOKEN", 2)
    return Client(url, tok)


def exit_code_for_status(status: int) -> int:
    """Refused requests (4xx) are exit 2; server trouble (5xx) is exit 1."""
    return 2 if 400 <= status < 500 else 1


def clean_errors(func: F) -> F:
    """Turn the client's exceptions and bad values into one line on stderr and the right exit code."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        from nanum.client import ApiError, NanumError

        try:
            return func(*args, **kwargs)
        except UsageProblem as exc:
            fail(str(exc), 2)
        except ApiError as exc:
            fail(exc.detail, exit_code_for_status(exc.status))
        except NanumError as exc:
            fail(str(exc), 1)
        except KeyboardInterrupt:
            sys.stderr.write("\n")
            raise typer.Exit(130) from None
        except BrokenPipeError:
            sys.stderr.close()  # `nanum ps | head`: the reader left; nothing more to say
            raise typer.Exit(0) from None

    return wrapper  # type: ignore[return-value]


def print_json(data: Any) -> None:
    import json

    sys.stdout.write(json.dumps(data, indent=2) + "\n")

