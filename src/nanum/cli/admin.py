"""Accounts and access: `nanum login`; for admins `nanum user add|set|list`, `nanum lab add|set|show|list`,
`nanum node add` (and `set`, `drain`, `resume`, `remove` in nanum.cli.fleet)."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Annotated

import typer

from nanum.cli.app import app
from nanum.cli.common import (
    Command,
    JsonOpt,
    ServerOpt,
    TokenOpt,
    UsageProblem,
    clean_errors,
    connect,
    fail,
    note,
    print_json,
)
from nanum.cli.groups import NameArg, lab_app, limit_value, node_app, user_app

if TYPE_CHECKING:
    from nanum.client import Client

_Opt = typer.Option


@app.command(cls=Command)
@clean_errors
def login(
    url: Annotated[str | None, typer.Argument(metavar="[URL]", show_default=False,
                                              help="Server URL, e.g. http://gpu-head:8765 (or --server).")] = None,
    server: Annotated[str | None, _Opt("--server", envvar="NANUM_SERVER", metavar="URL",
                                       help="Server URL, e.g. http://gpu-head:8765", show_default=False)] = None,
    token: Annotated[str | None, _Opt("--token", envvar="NANUM_TOKEN",
                                      help="Your API token (default: asked for, hidden).")] = None,
    user: Annotated[str | None, _Opt("--user", "-u", metavar="NAME", help="Your directory name, where the "
                                     "server takes passwords (default: asked for, offering this account's).")] = None,
    password_stdin: Annotated[bool, _Opt("--password-stdin", help="Read the password from standard input "
                                         "instead of asking (for scripts).")] = False,
    oidc: Annotated[bool, _Opt("--oidc", help="Log in with the server's single sign-on: open the address shown, "
                               "enter the code, and the token it hands out is saved.")] = False,
) -> None:
    """Log in and save the server and your token for the other commands: `nanum login http://gpu-head:8765`.
    Where the server has a directory, asks your name and password (never echoed) and saves the token it hands
    out, which expires; with --oidc, logs in by single sign-on in a browser; else asks for your API token."""
    from nanum.client import Client
    from nanum.config import save_credentials

    server = url or server
    if not server:
        raise UsageProblem("give the server's URL: `nanum login http://HOST:8765`")
    server = server.rstrip("/")
    expires = None
    if oidc:
        from nanum.cli.sso import device_login

        with Client(server) as anonymous:
            token, expires = device_login(anonymous)
    if not token:
        with Client(server) as anonymous:
            if _takes_passwords(anonymous):
                token, expires = _password_login(anonymous, user, password_stdin)
    if not token:
        token = typer.prompt("API token", hide_input=True)
    with Client(server, token) as client:
        me = client.me()
    path = save_credentials(server, token)
    role = " (admin)" if me.get("admin") else ""
    until = f"; the token expires {expires[:16].replace('T', ' ')} UTC" if expires else ""
    print(f"Logged in to {server} as {me['name']}{role}; saved to {path}{until}")


def _takes_passwords(client: Client) -> bool:
    from nanum.client import ApiError

    try:
        return bool(client.auth_methods().get("password"))
    except ApiError as exc:
        if exc.status == 404:  # a server from before directory logins
            return False
        raise


def _password_login(client: Client, user: str | None, password_stdin: bool) -> tuple[str, str | None]:
    import getpass
    import socket

    name = user or typer.prompt("Username", default=getpass.getuser())
    password = sys.stdin.readline().rstrip("\n") if password_stdin else typer.prompt("Password", hide_input=True)
    done = client.password_login(name, password, f"login on {socket.gethostname()}"[:64])
    return done["token"], done.get("expires")


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
        note(how_to_log_in(name, client.server, created["token"]))


def how_to_log_in(name: str, server: str, token: str) -> str:
    """What to tell a new user: the command that logs them in, and the web page that takes the same token."""
    return (f"{name} logs in with: nanum login {server} --token {token}\n"
            f"or in a browser at {server}/login with that token (shown only this once).")


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
    grace: Annotated[float | None, _Opt("--grace", min=0, metavar="S",
                                        help="SIGTERM to SIGKILL when its jobs stop (default: 60).")] = None,
    json: JsonOpt = False,
    server: ServerOpt = None,
    token: TokenOpt = None,
) -> None:
    """Create a lab with its quota."""
    quota = {"guaranteed_gpus": guaranteed_gpus, "max_gpus": max_gpus, "max_running_jobs": max_running_jobs,
             "monthly_gpu_hours": monthly_gpu_hours, "weight": weight, "grace_s": grace}
    with connect(server, token) as client:
        created = client.add_lab(name, **{k: v for k, v in quota.items() if v is not None})
    if json:
        print_json(created)
    else:
        print(f"Created lab {name}")
    if not json and created.get("warning"):
        note(f"warning: {created['warning']}")


@lab_app.command("set", cls=Command)
@clean_errors
def lab_set(
    name: NameArg,
    guaranteed_gpus: Annotated[str | None, _Opt("--guaranteed-gpus", metavar="N",
                                                help="GPUs it may reclaim from borrowers; `none`.")] = None,
    max_gpus: Annotated[str | None, _Opt("--max-gpus", metavar="N",
                                         help="Most GPUs the lab may hold at once; `none`: unlimited.")] = None,
    max_running_jobs: Annotated[str | None, _Opt("--max-running-jobs", metavar="N",
                                                 help="Most jobs the lab may run at once; `none`: unlimited.")] = None,
    monthly_gpu_hours: Annotated[str | None, _Opt("--monthly-gpu-hours", metavar="H",
                                                  help="GPU-hours per month; `none`: no budget.")] = None,
    weight: Annotated[float | None, _Opt("--weight", min=0, metavar="W", help="Fair-share weight.")] = None,
    grace: Annotated[str | None, _Opt("--grace", metavar="S",
                                      help="SIGTERM to SIGKILL when its jobs stop; `none`.")] = None,
    json: JsonOpt = False,
    server: ServerOpt = None,
    token: TokenOpt = None,
) -> None:
    """Change a lab's quota; only the options given change. Takes effect at the next scheduling cycle and is
    recorded (`nanum lab show` lists who changed what, when)."""
    from nanum.cli.sharing_views import quota_text

    given = {"guaranteed_gpus": ("--guaranteed-gpus", guaranteed_gpus, int),
             "max_gpus": ("--max-gpus", max_gpus, int),
             "max_running_jobs": ("--max-running-jobs", max_running_jobs, int),
             "monthly_gpu_hours": ("--monthly-gpu-hours", monthly_gpu_hours, float),
             "grace_s": ("--grace", grace, float)}
    changes: dict[str, object] = {k: limit_value(flag, v, kind) for k, (flag, v, kind) in given.items()
                                  if v is not None}
    if weight is not None:
        changes["weight"] = weight
    if not changes:
        fail("nothing to change; give at least one of --guaranteed-gpus, --max-gpus, --max-running-jobs, "
             "--monthly-gpu-hours, --weight, --grace", 2)
    with connect(server, token) as client:
        lab = client.set_lab(name, **changes)
    if json:
        print_json(lab)
    else:
        print(f"Lab {name}: {quota_text(dict(lab))}")
    if not json and lab.get("warning"):
        note(f"warning: {lab['warning']}")


@lab_app.command("show", cls=Command)
@clean_errors
def lab_show(name: NameArg, json: JsonOpt = False, server: ServerOpt = None, token: TokenOpt = None) -> None:
    """A lab's quota, members, jobs and GPUs now, this month's usage and budget, work lost to preemption, and the
    history of its quota (who changed what, when) and budget warnings."""
    from nanum.cli.sharing_views import history_lines, lab_lines

    with connect(server, token) as client:
        lab = client.lab(name)
    if json:
        print_json(lab)
        return
    lines = lab_lines(lab)
    width = max(len(k) for k, _ in lines)
    sys.stdout.write("".join(f"{k + ':':<{width + 1}} {v}\n" for k, v in lines))
    history = history_lines(lab.get("history") or [])
    if history:
        sys.stdout.write("history:\n" + "".join(f"  {line}\n" for line in history))


@user_app.command("set", cls=Command)
@clean_errors
def user_set(
    name: NameArg,
    max_gpus: Annotated[str | None, _Opt("--max-gpus", metavar="N",
                                         help="Most GPUs the user may hold at once; `none`: unlimited.")] = None,
    max_running_jobs: Annotated[str | None, _Opt("--max-running-jobs", metavar="N",
                                                 help="Most jobs the user may run at once; `none`: unlimited.")] = None,
    monthly_gpu_hours: Annotated[str | None, _Opt("--monthly-gpu-hours", metavar="H",
                                                  help="GPU-hours per month; `none`: no budget.")] = None,
    json: JsonOpt = False,
    server: ServerOpt = None,
    token: TokenOpt = None,
) -> None:
    """Set a user's own limits, on top of their labs' (admin). Takes effect at the next scheduling cycle."""
    given = {"max_gpus": ("--max-gpus", max_gpus, int),
             "max_running_jobs": ("--max-running-jobs", max_running_jobs, int),
             "monthly_gpu_hours": ("--monthly-gpu-hours", monthly_gpu_hours, float)}
    changes = {k: limit_value(flag, v, kind) for k, (flag, v, kind) in given.items() if v is not None}
    if not changes:
        fail("nothing to change; give --max-gpus, --max-running-jobs or --monthly-gpu-hours", 2)
    with connect(server, token) as client:
        user = client.set_user(name, **changes)
    if json:
        print_json(user)
        return
    limits = [f"{k.replace('_', ' ')} {user.get(k) if user.get(k) is not None else 'none'}" for k in given]
    print(f"User {name}: {', '.join(limits)}")


@lab_app.command("list", cls=Command)
@clean_errors
def lab_list(json: JsonOpt = False, server: ServerOpt = None, token: TokenOpt = None) -> None:
    """All labs and their quotas."""
    with connect(server, token) as client:
        labs = client.labs()
    if json:
        print_json(labs)
        return
    from nanum.cli.sharing_views import quota_text

    for lab in labs:
        print(f"{lab['name']}\t{quota_text(dict(lab))}")


@node_app.command("accept", cls=Command)
@clean_errors
def node_accept(name: NameArg, json: JsonOpt = False, server: ServerOpt = None, token: TokenOpt = None) -> None:
    """Schedule the GPUs a node reports beyond those it was registered with (see `nanum nodes`)."""
    with connect(server, token) as client:
        node = client.accept_node(name)
    if json:
        print_json(node)
        return
    print(f"Node {name} now schedules {len(node['gpus'])} GPUs.")


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
        note(f"on {name}, save this token in a file only you can read (chmod 600 FILE) and run: "
             f"nanum agent --server {client.server} --token-file FILE --name {name}")


from nanum.cli import fleet as _fleet  # noqa: E402,F401  (registers `nanum node set|drain|resume|remove`)
from nanum.cli import members as _members  # noqa: E402,F401  (registers `nanum lab member`)
from nanum.cli import onboarding as _onboarding  # noqa: E402,F401  (registers `nanum user import`)
from nanum.cli import tokens as _tokens  # noqa: E402,F401  (registers `nanum token`)
