"""`nanum user import FILE`: bring many people in from a CSV file (admin), idempotently, with a report; and
`nanum user disable|enable NAME`.

The file has a header row; the columns are `name`, `unix_user` (or `unix`, `account`), `labs` (several separated
by `;` or spaces), `role` (`member`, `manager` of the listed labs, or `admin`; empty: member) and `email`.
"""

from __future__ import annotations

import csv
import os
import re
from pathlib import Path
from typing import Annotated, Any

import typer

from nanum.cli.common import (
    Command,
    JsonOpt,
    ServerOpt,
    TokenOpt,
    UsageProblem,
    clean_errors,
    connect,
    note,
    print_json,
)
from nanum.cli.groups import user_app

_ALIASES = {"name": "name", "user": "name", "unix_user": "unix_user", "unix": "unix_user", "account": "unix_user",
            "unix account": "unix_user", "labs": "labs", "lab": "labs", "role": "role", "email": "email",
            "e-mail": "email"}


@user_app.command("import", cls=Command)
@clean_errors
def user_import(
    file: Annotated[Path, typer.Argument(metavar="FILE.csv", show_default=False,
                                         help="name, unix_user, labs, role, email (a header row first).")],
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Report what would change; change nothing.")] = False,
    tokens: Annotated[Path | None, typer.Option("--tokens", metavar="FILE", help="Write the new users' API "
                                                "tokens here (name,token; only you may read it) instead of "
                                                "printing them.")] = None,
    json: JsonOpt = False,
    server: ServerOpt = None,
    token: TokenOpt = None,
) -> None:
    """Create or update the users in a CSV file: each ends with exactly the labs, role, Unix account and email
    listed; running it again changes nothing."""
    rows = read_users(file)
    with connect(server, token) as client:
        report = client.import_users(rows, dry_run=dry_run)
    if tokens is not None and report["created"] and not dry_run:
        _write_tokens(tokens, report["created"])
    if json:
        print_json(report)
        return
    for line in report_lines(report, show_tokens=tokens is None):
        print(line)
    if tokens is not None and report["created"] and not dry_run:
        note(f"wrote {len(report['created'])} new tokens to {tokens}")


@user_app.command("disable", cls=Command)
@clean_errors
def user_disable(
    name: Annotated[str, typer.Argument(show_default=False)],
    json: JsonOpt = False,
    server: ServerOpt = None,
    token: TokenOpt = None,
) -> None:
    """Disable a user (admin): their tokens and sessions stop working at once; their queued jobs stay, but do not
    start until they are enabled again. Directory users are disabled in the directory instead."""
    _set_disabled(name, True, json, server, token)


@user_app.command("enable", cls=Command)
@clean_errors
def user_enable(
    name: Annotated[str, typer.Argument(show_default=False)],
    json: JsonOpt = False,
    server: ServerOpt = None,
    token: TokenOpt = None,
) -> None:
    """Enable a disabled user again (admin): their tokens work and their queued jobs may start."""
    _set_disabled(name, False, json, server, token)


def _set_disabled(name: str, disabled: bool, json: bool, server: str | None, token: str | None) -> None:
    with connect(server, token) as client:
        done = client.set_user_disabled(name, disabled)
    if json:
        print_json(done)
    elif disabled:
        print(f"User {name} is disabled: their tokens and sessions are refused, their queued jobs wait")
    else:
        print(f"User {name} is enabled again")


def read_users(path: Path) -> list[dict[str, Any]]:
    """The users of a CSV file as the API takes them; a bad file is a UsageProblem naming the line."""
    try:
        text = path.read_text(encoding="utf-8-sig")
    except OSError as exc:
        raise UsageProblem(f"cannot read {path}: {exc.strerror}") from None
    reader = csv.DictReader(text.splitlines())
    columns = {c: _ALIASES.get(c.strip().lower()) for c in reader.fieldnames or []}
    unknown = [c for c, known in columns.items() if known is None]
    if "name" not in columns.values() or unknown:
        raise UsageProblem(f"{path}: the header must name the columns name, unix_user, labs, role, email"
                           + (f" (unknown column {unknown[0]!r})" if unknown else " (no name column)"))
    users = []
    for number, raw in enumerate(reader, start=2):
        row = {columns[c]: (v or "").strip() for c, v in raw.items() if c in columns}
        if not row.get("name"):
            raise UsageProblem(f"{path} line {number}: no name; every line needs one")
        role = row.get("role", "").lower() or "member"
        if role not in ("member", "manager", "admin"):
            raise UsageProblem(f"{path} line {number}: role {role!r} is not member, manager or admin")
        users.append({"name": row["name"], "unix_user": row.get("unix_user") or None,
                      "labs": [lab for lab in re.split(r"[;|\s]+", row.get("labs", "")) if lab],
                      "role": role, "email": row.get("email") or None})
    return users


def report_lines(report: dict[str, Any], show_tokens: bool) -> list[str]:
    verb = "would " if report["dry_run"] else ""
    lines = []
    for entry in report["created"]:
        token = f"  token {entry['token']}" if show_tokens and entry.get("token") and not report["dry_run"] else ""
        lines.append(f"{verb}create {entry['name']}: {_changes(entry['changes'])}{token}")
    for entry in report["changed"]:
        lines.append(f"{verb}change {entry['name']}: {_changes(entry['changes'])}")
    counts = len(report["created"]), len(report["changed"]), len(report["unchanged"])
    if report["dry_run"]:
        lines.append("dry run: {} to create, {} to change, {} unchanged; nothing was changed".format(*counts))
    else:
        lines.append("{} created, {} changed, {} unchanged".format(*counts))
    return lines


def _changes(changes: dict[str, list[Any]]) -> str:
    def text(value: Any) -> str:
        if isinstance(value, list):
            return ", ".join(value) or "none"
        return "none" if value is None else str(value)

    return "; ".join(f"{k} {text(a)} -> {text(b)}" for k, (a, b) in changes.items()) or "as listed"


def _write_tokens(path: Path, created: list[dict[str, Any]]) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["name", "token"])
        writer.writerows([entry["name"], entry["token"]] for entry in created)
