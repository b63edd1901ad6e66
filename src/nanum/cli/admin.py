"""Accounts and access: `nanum login`; for admins `nanum user add`, `nanum lab add`, `nanum node add`."""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from nanum.cli.app import app
from nanum.cli.common import Command, Group, JsonOpt, ServerOpt, TokenOpt, clean_errors, connect, note, print_json

_Opt = typer.Option
NameArg = Annotated[str, typer.Argument(show_default=False)]

user_app = typer.Typer(cls=Group, help="Users and their API tokens (admin).", no_args_is_help=True)
lab_app = typer.Typer(cls=Group, help="Labs and their quotas (admin).", no_args_is_help=True)
node_app = typer.Typer(cls=Group, help="GPU nodes and their agent tokens (admin).", no_args_is_help=True)
app.add_typer(user_app, name="user")
app.add_typer(lab_app, name="lab")
app.add_typer(node_app, name="node")


@app.command(cls=Command)
@clean_errors
def login(
    server: Annotated[str, _Opt("--server", envvar="NANUM_SERVER", help="Server URL, e.g. http://gpu-head:8470",
                                show_default=False)],
    token: Annotated[str | None, _Opt("--token", envvar="NANUM_TOKEN",
                                      help="Your API token (default: asked for, hidden).")] = None,
) -> None:
    """Check a server URL and token and save them for the other commands."""
    from nanum.client import Client
    from nanum.config import save_credentials

    if not token:
        token = typer.prompt("API token", hide_input=True)
    with Client(server, token) as client:
        me = client.me()
    path = save_credentials(server.rstrip("/"), token)
    role = " (admin)" if me.get("admin") else ""
    print(f"Logged in to {server.rstrip('/')} as {me['name']}{role}; saved to {path}")


@user_app.command("add", cls=Command)
@clean_errors
def user_add(
    name: NameArg,
    lab: Annotated[list[str] | None, _Opt("--lab", metavar="LAB",
                                          help="A lab to join (the first is the default); repeat.")] = None,
    admin: Annotated[bool, _Opt("--admin", help="May manage users, labs, nodes and every job.")] = False,
    unix_user: Annotated[str | None, _Opt("--unix-user", metavar="U",
                                          help="Account jobs run as (default: NAME).")] = None,
    json: JsonOpt = False,
    server: ServerOpt = None,
    token: TokenOpt = None,
) -> None:
    """Create a user and print their API token (shown only this once)."""
    with connect(server, token) as client:
        created = client.add_user(name, lab or [], admin=admin, unix_user=unix_user)
    if json:
        print_json(created)
    else:
        print(created["token"])
        if sys.stdout.isatty():
            note(f"{name} can now run: nanum login --server {client.server} --token {created['token']}")


@user_app.command("list", cls=Command)
@clean_errors
def user_list(json: JsonOpt = False, server: ServerOpt = None, token: TokenOpt = None) -> None:
    """All users (admin)."""
    with connect(server, token) as client:
        users = client.users()
    if json:
        print_json(users)
        return
    for u in users:
        labs = ",".join(u.get("labs") or [])
        print(f"{u['name']}\t{'admin' if u.get('admin') else 'member'}\t{labs}\t{u.get('unix_user') or ''}")


@lab_app.command("add", cls=Command)
@clean_errors
def lab_add(
    name: NameArg,
    guaranteed_gpus: Annotated[int | None, _Opt("--guaranteed-gpus", min=0, metavar="N",
                                                help="GPUs the lab may reclaim from borrowers.")] = None,
    max_gpus: Annotated[int | None, _Opt("--max-gpus", min=0, metavar="N",
                                         help="Most GPUs the lab may hold at once.")] = None,
    max_running_jobs: Annotated[int | None, _Opt("--max-running-jobs", min=0, metavar="N",
                                                 help="Most jobs the lab may run at once.")] = None,
    monthly_gpu_hours: Annotated[float | None, _Opt("--monthly-gpu-hours", min=0, metavar="H",
                                                    help="GPU-hours the lab may use per month.")] = None,
    weight: Annotated[float | None, _Opt("--weight", min=0, metavar="W",
                                         help="Fair-share weight (default: 1).")] = None,
    json: JsonOpt = False,
    server: ServerOpt = None,
    token: TokenOpt = None,
) -> None:
    """Create a lab with its quota."""
    quota = {"guaranteed_gpus": guaranteed_gpus, "max_gpus": max_gpus, "max_running_jobs": max_running_jobs,
             "monthly_gpu_hours": monthly_gpu_hours, "weight": weight}
    with connect(server, token) as client:
        created = client.add_lab(name, **{k: v for k, v in quota.items() if v is not None})
    if json:
        print_json(created)
    else:
        print(f"Created lab {name}")


@lab_app.command("list", cls=Command)
@clean_errors
def lab_list(json: JsonOpt = False, server: ServerOpt = None, token: TokenOpt = None) -> None:
    """All labs and their quotas."""
    with connect(server, token) as client:
        labs = client.labs()
    if json:
        print_json(labs)
        return
    for lab in labs:
        limits = " ".join(f"{k}={v}" for k, v in lab.items() if k != "name" and v is not None)
        print(f"{lab['name']}\t{limits}")


@node_app.command("add", cls=Command)
@clean_errors
def node_add(name: NameArg, json: JsonOpt = False, server: ServerOpt = None, token: TokenOpt = None) -> None:
    """Register a GPU node and print the token its agent uses (shown only this once)."""
    with connect(server, token) as client:
        created = client.add_node(name)
    if json:
        print_json(created)
        return
    print(created["token"])
    if sys.stdout.isatty():
        note(f"on {name} run: nanum agent --server {client.server} --token {created['token']} --name {name}")
