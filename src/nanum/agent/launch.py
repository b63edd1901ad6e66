"""Starting one job process: its directory, environment, account and the wrapper that records its exit status.

Every job runs as `/bin/sh -c WRAPPER nanum-job-ID COMMAND...` (WRAPPER: `wrapper()`) in a session of its own,
with its standard input open for writing on the job's `exit` file. The wrapper moves that descriptor to 3, gives
the command /dev/null as input and no fd 3, and sets a trap *handler* (not `trap ''`, whose ignored signals the
command would inherit), so that a SIGTERM sent to the process group stops the command but not the shell, which
then writes the command's status to the exit file. That file is how a restarted agent learns the exit status of a
job that ended while it was down; being an inherited descriptor, it works even where the job's user cannot
reach the state directory.

Where the node enforces limits (`nanum.agent.cgroups`), the wrapper is started by `ENTER`, a shell (root, with the
agent's `PATH` alone) that writes its own pid into the job's cgroup.procs files and then execs the rest, so the job
is in its cgroup before it runs anything: a pid moved in from outside after the spawn could already have forked.

A job stopped the moment it starts must still get SIGTERM: a signal that reaches the group after the trap is set
but before the shell has started the command would be swallowed, and the command would run on until SIGKILL. So
the wrapper starts the command in the background first and only then sets the trap (a signal before that ends
both, as it should), then waits for the command. `env --default-signal` undoes the ignored SIGINT and SIGQUIT a
shell gives background commands, so jobs can still be interrupted (a first word NAME=VALUE sets that variable, as
`env` does). Where `env` lacks that option (coreutils before 8.31) the command runs in the foreground as before,
with that narrow race.
"""

from __future__ import annotations

import functools
import os
import shutil
import signal
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

from nanum.agent.accounts import Account, Refused
from nanum.agent.jobrecord import JobRecord
from nanum.protocol import JobLaunch

__all__ = ["find_setpriv", "job_env", "prepare", "spawn", "wrapper"]

ENV_COMMAND = ("/usr/bin/env", "--default-signal=INT,QUIT", "--")
FOREGROUND = 'exec 3>&0 </dev/null; trap : TERM INT HUP; "$@" 3>&-; echo $? >&3'
BACKGROUND = (
    f'exec 3>&0 </dev/null; {" ".join(ENV_COMMAND)} "$@" 3>&- & nanum_job=$!; '
    'trap : TERM INT HUP; wait "$nanum_job"; nanum_rc=$?; '
    # A trapped signal interrupts `wait` (status > 128): wait again while the command lives. Once it is gone,
    # `wait` once more: the interrupted wait may already have reaped it, and the shell keeps its real status.
    'while [ "$nanum_rc" -gt 128 ]; do kill -0 "$nanum_job" 2>/dev/null || { wait "$nanum_job"; nanum_rc=$?; break; }; '
    'wait "$nanum_job"; nanum_rc=$?; done; '
    'echo $nanum_rc >&3'
)
ENTER = 'while [ "$1" != -- ]; do echo $$ > "$1" || exit 125; shift; done; shift; exec "$@"'
SAFE_PATH = "/usr/local/bin:/usr/bin:/bin"
SECRET_VARS = ("NANUM_TOKEN", "NANUM_NODE_TOKEN")
PASSED_VARS = ("LANG", "LC_ALL", "LC_CTYPE", "TZ", "TERM")


def job_env(
    launch: JobLaunch,
    record: JobRecord,
    account: Account,
    *,
    switch_user: bool,
    base: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """The job's environment: a base, then the job's own variables, then nanum's (which always win).

    A job run as the agent's own account starts from the agent's environment (less nanum's secrets); a job run
    as another account starts from a clean login-like environment for that account.
    """
    base = os.environ if base is None else base
    if switch_user:
        env = {k: base[k] for k in PASSED_VARS if k in base}
        env["PATH"] = SAFE_PATH
    else:
        env = {k: v for k, v in base.items() if k not in SECRET_VARS}
        env.setdefault("PATH", SAFE_PATH)
    env.update(HOME=account.home, USER=account.name, LOGNAME=account.name, SHELL=account.shell)
    env.update(launch.env)
    env.update(_nanum_vars(launch, record))
    return env


def _nanum_vars(launch: JobLaunch, record: JobRecord) -> dict[str, str]:
    env = {
        "CUDA_VISIBLE_DEVICES": ",".join(str(g) for g in launch.gpus),
        "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
        "NANUM_JOB_ID": str(launch.job_id),
        "NANUM_JOB_NAME": launch.name,
        "NANUM_PREEMPT_FILE": str(record.preempt_path),
        "NANUM_ACTIVITY_FILE": str(record.activity_path),
    }
    if launch.checkpoint_dir:
        env["NANUM_CHECKPOINT_DIR"] = launch.checkpoint_dir
    if launch.master_addr is not None or launch.nnodes > 1:
        env.update(
            MASTER_ADDR=launch.master_addr or "127.0.0.1",
            MASTER_PORT=str(launch.master_port or 29500),
            NNODES=str(launch.nnodes),
            NODE_RANK=str(launch.node_rank),
            NPROC_PER_NODE=str(launch.nproc_per_node),
            WORLD_SIZE=str(launch.nnodes * launch.nproc_per_node),
        )
    return env


def prepare(record: JobRecord, account: Account, *, node: str, switch_user: bool) -> None:
    """Check the working directory and create the job's files and checkpoint directory, or raise `Refused`."""
    launch = record.launch
    if not launch.command:
        raise Refused("the job has no command to run")
    if launch.workdir == "~" or launch.workdir.startswith("~/"):  # the owner's home, not the agent's
        launch.workdir = account.home + launch.workdir[1:]
    if not os.path.isdir(launch.workdir):
        raise Refused(f"working directory {launch.workdir} does not exist on node {node}")
    for path in (record.log_path, record.exit_path):
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600))
    _make_activity_file(record.activity_path, account, switch_user)
    if switch_user:  # the job's own output belongs to its owner
        os.chown(record.log_path, account.uid, account.gid)
    if launch.checkpoint_dir:
        _make_owned_dirs(Path(launch.checkpoint_dir), account, switch_user)


def _make_activity_file(path: Path, account: Account, switch_user: bool) -> None:
    """The job's activity file, owned by its user so it can touch it; dated 1970 until it does."""
    os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644))
    if switch_user:
        os.chown(path, account.uid, account.gid)
    os.utime(path, (0, 0))


def _make_owned_dirs(path: Path, account: Account, switch_user: bool) -> None:
    """Create `path` and missing parents; the job's own directory (not shared parents) belongs to its user."""
    try:
        path.parent.mkdir(mode=0o755, parents=True, exist_ok=True)
        path.mkdir(mode=0o755, exist_ok=True)
        if switch_user and path.stat().st_uid != account.uid:
            os.lchown(path, account.uid, account.gid)
    except OSError as exc:
        raise Refused(f"cannot create checkpoint directory {path}: {exc.strerror}") from None


def find_setpriv() -> str | None:
    """util-linux's `setpriv`, with which a job switches to its user after a cheap vfork-style spawn."""
    return shutil.which("setpriv", path="/usr/bin:/bin:/usr/sbin:/sbin")


@functools.cache
def wrapper() -> str:
    """The job wrapper this machine supports (see the module docstring)."""
    try:
        probe = subprocess.run([*ENV_COMMAND, "true"], capture_output=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return FOREGROUND
    return BACKGROUND if probe.returncode == 0 else FOREGROUND


def spawn(
    record: JobRecord,
    account: Account,
    env: dict[str, str],
    *,
    switch_user: bool,
    setpriv: str | None = None,
    cgroup_procs: Sequence[str] = (),
) -> subprocess.Popen[bytes]:
    """Start the wrapper in a new session with output to the job's log; raise `Refused` if exec fails.
    `cgroup_procs`: the cgroup.procs files of the job's cgroup, which it enters before anything else runs.

    To run as another account the wrapper is exec'd through `setpriv` when there is one: Python then spawns
    with vfork, about 0.2 ms, where switching ids in the child needs a full fork of the agent (several ms).
    """
    launch = record.launch
    argv = ["/bin/sh", "-c", wrapper(), f"nanum-job-{launch.job_id}", *launch.command]
    fork_switch = switch_user and not setpriv
    if switch_user and setpriv:
        groups = ",".join(str(g) for g in account.groups)
        drop = [f"--reuid={account.uid}", f"--regid={account.gid}"]
        drop.append(f"--groups={groups}" if groups else "--clear-groups")
        argv = [setpriv, *drop, "--", *argv]
    if cgroup_procs and not fork_switch:
        argv = ["/bin/sh", "-c", ENTER, f"nanum-cgroup-{launch.job_id}", *cgroup_procs, "--", *argv]
    log_fd = os.open(record.log_path, os.O_WRONLY | os.O_APPEND)
    exit_fd = os.open(record.exit_path, os.O_WRONLY | os.O_TRUNC)
    try:
        proc = subprocess.Popen(
            argv,
            cwd=launch.workdir,
            env=env,
            stdin=exit_fd,
            stdout=log_fd,
            stderr=log_fd,
            start_new_session=True,
            close_fds=True,
            user=account.uid if fork_switch else None,
            group=account.gid if fork_switch else None,
            extra_groups=list(account.groups) if fork_switch else None,
        )
    except OSError as exc:
        where = f": {exc.filename}" if exc.filename else ""
        raise Refused(f"could not start the job as {account.name!r}: {exc.strerror}{where}") from None
    finally:
        os.close(log_fd)
        os.close(exit_fd)
    if cgroup_procs and fork_switch:  # ENTER would already run as the job's user: move it in from here
        _enter_cgroup(proc, cgroup_procs)
    return proc


def _enter_cgroup(proc: subprocess.Popen[bytes], cgroup_procs: Sequence[str]) -> None:
    try:
        for path in cgroup_procs:
            Path(path).write_text(str(proc.pid))
    except OSError as exc:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        raise Refused(f"could not put the job into its cgroup: {exc.strerror}: {exc.filename}") from None
