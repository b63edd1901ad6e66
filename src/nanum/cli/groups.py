"""The admin command groups (`nanum user`, `nanum lab`, `nanum node`) that several modules add commands to, and
what those commands share; nothing here imports the modules that fill the groups."""

from __future__ import annotations

from typing import Annotated

import typer

from nanum.cli.app import app
from nanum.cli.common import Group, UsageProblem
from nanum.units import decimal_number, whole_number

__all__ = ["NameArg", "lab_app", "limit_value", "node_app", "user_app"]

NameArg = Annotated[str, typer.Argument(show_default=False)]
user_app = typer.Typer(cls=Group, help="Users and their API tokens (admin).", no_args_is_help=True)
lab_app = typer.Typer(cls=Group, help="Labs and their quotas (admin).", no_args_is_help=True)
node_app = typer.Typer(cls=Group, help="GPU nodes and their agent tokens (admin).", no_args_is_help=True)
app.add_typer(user_app, name="user")
app.add_typer(lab_app, name="lab")
app.add_typer(node_app, name="node")


def limit_value(flag: str, value: str, kind: type[int] | type[float]) -> int | float | None:
    """`8` -> 8; `none`/`unlimited` -> None (removes the limit); anything else is a usage error."""
    if value.strip().lower() in ("none", "unlimited", "-"):
        return None
    number = whole_number(value) if kind is int else decimal_number(value)  # as written: '1_0' is not 10
    if number is None:
        what = "a whole number" if kind is int else "a number"
        raise UsageProblem(f"{flag}: {value!r} is not {what} (or `none` to remove the limit)")
    if number < 0:
        raise UsageProblem(f"{flag} must not be negative")
    return number
