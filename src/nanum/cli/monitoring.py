"""Idle detection and notices from the command line: `nanum idle show|set` (the server's or a lab's idle policy),
`nanum notify show|set` (webhook, dashboard URL, SMTP) and `nanum contact` (where a user hears about their jobs)."""

from __future__ import annotations

import sys
from typing import Annotated, Any

import typer

from nanum.cli.app import app
from nanum.cli.common import (
    Command,
    Group,
    JsonOpt,
    ServerOpt,
    TokenOpt,
    UsageProblem,
    clean_errors,
    connect,
    print_json,
)

_Opt = typer.Option
idle_app = typer.Typer(
    cls=Group, help="When jobs count as idle, and what then happens (admin sets).", no_args_is_help=True
)
notify_app = typer.Typer(cls=Group, help="How owners of idle jobs are told (admin).", no_args_is_help=True)
app.add_typer(idle_app, name="idle")
app.add_typer(notify_app, name="notify")

LabOpt = Annotated[str | None, _Opt("--lab", metavar="LAB", help="A lab's policy instead of the server's.")]
Window = Annotated[str | None, _Opt(metavar="DURATION", help="e.g. 30m, 2h; `never`; `inherit` (the default).")]
WINDOWS = {"batch_flag": "batch_flag_s", "batch_release": "batch_release_s",
           "notebook_flag": "notebook_flag_s", "notebook_release": "notebook_release_s"}  # fmt: skip


def window(text: str, option: str) -> float | str | None:
    """A window option: a duration in seconds, None for `never`, or "inherit"."""
    from nanum.cli.jobspec import parse_time

    word = text.strip().lower()
    if word in ("never", "off", "none"):
        return None
    if word in ("inherit", "default"):
        return "inherit"
    return float(parse_time(text, option))


def policy_lines(found: dict[str, Any]) -> list[str]:
    """The policy as `nanum idle show` prints it; fields this layer sets itself are marked with *."""
    from nanum.monitor.idle import duration

    policy, own = found["policy"], found.get("overrides") or {}
    rows = []
    for key, value in policy.items():
        text = ("never" if value is None else duration(value)) if key.endswith("_s") else f"{value:g}"
        rows.append(f"{key.removesuffix('_s'):<20} {text}{' *' if key in own else ''}")
    who = f"lab {found['lab']}" if found.get("lab") else "the server"
    return [f"Idle policy of {who} (* set here; the rest follows the defaults or the server):", *rows]


@idle_app.command("show", cls=Command)
@clean_errors
def idle_show(lab: LabOpt = None, json: JsonOpt = False, server: ServerOpt = None, token: TokenOpt = None) -> None:
    """The idle policy in force: thresholds, and after how long idle jobs are flagged and released."""
    with connect(server, token) as client:
        found = client.idle_policy(lab)
    if json:
        print_json(found)
    else:
        sys.stdout.write("\n".join(policy_lines(found)) + "\n")


@idle_app.command("set", cls=Command)
@clean_errors
def idle_set(
    lab: LabOpt = None,
    batch_flag: Annotated[
        str | None, _Opt("--batch-flag", metavar="DURATION", help="Flag idle batch jobs after.")
    ] = None,
    batch_release: Annotated[
        str | None,
        _Opt("--batch-release", metavar="DURATION", help="Release idle batch jobs after (`never`: only flag)."),
    ] = None,
    notebook_flag: Annotated[
        str | None, _Opt("--notebook-flag", metavar="DURATION", help="Flag idle notebooks after.")
    ] = None,
    notebook_release: Annotated[
        str | None, _Opt("--notebook-release", metavar="DURATION", help="Release idle notebooks after.")
    ] = None,
    util: Annotated[float | None, _Opt("--util", metavar="PCT", help="Idle at GPU utilisation up to PCT %.")] = None,
    cpu: Annotated[float | None, _Opt("--cpu", metavar="PCT", help="Idle at CPU use up to PCT % of a core.")] = None,
    server: ServerOpt = None,
    token: TokenOpt = None,
) -> None:
    """Change the idle policy (durations like 30m or 2h; `never`; `inherit` goes back to the default)."""
    given = {"batch_flag": batch_flag, "batch_release": batch_release, "notebook_flag": notebook_flag,
             "notebook_release": notebook_release}  # fmt: skip
    changes: dict[str, Any] = {WINDOWS[k]: window(v, "--" + k.replace("_", "-")) for k, v in given.items() if v}
    if util is not None:
        changes["util_percent"] = util
    if cpu is not None:
        changes["cpu_percent"] = cpu
    if not changes:
        raise UsageProblem("nothing to change; give e.g. --notebook-flag 2h or --batch-release never")
    with connect(server, token) as client:
        found = client.set_idle_policy(changes, lab)
    sys.stdout.write("\n".join(policy_lines(found)) + "\n")


@notify_app.command("show", cls=Command)
@clean_errors
def notify_show(json: JsonOpt = False, server: ServerOpt = None, token: TokenOpt = None) -> None:
    """Where notices about idle jobs go."""
    with connect(server, token) as client:
        found = client.notify_settings()
    if json:
        print_json(found)
        return
    sys.stdout.write("".join(f"{k:<15} {'-' if v is None else v}\n" for k, v in found.items()))


@notify_app.command("set", cls=Command)
@clean_errors
def notify_set(
    webhook: Annotated[str | None, _Opt("--webhook", metavar="URL", help="Post every notice here (JSON).")] = None,
    public_url: Annotated[str | None, _Opt("--dashboard-url", metavar="URL", help="For links in notices.")] = None,
    smtp_host: Annotated[str | None, _Opt("--smtp-host", metavar="HOST", help="Send email through HOST.")] = None,
    smtp_port: Annotated[int | None, _Opt("--smtp-port", metavar="PORT")] = None,
    smtp_from: Annotated[str | None, _Opt("--smtp-from", metavar="ADDRESS")] = None,
    smtp_user: Annotated[str | None, _Opt("--smtp-user", metavar="USER")] = None,
    smtp_password: Annotated[
        str | None,
        _Opt(
            "--smtp-password",
            envvar="NANUM_SMTP_PASSWORD",
            show_envvar=False,
            metavar="PASSWORD",
            help="Or $NANUM_SMTP_PASSWORD.",
        ),
    ] = None,
    starttls: Annotated[bool | None, _Opt("--starttls/--no-starttls")] = None,
    server: ServerOpt = None,
    token: TokenOpt = None,
) -> None:
    """Change where notices go; an empty value ("") clears a setting."""
    given = {"webhook_url": webhook, "public_url": public_url, "smtp_host": smtp_host, "smtp_port": smtp_port,
             "smtp_from": smtp_from, "smtp_user": smtp_user, "smtp_password": smtp_password,
             "smtp_starttls": starttls}  # fmt: skip
    changes = {k: (v if v != "" else None) for k, v in given.items() if v is not None}
    if not changes:
        raise UsageProblem("nothing to change; give e.g. --webhook URL or --smtp-host HOST")
    with connect(server, token) as client:
        found = client.set_notify(**changes)
    sys.stdout.write("".join(f"{k:<15} {'-' if v is None else v}\n" for k, v in found.items()))


@app.command(cls=Command)
@clean_errors
def contact(
    user: Annotated[str | None, typer.Argument(help="User (default: you).", show_default=False)] = None,
    email: Annotated[str | None, _Opt("--email", metavar="ADDRESS", help="Email notices here.")] = None,
    webhook: Annotated[str | None, _Opt("--webhook", metavar="URL", help="Post notices here (JSON).")] = None,
    server: ServerOpt = None,
    token: TokenOpt = None,
) -> None:
    """Where you (or, as an admin, USER) hear about idle jobs: `nanum contact --email me@lab.org` (replaces both
    the address and the webhook)."""
    with connect(server, token) as client:
        name = user or client.me()["name"]
        client.set_contact(name, email or None, webhook or None)
    print(
        f"Notices for {name} go to " + (", ".join(x for x in (email, webhook) if x) or "nobody but the cluster webhook")
    )
