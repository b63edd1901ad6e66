"""Starting one job process: its directory, environment, account, and the request to the launcher.

Every job is started by this agent's launcher (`nanum.agent.launcher`): a waiter process leads the job's own
session, holds its exit file, switches to the job's user, enters its working directory as that user, starts the
command with the job's environment and records its exit status. Its standard output and error are the job's log.

Nothing the job's owner controls reaches a process that still runs as root: the environment reaches only the
command's exec, after the switch, and the working directory is entered as the user (so a directory the user may
not enter, such as another user's 0700 home, is refused as the kernel refuses it to that user, and the job fails
to start saying so). A job run as the agent's own account needs no switch. The umask is the agent's.

Where the node enforces limits (`nanum.agent.cgroups`), the waiter enters the job's cgroup before anything else
runs: a pid moved in from outside after the spawn could already have forked.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import shutil
import socket
import subprocess
import sys
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from nanum.agent import procs
from nanum.agent.accounts import Account, Refused
from nanum.agent.jobrecord import JobRecord
from nanum.agent.jobsdir import JOB_FILES
from nanum.agent.launcher import receive, send
from nanum.protocol import JobLaunch

__all__ = [
    "Answer", "LaunchFailed", "Launcher", "LauncherStopped", "Spawning", "check_fields", "find_setpriv", "job_env",
    "launcher", "prepare", "spawn",
]

log = logging.getLogger("nanum.agent")

SAFE_PATH = "/usr/local/bin:/usr/bin:/bin"
SECRET_VARS = ("NANUM_TOKEN", "NANUM_NODE_TOKEN")
PASSED_VARS = ("LANG", "LC_ALL", "LC_CTYPE", "TZ", "TERM")


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
        "NANUM_PREEMPT_FILE": record.preempt_path,
        "NANUM_ACTIVITY_FILE": record.activity_path,
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

    The working directory of a job run as another account is not looked at here, as root: the job's waiter
    enters it as the job's user (see the module docstring).
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
    for path, name in ((record.log_path, "output.log"), (record.exit_path, "exit")):
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, JOB_FILES[name]))
    _make_activity_file(record.activity_path, account, switch_user)
    if switch_user:  # the job's own output belongs to its owner
        os.chown(record.log_path, account.uid, account.gid, follow_symlinks=False)
    if launch.checkpoint_dir:
        make_checkpoint_dir(Path(launch.checkpoint_dir), account, switch_user=switch_user)


def _make_activity_file(path: str, account: Account, switch_user: bool) -> None:
    """The job's activity file, owned by its user so it can touch it; dated 1970 until it does."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, JOB_FILES["activity"])
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
    """util-linux's `setpriv`, with which a container's working directory is resolved as its user."""
    return shutil.which("setpriv", path="/usr/bin:/bin:/usr/sbin:/sbin")


def spawn(
    record: JobRecord,
    account: Account,
    env: dict[str, str],
    *,
    switch_user: bool,
    cgroup_files: Sequence[str] = (),
    command: Sequence[str] | None = None,
    cwd: str | None = None,
) -> Spawning:
    """Ask the launcher to start the job, output to its log; `Spawning.pid()` waits for its answer. Several starts
    may be asked for before the first answer is read: the launcher starts one while the agent prepares the next.
    `cgroup_files`: the files of the job's cgroup its first process writes `0` into (`Cgroups.create`), to enter
    it before anything else runs. `command`: what runs (default: the launch's command); `cwd`: where (default:
    its working directory, entered as its user)."""
    launch = record.launch
    argv = launch.command if command is None else command
    user = (account.uid, account.gid, account.groups) if switch_user else None
    log_fd = os.open(record.log_path, os.O_WRONLY | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        exit_fd = os.open(record.exit_path, os.O_WRONLY | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC)
    except BaseException:
        os.close(log_fd)
        raise

    def start() -> Answer:
        return launcher().request(argv, env, cwd=cwd or launch.workdir, log_fd=log_fd, exit_fd=exit_fd,
                                  cgroup_files=cgroup_files, title=f"nanum-job-{launch.job_id}", user=user)

    return Spawning(record, account.name, start, (log_fd, exit_fd))


class Spawning:
    """A start asked of the launcher whose answer, the pid that leads the job's process group, is not read yet."""

    def __init__(self, record: JobRecord, user: str, start: Callable[[], Answer], fds: tuple[int, int]) -> None:
        self._record, self._user, self._start = record, user, start
        self._fds: tuple[int, ...] = fds
        try:
            self._answer: Answer | None = start()
        except LauncherStopped:  # found out, and the start made again, in `pid()`
            self._answer = None
        except LaunchFailed as exc:
            self._close()
            raise self._refused(exc) from None
        except BaseException:
            self._close()
            raise

    def pid(self) -> int:
        """The waiter's pid, or `Refused`. Call it once."""
        try:
            try:
                if self._answer is None:
                    raise LauncherStopped(errno.EPIPE, "the job launcher stopped")
                return self._answer.pid()
            except LauncherStopped:
                # It stopped before answering: maybe after forking the job's waiter, which holds the exit file from
                # birth (nothing else but this process does: the directory is new). Started once, never twice.
                waiter = procs.opened_by_other(self._record.exit_path, os.getpid())
                if waiter is not None:
                    return waiter
                log.warning("job %d: the job launcher stopped before starting it; starting it again",
                            self._record.job_id)
                return self._start().pid()  # a new launcher
        except LaunchFailed as exc:
            raise self._refused(exc) from None
        finally:
            self._close()

    def _refused(self, exc: LaunchFailed) -> Refused:
        return Refused(f"could not start the job as {self._user!r}: {exc.strerror}")

    def _close(self) -> None:
        for fd in self._fds:
            with contextlib.suppress(OSError):
                os.close(fd)
        self._fds = ()


class LaunchFailed(OSError):
    """The launcher could not start the waiter (the command itself failing to run is the job's own end)."""


class LauncherStopped(LaunchFailed):
    """The launcher stopped (died) before answering a request."""


class _Connection:
    """One launcher process and the agent's end of its socket."""

    def __init__(self, proc: subprocess.Popen[bytes], sock: socket.socket) -> None:
        self.proc, self.sock = proc, sock
        self.sent = self.answered = 0  # requests sent, and answered: the launcher answers them in order
        self.answers: dict[int, dict[str, Any]] = {}  # answers not read yet, by request

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)
        self.sock.close()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=5)


class Launcher:
    """The agent's handle on its launcher process, started on first use and again if it has died."""

    def __init__(self) -> None:
        self._lock = threading.Lock()  # one request sent at a time
        self._cond = threading.Condition()
        self._conn: _Connection | None = None
        self._alive: set[int] = set()  # waiters the running launcher started whose end has not come
        self._ended: dict[int, int] = {}  # waiter pid -> its own exit code (-N: signal N), until asked for

    def request(
        self,
        argv: Sequence[str],
        env: Mapping[str, str],
        *,
        cwd: str,
        log_fd: int,
        exit_fd: int,
        user: tuple[int, int, Sequence[int]] | None = None,
        cgroup_files: Sequence[str] = (),
        title: str = "",
    ) -> Answer:
        """Ask the launcher to start `argv` as a job (`nanum.agent.launcher`); `Answer.pid()` reads its waiter's pid,
        which leads the job's process group. `user`: (uid, gid, groups) to switch to; None runs it as the agent's
        own account. Requests may follow each other before their answers are read."""
        request = {
            "argv": list(argv), "env": dict(env), "cwd": cwd, "cgroup_files": list(cgroup_files), "title": title,
            "user": None if user is None else [user[0], user[1], list(user[2])],
        }
        for text in (*argv, *env, *env.values(), cwd):
            os.fsencode(text)  # a string no system call can take fails here, in the agent, not in the job
        with self._lock:
            conn = self._running()
            try:
                send(conn.sock, request, [log_fd, exit_fd])
            except OSError as exc:
                self._forget(conn)
                raise LauncherStopped(errno.EPIPE, f"the job launcher stopped: {exc}") from None
            conn.sent += 1
            return Answer(self, conn, conn.sent - 1)

    @property
    def pid(self) -> int | None:
        """The launcher process's pid, while it runs."""
        conn = self._conn
        return conn.proc.pid if conn is not None and conn.proc.poll() is None else None

    def start(self) -> None:
        """Start the launcher now, so that the first job does not wait for it (about 50 ms)."""
        with self._lock:
            self._running()

    def returncode(self, pid: int, timeout: float = 10.0) -> int | None:
        """The exit code of waiter `pid` once the launcher has reaped it (negative: killed by that signal);
        None at once for a process it did not start (a job adopted after a restart), or after `timeout`."""
        with self._cond:
            self._cond.wait_for(lambda: pid in self._ended or pid not in self._alive, timeout)
            self._alive.discard(pid)
            return self._ended.pop(pid, None)

    def discard(self, pid: int) -> None:
        """Waiter `pid`'s end is not wanted (its exit file told it): keep nothing of it."""
        with self._cond:
            self._alive.discard(pid)
            self._ended.pop(pid, None)

    def waiters(self) -> list[int]:
        """The waiters started that have not ended."""
        with self._cond:
            return sorted(self._alive)

    def close(self) -> None:
        """Stop the launcher (jobs run on); the next spawn starts another."""
        with self._lock:
            if self._conn is not None:
                self._forget(self._conn)

    def _running(self) -> _Connection:
        conn = self._conn
        if conn is not None and conn.proc.poll() is None:
            return conn
        if conn is not None:
            self._forget(conn)
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        env = {k: v for k, v in os.environ.items() if not k.startswith("NANUM_")}
        try:  # -P: nothing from its working directory is imported
            proc = subprocess.Popen(
                [sys.executable, "-P", "-m", "nanum.agent.launcher", str(theirs.fileno())],
                pass_fds=[theirs.fileno()], env=env, stdin=subprocess.DEVNULL, cwd="/", close_fds=True,
            )
        except OSError as exc:
            ours.close()
            raise LaunchFailed(exc.errno or errno.EIO, f"cannot start the job launcher: {exc.strerror}") from None
        finally:
            theirs.close()
        conn = _Connection(proc, ours)
        with self._cond:
            self._conn = conn
        threading.Thread(target=self._read, args=(conn,), name="nanum-launcher", daemon=True).start()
        return conn

    def _answer(self, conn: _Connection, number: int) -> dict[str, Any]:
        """The launcher's answer to request `number` sent on `conn`."""
        with self._cond:
            self._cond.wait_for(lambda: number in conn.answers or self._conn is not conn)
            if number in conn.answers:
                return conn.answers.pop(number)
        with contextlib.suppress(subprocess.TimeoutExpired):
            conn.proc.wait(timeout=5)  # gone, and every descriptor it held closed (`spawn` looks for who holds one)
        raise LauncherStopped(errno.EPIPE, "the job launcher stopped while starting the job")

    def _read(self, conn: _Connection) -> None:
        """The reader thread: replies to the waiting spawn, and waiters' ends into the table."""
        with contextlib.suppress(OSError):
            while (message := receive(conn.sock)) is not None:
                with self._cond:
                    if "ended" in message:
                        pid = int(message["ended"])
                        if pid in self._alive:  # else discarded: nobody will ask
                            self._alive.remove(pid)
                            self._ended[pid] = int(message["code"])
                    else:
                        if "pid" in message:  # a new process: whatever ended under that pid before is gone
                            self._alive.add(int(message["pid"]))
                            self._ended.pop(int(message["pid"]), None)
                        conn.answers[conn.answered] = message
                        conn.answered += 1
                    self._cond.notify_all()
        self._forget(conn)

    def _forget(self, conn: _Connection) -> None:
        """Drop a launcher that stopped: the ends of the waiters it started can no longer be told."""
        with self._cond:
            if self._conn is conn:
                self._conn = None
                self._alive.clear()
            self._cond.notify_all()
        conn.close()


class Answer:
    """The launcher's answer to one spawn request, read when it is wanted (`Launcher.request`)."""

    def __init__(self, launcher: Launcher, conn: _Connection, number: int) -> None:
        self._launcher, self._conn, self._number = launcher, conn, number

    def pid(self) -> int:
        """The waiter's pid (read once); `LaunchFailed` if the launcher could not start it, `LauncherStopped` if it
        stopped before answering."""
        reply = self._launcher._answer(self._conn, self._number)
        if "error" in reply:
            code, text = reply["error"]
            raise LaunchFailed(code, text)
        return int(reply["pid"])


_LAUNCHER: Launcher | None = None
_LAUNCHER_LOCK = threading.Lock()


def launcher() -> Launcher:
    """This process's launcher, shared by its executors (an agent restarted inside one process, as in tests, still
    learns how the jobs it started ended)."""
    global _LAUNCHER
    with _LAUNCHER_LOCK:
        if _LAUNCHER is None:
            _LAUNCHER = Launcher()
        return _LAUNCHER
