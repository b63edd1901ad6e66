"""`nanum token list|create|revoke`: your API tokens (an admin: anyone's with --user)."""

from __future__ import annotations

from typing import Annotated

import typer

from nanum.cli.app import app
from nanum.cli.common import Command, Group, JsonOpt, ServerOpt, TokenOpt, clean_errors, connect, digits, print_json

_Opt = typer.Option
token_app = typer.Typer(cls=Group, help="Your API tokens: list, create, revoke.", no_args_is_help=True)
app.add_typer(token_app, name="token")

UserOpt = Annotated[str | None, _Opt("--user", metavar="NAME", help="Another user's tokens (admins only).")]


@token_app.command("list", cls=Command)
@clean_errors
def token_list(user: UserOpt = None, json: JsonOpt = False, server: ServerOpt = None, token: TokenOpt = None) -> None:
    """Your tokens (never their values): id, name, created, expires, last used."""
    with connect(server, token) as client:
        found = client.tokens(user)
    if json:
        print_json(found)
        return
    print(f"{'ID':>4}  {'NAME':<28} {'CREATED':<17} {'EXPIRES':<17} LAST USED")
    for t in found:
        print(f"{t['id']:>4}  {t['name']:<28} {_day(t['created']):<17} {_day(t['expires']) or 'never':<17} "
              f"{_day(t['last_used']) or '-'}")


@token_app.command("create", cls=Command)
@clean_errors
def token_create(
    name: Annotated[str, typer.Argument(metavar="NAME", help="What it is for, e.g. laptop or ci.")],
    expires: Annotated[str | None, _Opt("--expires", metavar="DURATION",
                                        help="How long it lasts: 90d, 12h, 30m (default: until revoked).")] = None,
    server: ServerOpt = None,
    token: TokenOpt = None,
) -> None:
    """Create a token for yourself and print it (shown only this once)."""
    from nanum.cli.jobspec import parse_time

    # `--expires ""` (an unset variable in a script) is refused, not read as "never": a token meant to lapse would not
    seconds = parse_time(expires, "--expires") if expires is not None else None
    with connect(server, token) as client:
        created = client.create_token(name, seconds)
    print(created["token"])


@token_app.command("revoke", cls=Command)
@clean_errors
def token_revoke(
    token_id: Annotated[int, typer.Argument(metavar="ID", parser=digits,
                                            help="From `nanum token list` (0: your first token).")],
    user: UserOpt = None,
    server: ServerOpt = None,
    token: TokenOpt = None,
) -> None:
    """Revoke a token at once: whoever holds it can no longer use it."""
    with connect(server, token) as client:
        client.revoke_token(token_id, user)
    print(f"Revoked token {token_id}" + (f" of {user}" if user else ""))


def _day(stamp: str | None) -> str:
    """`2026-12-01T14:02:07.123Z` -> `2026-12-01 14:02`."""
    return "" if not stamp else stamp[:16].replace("T", " ")
