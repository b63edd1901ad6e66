"""The researcher's commands: `nanum submit`, `ps`, `show`, `wait`, `logs`, `cancel` and `nodes`."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Annotated

import typer

from nanum.cli import jobcmds
from nanum.cli.app import app
from nanum.cli.common import (
    Command,
    JobIdArg,
    JsonOpt,
    ServerOpt,
    TokenOpt,
    clean_errors,
    connect,
    fail,
    note,
    print_json,
)
from nanum.client import TERMINAL_STATES
from nanum.jobref import job_ref

if TYPE_CHECKING:
    from nanum.client import Client, Job, LogChunk

_Opt = typer.Option


CommandArg = Annotated[list[str] | None, typer.Argument(
    metavar="[COMMAND [ARG...] | SCRIPT]", show_default=False,
    help="What to run (put `--` before it), or a script whose #NANUM lines set defaults.")]
GpusOpt = Annotated[int | None, _Opt("--gpus", "-g", metavar="N", help="GPUs per node (default: 1).")]
NodesOpt = Annotated[int | None, _Opt("--nodes", "-N", metavar="K",
                                      help="Nodes, started together (default: 1).")]
ModelOpt = Annotated[str | None, _Opt("--gpu-model", metavar="MODEL[,MODEL]",
                                      help="Only GPUs of this model, or of any of these: A100 or A100,H100.")]
GpuMemOpt = Annotated[str | None, _Opt("--gpu-mem", metavar="SIZE",
                                       help="Only GPUs with at least this much memory each: 40G, 80G.")]
ConstraintOpt = Annotated[list[str] | None, _Opt("--constraint", metavar="K=V", help=(
    "Only nodes with this label (`nanum nodes` shows them); repeat for several."))]
TorchrunOpt = Annotated[bool, _Opt("--torchrun", help=(
    "Run the script under torchrun on every node, rendezvous filled in: --nodes 2 --torchrun train.py ARGS."))]
CpusOpt = Annotated[int | None, _Opt("--cpus", "-c", metavar="C", help="CPU cores per node.")]
MemOpt = Annotated[str | None, _Opt("--mem", metavar="SIZE", help="Memory per node: 512M, 32G, 1T.")]
TimeOpt = Annotated[str | None, _Opt(
    "--time", "-t", metavar="DURATION",
    help="Time limit: 30m, 4h, 2d, 1:30:00, 2-00:00:00 (a bare number is minutes).")]
PriorityOpt = Annotated[int | None, _Opt("--priority", metavar="P",
                                         help="0..100, higher first (default: 0).")]
TierOpt = Annotated[int | None, _Opt("--tier", metavar="N", help=jobcmds.TIER_HELP)]
LabOpt = Annotated[str | None, _Opt("--lab", metavar="LAB",
                                    help="Lab to charge (default: your default lab).")]
NameOpt = Annotated[str | None, _Opt("--name", "-J", metavar="NAME",
                                     help="Job name (default: the program's).")]
WorkdirOpt = Annotated[str | None, _Opt("--workdir", "-D", metavar="DIR",
                                        help="Working directory (default: the current one).")]
EnvOpt = Annotated[list[str] | None, _Opt(
    "--env", "-e", metavar="K=V", help="Environment variable for the job (K alone copies yours); repeat.")]
NoPreemptOpt = Annotated[bool, _Opt("--no-preempt", help="Never preempt this job (it will not borrow GPUs).")]
HoldOpt = Annotated[bool, _Opt("--hold", "-H", help="Submit it held: it waits until `nanum release ID`.")]
RequeueOpt = Annotated[bool, _Opt("--requeue", help=(
    "If a node it runs on is lost, queue the job again to start anew: the default, given to say so (it overrides a "
    "script's #NANUM --no-requeue)."))]
NoRequeueOpt = Annotated[bool, _Opt("--no-requeue", help=(
    "If a node it runs on is lost, fail the job instead of queueing it again (for jobs that must not run twice)."))]
ArrayOpt = Annotated[str | None, _Opt("--array", metavar="SPEC", help=(
    "An array of tasks: 0-99%8 (at most 8 at once), 1,3,5-9, 0-20:2; each task gets $NANUM_ARRAY_TASK_ID."))]
AfterOpt = Annotated[list[str] | None, _Opt("--after", metavar="ID[,ID]", help="Start after these jobs started.")]
AfterOkOpt = Annotated[list[str] | None, _Opt("--after-ok", metavar="ID[,ID]",
                                              help="Start after these jobs (or arrays, or ID_TASK) completed.")]
AfterFailedOpt = Annotated[list[str] | None, _Opt("--after-failed", metavar="ID[,ID]",
                                                  help="Start after these jobs failed.")]
AfterAnyOpt = Annotated[list[str] | None, _Opt("--after-any", metavar="ID[,ID]",
                                               help="Start after these jobs ended, however.")]
KeepOpt = Annotated[bool, _Opt("--keep-if-unmet", help=(
    "Stay pending when a dependency can no longer be met (default: cancelled, with the reason)."))]
RetriesOpt = Annotated[int | None, _Opt("--retries", metavar="N", help="Run a failing job again, up to N times.")]
OutputOpt = Annotated[str | None, _Opt("--output", "-o", metavar="FILE", help=(
    "Write the job's output to FILE (errors too unless --error): %j job ID, %A array ID, %a task, %x name."))]
EnvironmentOpt = Annotated[str | None, _Opt("--environment", "-E", metavar="NAME", help=(
    "Run in this environment: a container image, Python environment or setup line (`nanum environment list`)."))]
DatasetOpt = Annotated[list[str] | None, _Opt("--dataset", metavar="NAME", help=(
    "Read this dataset (`nanum dataset list`): its path is in $NANUM_DATASET_<NAME>; repeat for several."))]
ErrorOpt = Annotated[str | None, _Opt("--error", metavar="FILE", help="Write the job's errors to FILE (patterns "
                                                                      "as --output).")]


@app.command(cls=Command, context_settings={"allow_interspersed_args": False})
@clean_errors
def submit(
    command: CommandArg = None,
    gpus: GpusOpt = None,
    nodes: NodesOpt = None,
    gpu_model: ModelOpt = None,
    gpu_mem: GpuMemOpt = None,
    constraint: ConstraintOpt = None,
    torchrun: TorchrunOpt = False,
    cpus: CpusOpt = None,
    mem: MemOpt = None,
    time: TimeOpt = None,
    priority: PriorityOpt = None,
    tier: TierOpt = None,
    lab: LabOpt = None,
    name: NameOpt = None,
    workdir: WorkdirOpt = None,
    env: EnvOpt = None,
    no_preempt: NoPreemptOpt = False,
    hold: HoldOpt = False,
    requeue: RequeueOpt = False,
    no_requeue: NoRequeueOpt = False,
    array: ArrayOpt = None,
    after: AfterOpt = None,
    after_ok: AfterOkOpt = None,
    after_failed: AfterFailedOpt = None,
    after_any: AfterAnyOpt = None,
    keep_if_unmet: KeepOpt = False,
    retries: RetriesOpt = None,
    output: OutputOpt = None,
    error: ErrorOpt = None,
    environment: EnvironmentOpt = None,
    dataset: DatasetOpt = None,
    json: JsonOpt = False,
    server: ServerOpt = None,
    token: TokenOpt = None,
) -> None:
    """Queue a job: `nanum submit --gpus 2 --time 4h -- python train.py`, or `nanum submit train.sh` (its
    #NANUM lines take these options; #SBATCH and #BSUB lines are read too)."""
    jobcmds.submit(**locals())


@app.command(cls=Command)
@clean_errors
def ps(
    all: Annotated[bool, _Opt("--all", "-a", help="Include finished jobs.")] = False,
    user: Annotated[str | None, _Opt("--user", "-u", help="Only this user's jobs.")] = None,
    lab: Annotated[str | None, _Opt("--lab", help="Only this lab's jobs.")] = None,
    state: Annotated[list[str] | None, _Opt("--state", "-s", help="Only jobs in this state; repeat.")] = None,
    expand: Annotated[bool, _Opt("--expand", help="One line per array task (default: one line per array).")]
    = False,
    format: Annotated[str | None, _Opt("--format", "-o", metavar="FORMAT", help=(
        'Fields as squeue codes: "%i %u %T %r" (%i id, %F array, %K task, %j name, %u user, %P lab, %T state, '
        "%t short state, %b gpus, %D nodes, %N node, %M time, %l limit, %Q priority, %q tier, %r reason)."))] = None,
    fields: Annotated[str | None, _Opt("--fields", metavar="LIST", help=(
        "Fields by name: id,array,task,name,user,lab,state,st,gpus,nodes,node,time,limit,priority,tier,reason."))]
    = None,
    noheader: Annotated[bool, _Opt("--noheader", "-h", help="No header line.")] = False,
    limit: Annotated[int | None, _Opt("--limit", metavar="N", min=1, max=100_000, help=(
        "With --all or a finished --state: the latest N finished jobs (default: 1,000; at most 100,000)."))] = None,
    json: JsonOpt = False,
    server: ServerOpt = None,
    token: TokenOpt = None,
) -> None:
    """The queue: running and waiting jobs of everyone (why they wait, when they should start)."""
    jobcmds.ps(**locals())


@app.command(cls=Command)
@clean_errors
def show(job_id: Annotated[str, typer.Argument(show_default=False, help="Job ID, or ID_TASK.")],
         json: JsonOpt = False, server: ServerOpt = None, token: TokenOpt = None) -> None:
    """Everything about one job."""
    jobcmds.show(**locals())


@app.command(cls=Command)
@clean_errors
def wait(
    ref: JobIdArg,
    timeout: Annotated[float | None, _Opt("--timeout", metavar="S", min=0,
                                          help="Give up after S seconds (exit 124).")] = None,
    server: ServerOpt = None,
    token: TokenOpt = None,
) -> None:
    """Wait for a job to end and exit with its exit code (124 when --timeout passes first). An array's ID waits
    for all its tasks and exits with the highest of their codes."""
    from nanum.client import WaitTimeout

    with connect(server, token) as client:
        found, task = jobcmds.resolve(client, ref)
        try:
            if not task and client.job(found).get("array_id") == found:
                tasks = client.wait_array(found, timeout=timeout)
                raise typer.Exit(_array_exit_code(found, tasks))
            job = client.wait(found, timeout=timeout)
        except WaitTimeout as exc:
            fail(str(exc), 124)
    raise typer.Exit(wait_exit_code(job["state"], job.get("exit_code"), job_ref(job)))


def wait_exit_code(state: str, exit_code: int | None, named: object, *, say: bool = True) -> int:
    """A finished job's own exit code (128+N when killed by signal N); 1 with a line on stderr (unless not `say`)
    when it was cancelled, reached its time limit or was lost, or failed without a code. `named`: the job as the
    line names it."""
    if state == "completed":
        return 0 if not exit_code else _shell_code(exit_code)
    if state == "failed":
        return _shell_code(exit_code) if exit_code else 1
    what = {"cancelled": "was cancelled", "timeout": "reached its time limit and was stopped", "lost": "was lost"}
    if say:
        note(f"nanum: job {named} {what.get(state, 'ended ' + state)}")
    return 1


def _array_exit_code(array_id: int, tasks: list[Job]) -> int:
    """The highest of the tasks' `wait_exit_code`s; unless all completed, one line on stderr counting them by
    state, naming the first few that did not."""
    from collections import Counter

    codes = {job_ref(t): wait_exit_code(t["state"], t.get("exit_code"), job_ref(t), say=False) for t in tasks}
    if any(codes.values()):
        counts = Counter(t["state"] for t in tasks)
        failed = [ref for ref, code in codes.items() if code]
        named = ", ".join(failed[:5]) + (f" and {len(failed) - 5} more" if len(failed) > 5 else "")
        note(f"nanum: array {array_id}: " + ", ".join(f"{n} {state}" for state, n in counts.items())
             + f"; not completed: {named}")
    return max(codes.values(), default=0)


def _shell_code(code: int) -> int:
    if code < 0:  # killed by a signal, as Python reports it
        return min(128 - code, 255)
    return code if code <= 255 else 1


@app.command(cls=Command)
@clean_errors
def logs(
    ref: JobIdArg,
    follow: Annotated[bool, _Opt("--follow", "-f", help="Print new output until the job ends.")] = False,
    node: Annotated[str | None, _Opt("--node", metavar="NODE", help=(
        "One node's output of a multi-node job: its name or rank (default: every node's, lines led by [node])."))]
    = None,
    server: ServerOpt = None,
    token: TokenOpt = None,
) -> None:
    """A job's output (stdout and stderr together). Of a job that has just ended, the output its node has not
    sent yet is waited for. An array's ID gives its first task's output (ID_TASK another's)."""
    out = sys.stdout
    with connect(server, token) as client:
        job_id = jobcmds.resolve(client, ref)[0]
        first = client.logs(job_id, 0, node)
        if "_" not in ref and first.ref.partition("_")[0] == str(job_id) != first.ref:  # an array's id: its first task
            note(f"nanum: {ref} is an array: this is its task {first.ref}'s output; `nanum logs {ref}_N` shows "
                 "task N's")
        if follow:
            if first.state in ("pending", "held"):
                _say_what_it_waits_for(client, job_id)
            out.write(first.text)
            out.flush()
            last = _follow(client, job_id, first.offset, node)
        else:
            last, offset = first, 0
            out.write(last.text)
            while last.text and last.offset > offset:
                offset = last.offset
                last = client.logs(job_id, offset, node)
                out.write(last.text)
            if last.missing and last.state in TERMINAL_STATES:  # it has just ended: the rest is on its way
                last = _follow(client, job_id, offset, node)
        if last.missing and last.state in TERMINAL_STATES:
            note(f"the last {last.missing} bytes of job {ref}'s output are still on its node, which has stopped "
                 f"sending them; `nanum logs {ref}` shows them once it sends them")


def _follow(client: Client, job_id: int, offset: int, node: str | None) -> LogChunk:
    """Print the job's output from `offset` as it arrives, until the job has ended and the server holds all of it
    (or its node stopped sending it); the last read."""
    for chunk in client.follow_log_chunks(job_id, offset, node=node):
        sys.stdout.write(chunk.text)
        sys.stdout.flush()
    return chunk


def _say_what_it_waits_for(client: Client, job_id: int) -> None:
    """`logs -f` on a job that has not started: say so, and why, instead of sitting silent."""
    job = client.job(job_id)
    why = f": {job['reason']}" if job.get("reason") else ""
    note(f"job {job_ref(job)} is {job['state']}{why}; its output will follow once it starts (Ctrl-C stops watching; "
         "the job stays queued)")


@app.command(cls=Command)
@clean_errors
def cancel(
    job_ids: Annotated[list[str], typer.Argument(
        metavar="ID...", show_default=False, help="Job IDs; an array's ID means all its tasks, ID_TASK one task.")],
    server: ServerOpt = None,
    token: TokenOpt = None,
) -> None:
    """Cancel jobs (yours, or anyone's as an admin); running ones are stopped."""
    jobcmds.cancel(job_ids, server, token)


@app.command(cls=Command)
@clean_errors
def nodes(json: JsonOpt = False, server: ServerOpt = None, token: TokenOpt = None) -> None:
    """The nodes and their GPUs: who uses which."""
    with connect(server, token) as client:
        found = client.nodes()
    if json:
        print_json(found)
        return
    if not found:
        note("No nodes yet: start `nanum up`, or `nanum agent` on a GPU server.")
        return
    from nanum.cli.views import (
        NODE_COLUMNS,
        fleet_caption,
        inventory_caption,
        limits_caption,
        node_rows,
        print_table,
    )

    captions = (fleet_caption(found), limits_caption(found), inventory_caption(found))  # type: ignore[arg-type]
    caption = "\n".join(c for c in captions if c) or None
    print_table(NODE_COLUMNS, node_rows(found), caption, wide="USER")  # type: ignore[arg-type]
