"""`nanum lab member list|add|remove|set`: a lab's members, for its managers and admins."""

from __future__ import annotations

from typing import Annotated

import typer

from nanum.cli.common import Command, Group, JsonOpt, ServerOpt, TokenOpt, clean_errors, connect, fail, print_json
from nanum.cli.groups import NameArg, lab_app, limit_value

_Opt = typer.Option
member_app = typer.Typer(cls=Group, help="A lab's members, roles and member limits (its managers, admins).",
                         no_args_is_help=True)
lab_app.add_typer(member_app, name="member")

UserArg = Annotated[str, typer.Argument(metavar="USER", show_default=False)]


@member_app.command("list", cls=Command)
@clean_errors
def member_list(lab: NameArg, json: JsonOpt = False, server: ServerOpt = None, token: TokenOpt = None) -> None:
    """The lab's members with their roles and limits."""
    with connect(server, token) as client:
        found = client.lab_members(lab)
    if json:
        print_json(found)
        return
    for m in found:
        limits = ", ".join(f"{k.replace('_', ' ')} {m[k]:g}" for k in ("max_gpus", "max_running_jobs",
                                                                        "monthly_gpu_hours") if m[k] is not None)
        print(f"{m['user']:<20} {m['role']:<8} {m['unix_user'] or '-':<12} {limits or 'no limits of their own'}")


@member_app.command("add", cls=Command)
@clean_errors
def member_add(
    lab: NameArg,
    user: UserArg,
    manager: Annotated[bool, _Opt("--manager", help="As a manager of the lab (admins only).")] = False,
    server: ServerOpt = None,
    token: TokenOpt = None,
) -> None:
    """Add an existing user to the lab (or change their role there)."""
    with connect(server, token) as client:
        added = client.put_member(lab, user, "manager" if manager else "member")
    print(f"{added['user']} is a {added['role']} of lab {lab}")


@member_app.command("remove", cls=Command)
@clean_errors
def member_remove(lab: NameArg, user: UserArg, server: ServerOpt = None, token: TokenOpt = None) -> None:
    """Take a user out of the lab; their jobs stay."""
    with connect(server, token) as client:
        client.remove_member(lab, user)
    print(f"Removed {user} from lab {lab}")


@member_app.command("set", cls=Command)
@clean_errors
def member_set(
    lab: NameArg,
    user: UserArg,
    max_gpus: Annotated[str | None, _Opt("--max-gpus", metavar="N", help="`none` removes it.")] = None,
    max_running_jobs: Annotated[str | None, _Opt("--max-running-jobs", metavar="N", help="`none` removes it.")] = None,
    monthly_gpu_hours: Annotated[str | None, _Opt("--monthly-gpu-hours", metavar="H",
                                                  help="`none` removes it.")] = None,
    json: JsonOpt = False,
    server: ServerOpt = None,
    token: TokenOpt = None,
) -> None:
    """Set a member's own limits, each within the lab's."""

    given = {"max_gpus": ("--max-gpus", max_gpus, int), "max_running_jobs": ("--max-running-jobs",
             max_running_jobs, int), "monthly_gpu_hours": ("--monthly-gpu-hours", monthly_gpu_hours, float)}
    changes = {k: limit_value(flag, v, kind) for k, (flag, v, kind) in given.items() if v is not None}
    if not changes:
        fail("nothing to change; give at least one of --max-gpus, --max-running-jobs, --monthly-gpu-hours", 2)
    with connect(server, token) as client:
        member = client.set_member_limits(lab, user, **changes)
    if json:
        print_json(member)
    else:
        print(f"{user} in lab {lab}: " + ", ".join(f"{k.replace('_', ' ')} {member[k]}" for k in changes))
