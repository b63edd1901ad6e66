"""Fair sharing for everyone: `nanum usage` (accounting), `nanum priority` (why this order), and
`nanum checkpoint` (run inside a job: it has saved its state, so a preemption loses only what follows)."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Annotated

import typer

from nanum.cli.app import app
from nanum.cli.common import Command, JsonOpt, ServerOpt, TokenOpt, clean_errors, connect, fail, note, print_json

_Opt = typer.Option
CHECKPOINT_MARK = ".checkpoint"  # the agent watches its modification time (nanum.agent.jobrecord)


@app.command(cls=Command)
@clean_errors
def usage(
    lab: Annotated[str | None, _Opt("--lab", metavar="LAB", help="Only this lab.")] = None,
    user: Annotated[str | None, _Opt("--user", "-u", metavar="USER", help="Only this user.")] = None,
    month: Annotated[str | None, _Opt("--month", metavar="YYYY-MM", help="A calendar month (UTC).")] = None,
    since: Annotated[str | None, _Opt("--since", metavar="DATE", help="From this date or time (UTC).")] = None,
    until: Annotated[str | None, _Opt("--until", metavar="DATE", help="Up to this date (included) or time.")] = None,
    by: Annotated[str | None, _Opt("--by", metavar="day|user|lab",
                                   help="Group rows (default: lab; user with --lab; day with --user).")] = None,
    json: JsonOpt = False,
    csv: Annotated[bool, _Opt("--csv", help="Comma-separated values, unrounded (for finance).")] = False,
    server: ServerOpt = None,
    token: TokenOpt = None,
) -> None:
    """GPU-hours (charged per second of allocation), jobs, average wait and budget used; this month by default."""
    if month and (since or until):
        fail("give either --month or --since/--until, not both", 2)
    if by is not None and by not in ("day", "user", "lab"):
        fail(f"--by: {by!r} is not one of day, user, lab", 2)
    with connect(server, token) as client:
        report = client.usage(month=month, since=since, until=until, by=by, lab=lab, user=user)
    if json:
        print_json(report)
        return
    from nanum.cli import sharing_views as v

    if csv:
        sys.stdout.write(v.usage_csv(report))
        return
    from nanum.cli.views import print_table

    print(v.usage_title(report))
    print_table(v.usage_columns(report["by"]), v.usage_rows(report))


@app.command(cls=Command)
@clean_errors
def priority(
    user: Annotated[str | None, _Opt("--user", "-u", metavar="USER", help="Only this user's jobs.")] = None,
    lab: Annotated[str | None, _Opt("--lab", metavar="LAB", help="Only this lab's jobs.")] = None,
    json: JsonOpt = False,
    server: ServerOpt = None,
    token: TokenOpt = None,
) -> None:
    """Each pending job's priority broken into its factors (like sprio), in the order the queue considers them.

    RANK is the job's place in its partition's queue (1: next in line). Every order puts a higher TIER first
    (0..9, set by admins: `nanum modify ID --tier N`); inside a tier, under the default order (gittins), a job
    goes by class (short before long: under or over 4 GPU-hours received), then by the Gittins index learned
    from similar finished jobs times 2^((F - 0.5)/4), F the lab's fair-share factor (1 for an idle lab, 0.5 for
    one that used its weight's share of all decayed usage; FAIRSHARE shows it times its weight): x0.92 for a lab
    far over its share, x1.09 for an idle one; then by F, then by submit time. A job's --priority then reorders
    only its owner's own jobs of its tier among their places. The PRIORITY column is the multifactor sum that
    `--policy priority` orders by; `--policy fairshare` orders by FAIRSHARE, then USERSHARE."""
    with connect(server, token) as client:
        report = client.priority(user=user, lab=lab)
    if json:
        print_json(report)
        return
    if not report["jobs"]:
        note("No pending jobs.")
        return
    from nanum.cli.sharing_views import PRIORITY_COLUMNS, order_rule, priority_rows
    from nanum.cli.views import print_table

    weights = ", ".join(f"{k} {w:g}" for k, w in report["weights"].items())
    print(f"Queue order: {report['policy']}. PRIORITY = sum of weighted factors (weights: {weights}).")
    print(order_rule(report["policy"]))
    print_table(PRIORITY_COLUMNS, priority_rows(report))


@app.command(cls=Command)
@clean_errors
def checkpoint(
    ref: Annotated[str | None, typer.Argument(metavar="[ID]", show_default=False, help=(
        "Job ID, or ID_TASK for one task of an array (default: $NANUM_JOB_ID, inside a job)."))] = None,
    quiet: Annotated[bool, _Opt("--quiet", "-q", help="Print nothing.")] = False,
    server: ServerOpt = None,
    token: TokenOpt = None,
) -> None:
    """Say the job has just saved its state: a preemption then loses only the work done after it.

    Inside a job it touches $NANUM_CHECKPOINT_DIR/.checkpoint, which the job's agent reports; where a server
    and token are configured it also tells the server at once."""
    from nanum.cli.jobcmds import parse_ref, resolve
    from nanum.client import NanumError, resolve_settings

    inside = os.environ.get("NANUM_JOB_ID", "")
    if ref is None and not inside.isdigit():
        fail("NANUM_JOB_ID is not set: run `nanum checkpoint` inside a job, or give the job's ID", 2)
    ref = ref if ref is not None else inside
    parse_ref(ref)
    marked = _touch_mark() if ref == inside else None
    url, tok = resolve_settings(server, token)
    if url and tok:
        try:
            with connect(url, tok) as client:
                client.checkpoint(resolve(client, ref)[0])
        except NanumError as exc:
            if marked is None:
                raise
            note(f"nanum: the server was not told ({exc}); the agent reports {marked}")
    elif marked is None:
        fail("no nanum server configured to tell, and not inside the job: run it inside the job", 2)
    if not quiet:
        print(f"Checkpoint recorded for job {ref}")


def _touch_mark() -> Path | None:
    """Touch the checkpoint mark of the job this runs in; its path, or None when there is no checkpoint dir."""
    directory = os.environ.get("NANUM_CHECKPOINT_DIR")
    if not directory:
        return None
    mark = Path(directory) / CHECKPOINT_MARK
    try:
        mark.touch()
        os.utime(mark)
    except OSError as exc:
        fail(f"cannot mark the checkpoint in {directory}: {exc.strerror}")
    return mark
