"""Interactive work: `nanum notebook` (JupyterLab in the browser, through the server), `nanum shell` (a
terminal on a node, like `salloc`) and `nanum run` (run a command and stream its output, like `srun`)."""

from __future__ import annotations

import os
import sys
import time
from typing import TYPE_CHECKING, Annotated, Any

import typer

from nanum.cli.app import app
from nanum.cli.common import Command, Group, ServerOpt, TokenOpt, UsageProblem, clean_errors, connect, fail, note
from nanum.cli.jobs import (
    ConstraintOpt,
    CpusOpt,
    DatasetOpt,
    EnvironmentOpt,
    EnvOpt,
    GpuMemOpt,
    GpusOpt,
    LabOpt,
    MemOpt,
    ModelOpt,
    NameOpt,
    NodesOpt,
    NoPreemptOpt,
    PriorityOpt,
    TimeOpt,
    TorchrunOpt,
    WorkdirOpt,
)

if TYPE_CHECKING:
    from nanum.client import Client, Job

_Opt = typer.Option
PreemptibleOpt = Annotated[bool, _Opt("--preemptible", help=(
    "Allow preempting it, so it may also borrow idle GPUs beyond your lab's share (default: never preempted)."))]
#: How long `nanum notebook` waits for JupyterLab to answer once the job runs.
NOTEBOOK_START_S = 180.0

notebook_app = typer.Typer(cls=Group, help="JupyterLab on the cluster's GPUs, in your browser through the server: "
                           "`nanum notebook --gpus 1 --time 8h`; `nanum notebook list`, `nanum notebook stop ID`.")
app.add_typer(notebook_app, name="notebook")


def _session_request(kind: str, command: list[str], preemptible: bool | None = None, **given: Any
                     ) -> dict[str, Any]:
    """The `POST /jobs` body of a notebook, shell or `nanum run` job: `given` are the options it took, each read
    as `nanum submit` reads it (`nanum.cli.jobcmds.submit_options`); a notebook's or shell's command is never a
    script."""
    from nanum.cli.jobcmds import submit_options
    from nanum.cli.jobspec import build_request

    body = build_request(command, submit_options(**given), os.getcwd(), script=kind == "batch")
    body["kind"] = kind
    if preemptible is not None:
        body["preemptible"] = preemptible
    return body


@notebook_app.callback(invoke_without_command=True)
@clean_errors
def notebook(
    ctx: typer.Context,
    gpus: GpusOpt = None,
    gpu_model: ModelOpt = None,
    gpu_mem: GpuMemOpt = None,
    constraint: ConstraintOpt = None,
    cpus: CpusOpt = None,
    mem: MemOpt = None,
    time: TimeOpt = None,
    lab: LabOpt = None,
    workdir: WorkdirOpt = None,
    env: EnvOpt = None,
    environment: EnvironmentOpt = None,
    dataset: DatasetOpt = None,
    preemptible: PreemptibleOpt = False,
    server: ServerOpt = None,
    token: TokenOpt = None,
) -> None:
    """Start JupyterLab as a job in the current directory (or --workdir) and print its address: open it in a
    browser where you are logged in to the dashboard (only you can). Idle notebooks are released by the idle
    rules."""
    if ctx.invoked_subcommand is not None:
        return
    body = _session_request(
        "notebook", ["jupyter", "lab"], preemptible, name="notebook", gpus=gpus, gpu_model=gpu_model,
        gpu_mem=gpu_mem, constraint=constraint, cpus=cpus, mem=mem, time=time, lab=lab, workdir=workdir, env=env,
        environment=environment, dataset=dataset)
    with connect(server, token) as client:
        job = client.submit(body.pop("command"), **body)
        note(f"Submitted notebook {job['id']}")
        job = _wait_until_running(client, job["id"], "notebook")
        url = f"{client.server}/notebooks/{job['id']}/"
        try:
            _wait_for_jupyter(client, job["id"], url, token)
        except KeyboardInterrupt:
            client.cancel(job["id"])
            note(f"cancelled notebook {job['id']}")
            raise SystemExit(130) from None
    print(f"{url}lab")
    note(f"Notebook {job['id']} runs on {_where(job)}; open the address above in a browser logged in to "
         f"{client.server} (only you can). Stop it with `nanum notebook stop {job['id']}`.")


@notebook_app.command("list", cls=Command)
@clean_errors
def notebook_list(server: ServerOpt = None, token: TokenOpt = None) -> None:
    """Your notebooks that wait or run, with their addresses."""
    with connect(server, token) as client:
        me = client.me()["name"]
        found = [j for j in client.jobs(user=me) if j["kind"] == "notebook"]
    if not found:
        note("No notebooks (start one with `nanum notebook --gpus 1`).")
        return
    from nanum.cli.views import print_table

    rows = [(str(j["id"]), j["state"], str(j["gpus"]), _where(j),
             f"{client.server}/notebooks/{j['id']}/lab" if j["state"] == "running" else (j.get("reason") or ""))
            for j in found]
    print_table(["ID", "STATE", "GPUS", "NODE", "ADDRESS"], rows, wide="ADDRESS")


@notebook_app.command("stop", cls=Command)
@clean_errors
def notebook_stop(
    ref: Annotated[str, typer.Argument(metavar="ID", help="Notebook ID (see `nanum notebook list`).",
                                       show_default=False)],
    server: ServerOpt = None,
    token: TokenOpt = None,
) -> None:
    """Stop a notebook of yours and free its GPUs."""
    from nanum.cli.jobcmds import resolve

    with connect(server, token) as client:
        job_id = resolve(client, ref)[0]
        if client.job(job_id)["kind"] != "notebook":
            fail(f"job {ref} is not a notebook; stop other jobs with `nanum cancel {ref}`", 2)
        client.cancel(job_id)
    print(f"Stopped notebook {ref}")


@app.command(cls=Command)
@clean_errors
def shell(
    gpus: GpusOpt = None,
    gpu_model: ModelOpt = None,
    gpu_mem: GpuMemOpt = None,
    constraint: ConstraintOpt = None,
    cpus: CpusOpt = None,
    mem: MemOpt = None,
    time: TimeOpt = None,
    lab: LabOpt = None,
    workdir: WorkdirOpt = None,
    env: EnvOpt = None,
    environment: EnvironmentOpt = None,
    dataset: DatasetOpt = None,
    preemptible: PreemptibleOpt = False,
    server: ServerOpt = None,
    token: TokenOpt = None,
) -> None:
    """Wait for GPUs, then open your login shell on their node in this terminal ($CUDA_VISIBLE_DEVICES set).
    Leaving the shell frees them; `nanum shell` exits with the shell's exit code."""
    from nanum.cli.terminal import attach
    from nanum.client import resolve_settings

    body = _session_request(
        "shell", ["shell"], preemptible, name="shell", gpus=gpus, gpu_model=gpu_model, gpu_mem=gpu_mem,
        constraint=constraint, cpus=cpus, mem=mem, time=time, lab=lab, workdir=workdir, env=env,
        environment=environment, dataset=dataset)
    if os.environ.get("TERM"):  # the remote terminal is this one: full-screen programs need its type
        body["env"] = {"TERM": os.environ["TERM"], **body["env"]}
    with connect(server, token) as client:
        job = client.submit(body.pop("command"), **body)
        note(f"Submitted shell {job['id']}")
        job = _wait_until_running(client, job["id"], "shell", ended=True)
        if job["state"] == "running":
            note(f"Shell {job['id']} on {_where(job)}")
        try:
            code = None if job["state"] != "running" else attach(
                client.server, resolve_settings(server, token)[1], job["id"],
                lambda: client.job(job["id"])["state"] == "running")
        except KeyboardInterrupt:  # before the shell answered (afterwards Ctrl-C goes to the remote shell)
            client.cancel(job["id"])
            note(f"cancelled shell {job['id']}")
            raise SystemExit(130) from None
        if code is None:  # the connection ended without the shell's exit code: ask the server for the job's
            from nanum.cli.jobs import wait_exit_code
            from nanum.client import WaitTimeout

            try:
                ended = client.wait(job["id"], timeout=30)
            except WaitTimeout:  # it runs, but its terminal could not be reached
                client.cancel(job["id"])
                fail(f"could not open the terminal of shell {job['id']} through {client.server}; cancelled it")
            note(f"shell {job['id']} ended: {ended.get('reason') or ended['state']}{_last_output(client, job['id'])}")
            code = wait_exit_code(ended["state"], ended.get("exit_code"), job["id"])
    raise SystemExit(code)


def _wait_until_running(client: Client, job_id: int, what: str, *, ended: bool = False) -> Job:
    """The job once it runs (or, with `ended`, once it ran); Ctrl-C meanwhile cancels it. Says once why it
    waits."""
    said = None
    try:
        while True:
            job = client.job(job_id)
            if job["state"] == "running" or (ended and job["state"] not in ("pending", "held")):
                return job
            if job["state"] not in ("pending", "held"):
                fail(f"{what} {job_id} {job['state']}: {job.get('reason') or f'see `nanum show {job_id}`'}")
            if job.get("reason") != said:
                said = job.get("reason")
                note(f"waiting for an allocation: {said or job['state']}")
            time.sleep(0.2)
    except KeyboardInterrupt:
        client.cancel(job_id)
        note(f"cancelled {what} {job_id}")
        raise SystemExit(130) from None


def _wait_for_jupyter(client: Client, job_id: int, url: str, token: str | None) -> None:
    """Until JupyterLab answers through the server (or the job ended: then say why, with its last output)."""
    import httpx

    from nanum.client import resolve_settings

    headers = {"Authorization": f"Bearer {resolve_settings(None, token)[1]}"}
    deadline = time.monotonic() + NOTEBOOK_START_S
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{url}api/status", headers=headers, timeout=5, trust_env=False).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        job = client.job(job_id)
        if job["state"] != "running":
            fail(f"notebook {job_id} is {job['state']}: {job.get('reason') or 'it ended'}"
                 f"{_last_output(client, job_id)}")
        time.sleep(0.5)
    fail(f"notebook {job_id} runs but JupyterLab did not answer within {NOTEBOOK_START_S:.0f} s; "
         f"see `nanum logs {job_id}`")


def _last_output(client: Client, job_id: int) -> str:
    """`; its last output:` and the job's last five lines of output, where it has any (why a session ended)."""
    tail = client.logs(job_id).text.strip().splitlines()[-5:]
    return "; its last output:\n" + "\n".join(tail) if tail else ""


def _where(job: Job) -> str:
    parts = [f"{a['node']} (GPU {','.join(map(str, a['gpus'])) or 'none'})" for a in job.get("allocation") or ()]
    return ", ".join(parts) or "-"


@app.command(cls=Command, context_settings={"allow_interspersed_args": False})
@clean_errors
def run(
    command: Annotated[list[str], typer.Argument(metavar="COMMAND [ARG...]", show_default=False,
                                                 help="What to run (put `--` before it).")],
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
    lab: LabOpt = None,
    name: NameOpt = None,
    workdir: WorkdirOpt = None,
    env: EnvOpt = None,
    environment: EnvironmentOpt = None,
    dataset: DatasetOpt = None,
    no_preempt: NoPreemptOpt = False,
    server: ServerOpt = None,
    token: TokenOpt = None,
) -> None:
    """Run a command as a job and stay with it: wait for it to start, print its output as it comes, and exit
    with its exit code (like `srun`). Ctrl-C cancels the job."""
    from nanum.cli.jobs import wait_exit_code

    body = _session_request(
        "batch", command, gpus=gpus, nodes=nodes, gpu_model=gpu_model, gpu_mem=gpu_mem, constraint=constraint,
        torchrun=torchrun, cpus=cpus, mem=mem, time=time, priority=priority, lab=lab, name=name, workdir=workdir,
        env=env, environment=environment, dataset=dataset, no_preempt=no_preempt)
    if body.get("array"):  # from the script's #NANUM or #SBATCH lines
        raise UsageProblem(f"nanum run follows one job, and {command[0]} asks for an array ({body['array']}); "
                           "submit it with `nanum submit`")
    with connect(server, token) as client:
        job = client.submit(body.pop("command"), **body)
        note(f"Submitted job {job['id']}")
        _wait_until_running(client, job["id"], "job", ended=True)
        try:
            for text in client.follow_logs(job["id"]):
                sys.stdout.write(text)
                sys.stdout.flush()
            ended = client.wait(job["id"])
        except KeyboardInterrupt:
            client.cancel(job["id"])
            note(f"cancelled job {job['id']}")
            raise SystemExit(130) from None
    raise SystemExit(wait_exit_code(ended["state"], ended.get("exit_code"), job["id"]))
