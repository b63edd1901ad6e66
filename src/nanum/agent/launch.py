"""Starting one job process: its directory, environment, account and the wrapper that records its exit status.

Every job runs as `/bin/sh -c WRAPPER nanum-job-ID SETUP COMMAND...` (WRAPPER: `wrapper()`) in a session of its
own, with its standard output open for writing on the job's `exit` file and its standard error on its log. The
wrapper moves the exit file to descriptor 3 and the log to 1, reads SETUP from its standard input (below), gives
the command /dev/null as input and no fd 3, and sets a trap *handler* (not `trap ''`, whose ignored signals the
command would inherit), so that a SIGTERM sent to the process group stops the command but not the shell, which
then writes the command's status to the exit file. That file is how a restarted agent learns the exit status of
a job that ended while it was down; being an inherited descriptor, it works even where the job's user cannot
reach the state directory.

Nothing the job's owner controls reaches a process that still runs as root. An agent running as root starts
the wrapper as the job's user through `setpriv` with an environment it builds itself (`PATH` alone): the job's
environment would otherwise be read by `setpriv` and its dynamic loader as root (`LD_PRELOAD` runs the user's
code as uid 0). The job's own environment and working directory come in a small shell script on the wrapper's
standard input (a memfd owned by the user, 0600; SETUP is `stdin`), which the wrapper sources as the user
before anything else: it enters the working directory (so a directory the user may not enter, such as another
user's 0700 home, is refused as the kernel refuses it to that user) and exports the variables, each value in
single quotes. The variables never appear on a command line, where any user could read them in /proc. If the
directory cannot be entered the script writes `workdir: ` and the reason to the exit file instead of a status,
and the executor reports the job as failed to start with that reason. Where there is no `setpriv`, or a
variable's name is not one a shell can export, the agent forks a child that switches ids and then execs the
wrapper with the job's environment (no cwd: the kernel would enter it as root); the script then only enters the
directory. A job run as the agent's own account needs no switch: it starts with its environment and working
directory directly, and SETUP is `-`. The umask is the agent's, as before.

Where the node enforces limits (`nanum.agent.cgroups`), the wrapper is started by `ENTER`, a shell (root, with the
agent's `PATH` alone) that enters the job's cgroup by writing `0` (itself) into the files the cgroups give and then
execs the rest, so the job is in its cgroup before it runs anything: a pid moved in from outside after the spawn
could already have forked.

A job stopped the moment it starts must still get SIGTERM: a signal that reaches the group after the trap is set
but before the shell has started the command would be swallowed, and the command would run on until SIGKILL. So
the wrapper starts the command in the background first and only then sets the trap (a signal before that ends
both, as it should), then waits for the command. `env --default-signal` undoes the ignored SIGINT and SIGQUIT a
shell gives background commands, so jobs can still be interrupted (a first word NAME=VALUE sets that variable, as
`env` does). Where `env` lacks that option (coreutils before 8.31) the command runs in the foreground as before,
with that narrow race.
"""

from __future__ import annotations

import errno
import functools
import os
import re
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path

from nanum.agent.accounts import Account, Refused
from nanum.agent.jobrecord import JobRecord
from nanum.protocol import JobLaunch

__all__ = ["check_fields", "find_setpriv", "job_env", "prepare", "spawn", "wrapper"]

ENV_COMMAND = ("/usr/bin/env", "--default-signal=INT,QUIT", "--")
# $1 is SETUP: `-`, or `stdin` for a script there that enters the working directory and sets the environment.
SETUP = 'exec 3>&1 1>&2; [ "$1" = - ] || . /dev/stdin; exec </dev/null; shift; '
FOREGROUND = SETUP + 'trap : TERM INT HUP; "$@" 3>&-; echo "$?" >&3'
BACKGROUND = SETUP + (
    f'{" ".join(ENV_COMMAND)} "$@" 3>&- & nanum_job=$!; '
    'trap : TERM INT HUP; wait "$nanum_job"; nanum_rc=$?; '
    # A trapped signal interrupts `wait` (status > 128): wait again while the command lives. Once it is gone,
    # `wait` once more: the interrupted wait may already have reaped it, and the shell keeps its real status.
    'while [ "$nanum_rc" -gt 128 ]; do kill -0 "$nanum_job" 2>/dev/null || { wait "$nanum_job"; nanum_rc=$?; break; }; '
    'wait "$nanum_job"; nanum_rc=$?; done; '
    'echo "$nanum_rc" >&3'
)
ENTER = 'while [ "$1" != -- ]; do echo 0 > "$1" || exit 125; shift; done; shift; exec "$@"'
SAFE_PATH = "/usr/local/bin:/usr/bin:/bin"
SECRET_VARS = ("NANUM_TOKEN", "NANUM_NODE_TOKEN")
PASSED_VARS = ("LANG", "LC_ALL", "LC_CTYPE", "TZ", "TERM")
SHELL_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def check_fields(launch: JobLaunch) -> None:
    """Refuse a launch with a field no system call can take (a null byte), before any of it reaches one."""
    fields = {
        "command": launch.command,
        "name": [launch.name],
        "Unix user": [launch.unix_user],
        "working directory": [launch.workdir],
        "checkpoint directory": [launch.checkpoint_dir],
        "rendezvous address": [launch.master_addr or ""],
        "environment": [*launch.env, *launch.env.values()],
    }
    for what, texts in fields.items():
        if any("\0" in text for text in texts):
            raise Refused(f"the job's {what} contains a null byte, which cannot be passed to a program; remove it")
    if any(not name or "=" in name for name in launch.env):
        raise Refused("the job's environment has a variable whose name is empty or contains '='; rename it")


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
    """Resolve the working directory and create the job's files and checkpoint directory, or raise `Refused`.

    The working directory of a job run as another account is not looked at here, as root: the wrapper enters
    it as the job's user (see the module docstring).
    """
    launch = record.launch
    if not launch.command:
        raise Refused("the job has no command to run")
    if launch.workdir == "~" or launch.workdir.startswith("~/"):  # the owner's home, not the agent's
        launch.workdir = account.home + launch.workdir[1:]
    elif not os.path.isabs(launch.workdir):  # relative to the owner's home, as in a login shell
        launch.workdir = os.path.join(account.home, launch.workdir)
    if not switch_user and not os.path.isdir(launch.workdir):
        raise Refused(f"working directory {launch.workdir} does not exist on node {node}")
    for path in (record.log_path, record.exit_path):
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600))
    _make_activity_file(record.activity_path, account, switch_user)
    if switch_user:  # the job's own output belongs to its owner
        os.chown(record.log_path, account.uid, account.gid, follow_symlinks=False)
    if launch.checkpoint_dir:
        make_checkpoint_dir(Path(launch.checkpoint_dir), account, switch_user=switch_user)


def _make_activity_file(path: Path, account: Account, switch_user: bool) -> None:
    """The job's activity file, owned by its user so it can touch it; dated 1970 until it does."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o644)
    try:
        if switch_user:
            os.fchown(fd, account.uid, account.gid)
        os.utime(fd, (0, 0))
    finally:
        os.close(fd)


def make_checkpoint_dir(path: Path, account: Account, *, switch_user: bool) -> None:
    """Create the job's own checkpoint directory, 0700 and owned by its user, under a shared parent.

    The parent (the operator's checkpoint root) is created if missing, 0711: users reach their own directory
    but cannot list the others. The job's directory itself is opened without following a symbolic link and
    changed through that descriptor, so a link or file planted at its path is refused, never followed; one
    that already belongs to another user is refused too. An existing directory of the job's user (a requeued
    job resuming from its checkpoint) is kept as it is.
    """
    try:
        path.parent.mkdir(mode=0o711, parents=True, exist_ok=True)
        parent = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            created = _mkdir_at(path.name, parent)
            fd = os.open(path.name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=parent)
        finally:
            os.close(parent)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            what = f"checkpoint directory {path} is a symbolic link or a file, not a directory"
            raise Refused(f"{what}; remove it") from None
        raise Refused(f"cannot create checkpoint directory {path}: {exc.strerror}") from None
    try:
        _own_checkpoint_dir(fd, path, account, switch_user=switch_user, created=created)
    finally:
        os.close(fd)


def _mkdir_at(name: str, parent: int) -> bool:
    try:
        os.mkdir(name, 0o700, dir_fd=parent)
    except FileExistsError:
        return False
    return True


def _own_checkpoint_dir(fd: int, path: Path, account: Account, *, switch_user: bool, created: bool) -> None:
    uid = os.fstat(fd).st_uid
    if uid not in (account.uid, os.geteuid()):
        raise Refused(
            f"checkpoint directory {path} already exists and belongs to another user (uid {uid}); "
            "an admin should remove it"
        )
    try:
        if switch_user and uid != account.uid:
            os.fchown(fd, account.uid, account.gid)
        if created or uid != account.uid:
            os.fchmod(fd, 0o700)
    except OSError as exc:
        raise Refused(f"cannot give checkpoint directory {path} to {account.name}: {exc.strerror}") from None


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


def setup_script(workdir: str, env: Mapping[str, str]) -> str:
    """The script the wrapper sources as the job's user: enter `workdir`, then export `env`.

    When the directory cannot be entered, `env -C` (run as the user, in the C locale) says why in the kernel's
    words, and the script writes `workdir: ` and that message to the exit file in place of a status
    (`nanum.agent.jobrecord.read_workdir_failure` reads it).
    """
    where = _quote(workdir)
    lines = [
        f"cd -P -- {where} 2>/dev/null || {{ nanum_why=$(LC_ALL=C /usr/bin/env -C {where} true 2>&1); "
        'echo "workdir: $nanum_why" >&3; exit 126; }',
        "unset OLDPWD",
    ]
    if env:
        # `command` keeps a variable the shell will not set (bash's read-only UID) from ending the wrapper.
        lines += ["{", *(f"command export {name}={_quote(value)}" for name, value in env.items()), "} 2>/dev/null"]
    return "\n".join(lines) + "\n"


def _quote(text: str) -> str:
    return "'" + text.replace("'", "'\\''") + "'"


def spawn(
    record: JobRecord,
    account: Account,
    env: dict[str, str],
    *,
    switch_user: bool,
    setpriv: str | None = None,
    cgroup_files: Sequence[str] = (),
    command: Sequence[str] | None = None,
    cwd: str | None = None,
) -> subprocess.Popen[bytes]:
    """Start the wrapper in a new session with output to the job's log; raise `Refused` if exec fails.
    `cgroup_files`: the files of the job's cgroup its first process writes `0` into (`Cgroups.create`), to enter
    it before anything else runs.
    `command`: what the wrapper runs (default: the launch's command); `cwd`: where (default: as below).

    To run as another account the wrapper is exec'd through `setpriv` when there is one: Python then spawns
    with vfork, about 0.2 ms, where switching ids in the child needs a full fork of the agent (several ms).
    """
    launch = record.launch
    via_setpriv = switch_user and setpriv is not None and all(SHELL_NAME.fullmatch(name) for name in env)
    fork_switch = switch_user and not via_setpriv
    script_fd = _setup_fd(record, account, launch.workdir, env if via_setpriv else {}) if switch_user else None
    argv = ["/bin/sh", "-c", wrapper(), f"nanum-job-{launch.job_id}", "-" if script_fd is None else "stdin"]
    argv += launch.command if command is None else command
    if via_setpriv:
        assert setpriv is not None
        groups = ",".join(str(g) for g in account.groups)
        drop = [f"--reuid={account.uid}", f"--regid={account.gid}"]
        drop.append(f"--groups={groups}" if groups else "--clear-groups")
        argv = [setpriv, *drop, "--", *argv]
    if cgroup_files and not fork_switch:
        argv = ["/bin/sh", "-c", ENTER, f"nanum-cgroup-{launch.job_id}", *cgroup_files, "--", *argv]
    try:
        log_fd = os.open(record.log_path, os.O_WRONLY | os.O_APPEND | os.O_NOFOLLOW)
        exit_fd = os.open(record.exit_path, os.O_WRONLY | os.O_TRUNC | os.O_NOFOLLOW)
    except BaseException:
        if script_fd is not None:
            os.close(script_fd)
        raise
    try:
        proc = subprocess.Popen(
            argv,
            cwd=cwd or ("/" if switch_user else launch.workdir),  # a switched job enters its own directory as its user
            env={"PATH": SAFE_PATH} if via_setpriv else env,
            stdin=subprocess.DEVNULL if script_fd is None else script_fd,
            stdout=exit_fd,
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
        for fd in (log_fd, exit_fd, script_fd):
            if fd is not None:
                os.close(fd)
    if cgroup_files and fork_switch:  # ENTER would already run as the job's user: move it in from here
        _enter_cgroup(proc, cgroup_files)
    return proc


def _enter_cgroup(proc: subprocess.Popen[bytes], cgroup_files: Sequence[str]) -> None:
    try:
        for path in cgroup_files:  # the whole process (a `tasks` file would move one thread)
            Path(path).with_name("cgroup.procs").write_text(str(proc.pid))
    except OSError as exc:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        raise Refused(f"could not put the job into its cgroup: {exc.strerror}: {exc.filename}") from None


def _setup_fd(record: JobRecord, account: Account, workdir: str, env: Mapping[str, str]) -> int:
    """A descriptor on the setup script, readable by the job's user alone: a memfd, or an unlinked file."""
    try:
        fd = os.memfd_create(f"nanum-job-{record.job_id}", os.MFD_CLOEXEC)
    except (AttributeError, OSError):
        fd, name = tempfile.mkstemp(dir=record.dir)
        os.unlink(name)
    try:
        os.fchmod(fd, 0o600)
        os.fchown(fd, account.uid, account.gid)
        data = setup_script(workdir, env).encode("utf-8", "surrogateescape")
        while data:
            data = data[os.write(fd, data) :]
    except BaseException:
        os.close(fd)
        raise
    os.lseek(fd, 0, os.SEEK_SET)
    return fd
