"""The launcher: a small resident process that starts every job process of an agent (`nanum.agent.launch` holds
the agent's side, `Launcher`).

A job's start by a chain of programs (`setpriv` to switch to the job's user, a wrapper shell, `env` to undo the
signals a shell ignores) costs about 3 ms of exec'ing before its first instruction, and forking the agent itself
costs as much: it is a large, threaded process. The launcher is a second Python process, small and
single-threaded, started once by the agent (`python -P -m nanum.agent.launcher FD`), that imports as little as it can
(every module it holds makes each fork dearer). Each job gets a child of it, the job's *waiter*, forked ahead
where it can be (`_Spares`: the start then costs a message, not a fork), which

1. leads a session of its own (the job's process group: stopping a job signals it), with /dev/null as input,
   the job's log as output, and the job's exit file on descriptor 3 (`nanum.agent.procs.holding` finds it there);
2. enters the job's cgroup by writing `0` to the files it is given, so the job is in it before it runs anything;
3. switches to the job's user (groups, then group, then user), and only then
4. enters the working directory, as that user: a directory the user may not enter (another user's 0700 home) is
   refused as the kernel refuses it to them, and the waiter writes `workdir: ` and the kernel's words to the
   exit file in place of a status;
5. starts the command (`posix_spawn`) with the job's environment, every signal at its default and none blocked
   (a shell would leave SIGINT and SIGQUIT ignored; Python leaves SIGPIPE ignored), unless a stop came first;
6. waits, and writes the command's status (`128 + N` for a signal N, as a shell says it) to the exit file.

The waiter holds SIGTERM, SIGINT and SIGHUP blocked from its first step: a signal sent to the group stops the
command but never the waiter, which must outlive the command to say how it ended (when a waiter ends, the agent
takes its job as ended and kills what is left of it: a job whose waiter a stop killed lost its grace period and its
status). A stop sent before the command starts waits, pending, in the waiter: the command is then never started, and
its status says the signal. One sent while it was being started reached either both or the waiter alone (the kernel
gives a new process none of its parent's pending signals), so the waiter passes on to the group what it holds once
the command runs: a job stopped the moment it starts is stopped, never left to run until its SIGKILL, and at worst
gets the signal twice.

The exit file is how a restarted agent learns the status of a job that ended while it was down. A command that
cannot be run (not found, not executable) is said in the job's log and ends the job with 127 or 126, as a shell
would.

Nothing the job's owner controls reaches a process that still runs as root: the launcher and the waiter hold
the job's command, environment and directory as data until the waiter has switched users; the environment
reaches only the command's exec, and the directory is entered as the user. The waiter, which may hold what
other jobs' requests carried, is made undumpable, so its user cannot read its memory. The launcher reports each
waiter's own end to the agent: a waiter killed with its job (SIGKILL, the OOM killer) wrote no status. It exits
when the agent's end of its socket closes; jobs run on, each its own session, and a new agent re-adopts them by
their exit files.

Messages, both ways over a Unix stream socket: a 4-byte length, then that many bytes of `marshal` data (a dict
of strings, numbers and lists, between two processes of the same agent). A spawn request carries the job's log
and exit file as descriptors (`SCM_RIGHTS`) with its first byte.
"""

from __future__ import annotations

import contextlib
import errno
import gc
import marshal
import os
import select
import signal
import socket
import struct
import sys
import time

from nanum.oom import as_any_process

TYPE_CHECKING = False  # `typing` is not loaded: its modules would be copied into every fork
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any

__all__ = ["receive", "send"]

_LENGTH = struct.Struct("!I")
#: Signals the waiter outlives once its command runs: what stops a job, and a closed terminal.
HELD = frozenset({signal.SIGTERM, signal.SIGINT, signal.SIGHUP})
#: Every signal a command starts with at its default disposition.
DEFAULTED = tuple(s for s in signal.Signals if s < 32 and s not in (signal.SIGKILL, signal.SIGSTOP))
#: The waiter's own exit status when it could not get as far as the command (its reason is in the job's log).
SETUP_FAILED = 125
EXIT_FD = 3


def send(sock: socket.socket, message: Mapping[str, Any], fds: list[int] | None = None) -> None:
    """Send one message, with `fds` (descriptors) attached to its first byte."""
    data = marshal.dumps(dict(message))
    head = _LENGTH.pack(len(data))
    if fds:
        socket.send_fds(sock, [head], fds)
        sock.sendall(data)
    else:
        sock.sendall(head + data)


def receive(sock: socket.socket, fds: list[int] | None = None) -> dict[str, Any] | None:
    """One message (None at the end of the stream); the descriptors it carries into `fds`, where given."""
    if fds is None:
        head = _exactly(sock, _LENGTH.size)
    else:
        head, got, _, _ = socket.recv_fds(sock, _LENGTH.size, 8)
        fds.extend(got)
        if head and len(head) < _LENGTH.size:
            head += _exactly(sock, _LENGTH.size - len(head)) or b""
    if not head or len(head) < _LENGTH.size:
        return None
    body = _exactly(sock, _LENGTH.unpack(head)[0])
    if body is None:
        return None
    message: dict[str, Any] = marshal.loads(body)
    return message


def _exactly(sock: socket.socket, n: int) -> bytes | None:
    chunks = []
    while n:
        chunk = sock.recv(min(n, 1 << 20))
        if not chunk:
            return None
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks)


# --- the launcher process -----------------------------------------------------------------------------------


def main(fd: int) -> None:
    """Serve spawn requests on socket `fd` until the agent closes it."""
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):  # the agent's terminal or unit: the agent decides
        signal.signal(sig, signal.SIG_IGN)
    _name_self("nanum-launcher")
    as_any_process()  # the agent is spared by the OOM killer; the jobs, forked from here, are not
    sock = socket.socket(fileno=fd)
    wake_r, wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    _load_prctl()

    gc.freeze()  # the waiters it forks then copy fewer pages
    own = (sock.fileno(), wake_r, wake_w)
    spares = _Spares(own)
    poller = select.poll()
    poller.register(sock, select.POLLIN)
    poller.register(wake_r, select.POLLIN)
    while True:
        ready = {fd for fd, _ in poller.poll(spares.refill_ms())}
        if spares.refill_ms() == 0:
            spares.refill()
        if wake_r in ready:
            with contextlib.suppress(BlockingIOError):
                while os.read(wake_r, 512):
                    pass
            _reap(sock, spares)
        if sock.fileno() in ready:
            fds: list[int] = []
            request = receive(sock, fds)
            if request is None:
                return
            send(sock, _serve(request, fds, own, spares))
            _reap(sock, spares)


def _reap(sock: socket.socket, spares: _Spares) -> None:
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        if spares.ended(pid):  # never a job's
            continue
        send(sock, {"ended": pid, "code": os.waitstatus_to_exitcode(status)})


class _Spares:
    """The next jobs' waiters, forked ahead (`_spare`): a start then costs a message to one, not a fork and a new
    session (about 1.5 ms, and more while the machine is busy). `COUNT` wait at a time, so that the starts of one
    scheduling round (a node's GPUs freed at once) all find one. The missing ones are forked `REFILL_MS` after
    the last start, so that the forks do not compete with the starts they follow. A start that finds none left
    forks its waiter."""

    COUNT = 4
    REFILL_MS = 5

    def __init__(self, own: tuple[int, ...]) -> None:
        self.own = own
        self.ready: list[tuple[int, socket.socket]] = []  # (pid, socket) of each spare waiting, oldest first
        self.unreported: set[int] = set()  # spares that never became a job's waiter: their end is not told
        self.failed = False  # a fork failed, or a spare ended unused: wait for a request before forking again
        self.due = 0.0  # monotonic(): when the missing spares are forked

    def refill_ms(self) -> int:
        """How long until the missing spares are due (-1: none is missing, or none is to be forked)."""
        if len(self.ready) >= self.COUNT or self.failed:
            return -1
        return max(0, int((self.due - time.monotonic()) * 1000) + 1)

    def refill(self) -> None:
        launcher = os.getpid()
        while len(self.ready) < self.COUNT:
            ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                pid = os.fork()
            except OSError:
                ours.close()
                theirs.close()
                self.failed = True
                return
            if pid == 0:
                code = SETUP_FAILED
                try:
                    ours.close()
                    for _, sock in self.ready:  # the other spares' sockets are not this one's
                        sock.close()
                    code = _spare(theirs, launcher, self.own)
                except BaseException as exc:
                    _say(f"nanum: the job's process failed: {exc!r}")
                finally:
                    os._exit(code)
            theirs.close()
            self.ready.append((pid, ours))

    def take(self, request: Mapping[str, Any], fds: list[int]) -> int | None:
        """Hand the request to a spare; its pid once it holds the job's descriptors, or None if none is left (a
        spare that is gone never held them: the job is started otherwise)."""
        self.failed = False
        self.due = time.monotonic() + self.REFILL_MS / 1000
        while self.ready:
            pid, sock = self.ready.pop(0)
            try:
                send(sock, request, fds)
                taken = sock.recv(1) == b"!"
            except OSError:
                taken = False
            finally:
                sock.close()
            if taken:
                return pid
            self.unreported.add(pid)
        return None

    def ended(self, pid: int) -> bool:
        """Whether `pid` was a spare that never took a job (its end is nobody's business); forgets it."""
        for i, (spare, sock) in enumerate(self.ready):
            if spare == pid:
                sock.close()
                del self.ready[i]
                self.failed = True  # not again before the next request, however it ended
                return True
        if pid in self.unreported:
            self.unreported.discard(pid)
            return True
        return False


def _spare(sock: socket.socket, launcher: int, own: tuple[int, ...]) -> int:
    """A waiter forked ahead: it leads its session, then waits for a request. It takes one only while the
    launcher that sent it still runs: once the launcher has died, the agent may already have looked for who holds
    the job's exit file, found nobody and started the job anew (`nanum.agent.launch.spawn`). It says it took the
    request once it holds the job's descriptors, before anything else."""
    _lead_session(own)
    _name_self("nanum-spare")
    fds: list[int] = []
    request = receive(sock, fds)
    if request is None or len(fds) != 2 or os.getppid() != launcher:
        return 0  # the launcher is gone; its descriptors close with this process
    with contextlib.suppress(OSError):  # the launcher answers the agent from here on, if it still runs; if it died
        sock.send(b"!", socket.MSG_NOSIGNAL)  # just now, the agent finds this process holding the job's exit file
    sock.close()
    return _run_job(request, fds[0], fds[1])


def _serve(request: Mapping[str, Any], fds: list[int], own: tuple[int, ...], spares: _Spares) -> dict[str, Any]:
    """Start the job's waiter, a spare or a fork; answer once it leads its own session, so that signalling its
    group reaches it."""
    try:
        if len(fds) != 2:
            return {"error": [errno.EINVAL, f"a spawn request needs 2 descriptors, got {len(fds)}"]}
        taken = spares.take(request, fds)
        if taken is not None:
            return {"pid": taken}
        led_r, led_w = os.pipe2(os.O_CLOEXEC)
        try:
            pid = os.fork()
        except OSError as exc:
            os.close(led_r)
            os.close(led_w)
            return {"error": [exc.errno, f"cannot fork the job's process: {exc.strerror}"]}
        if pid == 0:
            code = SETUP_FAILED
            try:
                os.close(led_r)
                _lead_session(own, led_w)
                code = _run_job(request, fds[0], fds[1])
            except BaseException as exc:
                _say(f"nanum: the job's process failed: {exc!r}")
            finally:
                os._exit(code)
        os.close(led_w)
        os.read(led_r, 1)  # empty if it died first: its end is reported as any other
        os.close(led_r)
        return {"pid": pid}
    finally:
        for fd in fds:
            os.close(fd)


def _lead_session(own: tuple[int, ...], led: int | None = None) -> None:
    """A waiter's first steps: its own session, the launcher's descriptors `own` closed, the job's stop signals
    blocked for good (the module docstring says why). Written to, `led` tells the launcher that it leads its
    session."""
    # The launcher's dispositions (SIGTERM ignored, its SIGCHLD handler) are not the job's. They are reset before
    # the job's group exists, with its stop signals blocked first: a SIGTERM sent to the group the moment the agent
    # knows it must not meet an ignored disposition (lost) but wait, pending, for `_run_job` to find.
    signal.pthread_sigmask(signal.SIG_BLOCK, HELD)
    signal.set_wakeup_fd(-1)
    for sig in DEFAULTED:
        signal.signal(sig, signal.SIG_DFL)
    os.setsid()
    if led is not None:
        os.write(led, b"!")
        os.close(led)
    for fd in own:
        os.close(fd)


def _run_job(request: Mapping[str, Any], log_fd: int, exit_fd: int) -> int:
    """The rest of the waiter (module docstring), once it leads its session; returns its own exit status."""
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.dup2(log_fd, 1)
    os.dup2(log_fd, 2)
    if exit_fd == EXIT_FD:  # where a spare received it
        os.set_inheritable(EXIT_FD, False)
    else:
        os.dup2(exit_fd, EXIT_FD, inheritable=False)
    for fd in {null, log_fd, exit_fd} - {0, 1, 2, EXIT_FD}:
        os.close(fd)
    _name_self(str(request["title"]))
    try:
        for path in request["cgroup_files"]:
            _write(path, b"0")
        if request["user"] is not None:
            uid, gid, groups = request["user"]
            os.setgroups(groups)
            os.setgid(gid)
            os.setuid(uid)
        _undumpable()
    except OSError as exc:
        where = f": {exc.filename}" if exc.filename else ""
        _say(f"nanum: cannot set up the job's process: {exc.strerror}{where}")
        return SETUP_FAILED
    try:
        os.chdir(str(request["cwd"]))
    except OSError as exc:
        _status(f"workdir: {exc.strerror}")
        return 126
    argv: list[str] = list(request["argv"])
    env: dict[str, str] = dict(request["env"])
    env.pop("OLDPWD", None)
    with contextlib.suppress(OSError):
        env["PWD"] = os.getcwd()  # as a shell would set it, links resolved
    stopped = signal.sigpending() & HELD
    if stopped:  # stopped before its command started: it never runs
        _status(str(128 + min(stopped)))
        return 0
    try:
        child = _spawn(argv, env)
    except OSError as exc:
        _say(f"nanum: cannot run {argv[0]!r}: {exc.strerror}")
        _status("127" if exc.errno == errno.ENOENT else "126")
        return 0
    except ValueError:  # an empty program name
        _say(f"nanum: cannot run {argv[0]!r}: no program named")
        _status("127")
        return 0
    for sig in signal.sigpending() & HELD:  # sent while the command was being started: it may have missed it
        os.killpg(0, sig)
    _, status = os.waitpid(child, 0)
    code = os.waitstatus_to_exitcode(status)
    _status(str(128 - code if code < 0 else code))
    return 0


def _spawn(argv: list[str], env: dict[str, str]) -> int:
    """Start the command as `execvp` would, with the job's PATH (a file that is not a program runs with sh, as a
    shell would run it); its pid. `posix_spawn` (a vfork) costs about 0.8 ms less CPU than a fork of this process.

    glibc's `posix_spawn` leaves its two internal signals (32 and 33, below SIGRTMIN) ignored in the new program:
    no program can use them but glibc itself, which sets its own handler when it needs one."""
    os.environ["PATH"] = env.get("PATH", os.defpath)  # what posix_spawnp searches
    try:
        return os.posix_spawnp(argv[0], argv, env, setsigmask=(), setsigdef=DEFAULTED)
    except OSError as exc:
        if exc.errno != errno.ENOEXEC:
            raise
    import shutil  # rarely needed: not loaded in every waiter

    found = shutil.which(argv[0], path=os.environ["PATH"]) if "/" not in argv[0] else argv[0]
    return os.posix_spawn("/bin/sh", ["/bin/sh", found or argv[0], *argv[1:]], env, setsigmask=(), setsigdef=DEFAULTED)


_PR_SET_DUMPABLE = 4
_prctl: Any = None  # libc's prctl, found once by the launcher (`_load_prctl`): looking it up took 0.4 ms per job


def _load_prctl() -> None:
    global _prctl
    import ctypes

    _prctl = ctypes.CDLL(None, use_errno=True).prctl


def _undumpable() -> None:
    """Keep the job's user from reading the waiter's memory (ptrace, /proc/PID/mem): forked from the launcher, it
    may still hold what other jobs' requests carried. Switching users already does this where the kernel's
    fs.suid_dumpable is 0, its default; this holds whatever that is set to. The command it execs is not affected."""
    import ctypes  # loaded by the launcher before it forks (`_load_prctl`)

    if _prctl is None:
        _load_prctl()
    if _prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "cannot make the job's waiter undumpable")


def _say(text: str) -> None:
    with contextlib.suppress(OSError):
        os.write(2, text.encode("utf-8", "surrogateescape") + b"\n")


def _status(text: str) -> None:
    with contextlib.suppress(OSError):
        os.write(EXIT_FD, text.encode("utf-8", "surrogateescape") + b"\n")


def _name_self(name: str) -> None:
    """What `ps -e` and `top` show for this process (its command line stays the launcher's)."""
    with contextlib.suppress(OSError):
        _write("/proc/self/comm", name.encode("utf-8", "surrogateescape")[:15])


def _write(path: str, data: bytes) -> None:
    """Write `data` to an existing file: system calls alone, no Python file object (the waiter's start is every
    job's start)."""
    fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)


if __name__ == "__main__":
    main(int(sys.argv[1]))
