"""A shell job's relay: the user's login shell on a pseudo-terminal, joined to the server over a websocket.

Run as the job's user (`python -m nanum.agent.relay`), or as the agent with a command after `--`
(`python -m nanum.agent.relay -- podman run ... IMAGE /bin/sh -l`: a shell in a container image, whose runtime the
agent runs), with `NANUM_RELAY_URL` (the server's websocket for this job) and `NANUM_RELAY_SECRET` (the job's
secret, shown to the server as a bearer token) in its environment; neither reaches the shell. It dials out to the
server, which pairs it with the owner's `nanum shell`. Messages: binary frames are terminal bytes both ways; text
frames are JSON, `{"resize": [ROWS, COLS]}` from the user and, last, `{"exit": CODE}` to the user once the shell has
ended. The relay exits with the shell's exit code (128+N when a signal N ended it), which becomes the job's.

If the user's side goes away first, the terminal is hung up as a closed one is: SIGHUP and SIGCONT to the shell
and to the job in the terminal's foreground (a `sleep 600` the shell waits on is in a process group of its own).
What the shell leaves behind in its session (a background job, a `nohup`) is killed once the shell has ended, and
everything in the session is killed if the shell outlives the hang-up by `HANGUP_GRACE_S`: the allocation ends
with the terminal, and no process goes on using its GPUs after it.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import pty
import pwd
import select
import signal
import struct
import sys
import termios
import threading
import time
from pathlib import Path
from typing import Any

__all__ = ["main"]

CHUNK = 65536
#: Signals a terminal's programs must get as a login gets them (not ignored), whatever started the job.
TERMINAL_SIGNALS = (signal.SIGHUP, signal.SIGINT, signal.SIGQUIT, signal.SIGTERM, signal.SIGTSTP, signal.SIGTTIN,
                    signal.SIGTTOU, signal.SIGPIPE)
#: How long a hung-up shell may take to end before everything in its session is killed.
HANGUP_GRACE_S = 5.0
#: How often the relay looks whether the shell has ended while its terminal is quiet.
POLL_S = 0.5


def main() -> int:
    from websockets.exceptions import WebSocketException
    from websockets.sync.client import connect

    url = os.environ.pop("NANUM_RELAY_URL", "")
    secret = os.environ.pop("NANUM_RELAY_SECRET", "")
    if not url:
        print("nanum relay: NANUM_RELAY_URL is not set; it is started by the nanum agent", file=sys.stderr)
        return 2
    command = sys.argv[2:] if sys.argv[1:2] == ["--"] else []
    if not command and os.getuid() == 0:
        print("nanum relay: it runs a login shell only as the job's user; as root it runs only a command given "
              "after --", file=sys.stderr)
        return 2
    pid, master = _spawn_shell(command)
    try:
        with connect(url, additional_headers={"Authorization": f"Bearer {secret}"}, max_size=2**22,
                     open_timeout=30, ping_interval=20) as ws:
            threading.Thread(target=_from_user, args=(ws, master, pid), daemon=True).start()
            code = _to_user(ws, master, pid)
            with contextlib.suppress(WebSocketException, OSError):
                ws.send(json.dumps({"exit": code}))
    except (WebSocketException, OSError) as exc:
        print(f"nanum relay: cannot reach the server at {url}: {exc}", file=sys.stderr)
        _hang_up(pid, master)
        code = _reap(pid)
        _kill_session(pid)
    return code


def _spawn_shell(command: list[str]) -> tuple[int, int]:
    """Fork the user's login shell (or `command`) on a new pseudo-terminal; (its pid, the terminal's master)."""
    shell = os.environ.get("SHELL") or pwd.getpwuid(os.getuid()).pw_shell or "/bin/sh"
    pid, master = pty.fork()
    if pid == 0:  # the child: the shell, as a login shell (argv[0] starts with '-'), or the command
        for sig in TERMINAL_SIGNALS:  # as a login starts: whatever started the job ignored or blocked
            signal.signal(sig, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_SETMASK, [])
        with contextlib.suppress(OSError):
            if command:
                os.execvp(command[0], command)
            os.execv(shell, ["-" + os.path.basename(shell)])
        os._exit(127)
    return pid, master


def _to_user(ws: Any, master: int, pid: int) -> int:
    """Copy the terminal's output to the user until the shell is gone; its exit code. What the shell left in
    its session is killed then (it would hold the terminal, and the job's GPUs, on its own)."""
    while True:
        code = _ended(pid)
        if code is not None:
            _kill_session(pid)
            _drain(ws, master)
            return code
        readable, _, _ = select.select([master], [], [], POLL_S)
        if not readable:
            continue
        try:
            data = os.read(master, CHUNK)
        except OSError:  # EIO: every process holding the terminal has gone
            data = b""
        if not data:
            return _reap(pid)
        try:
            ws.send(data)
        except Exception:  # the user went away: hang up the shell, as a closed terminal does
            _hang_up(pid, master)
            code = _reap(pid)
            _kill_session(pid)
            return code


def _drain(ws: Any, master: int) -> None:
    """Send the user what the terminal still holds (the shell's last words) once the shell has ended."""
    with contextlib.suppress(Exception):
        while select.select([master], [], [], 0)[0]:
            data = os.read(master, CHUNK)
            if not data:
                return
            ws.send(data)


def _from_user(ws: Any, master: int, pid: int) -> None:
    """Copy the user's keys to the terminal and apply window sizes, until the user's side closes; then hang
    up, and kill the session if the shell is still there after `HANGUP_GRACE_S`."""
    with contextlib.suppress(Exception):  # a closed connection ends the loop as its end does
        for message in ws:
            if isinstance(message, bytes):
                os.write(master, message)
            else:
                _control(master, message)
    if not _alive(pid):  # the shell ended first (its exit closed the connection)
        return
    _hang_up(pid, master)
    deadline = time.monotonic() + HANGUP_GRACE_S
    while time.monotonic() < deadline:
        if not _alive(pid):
            return
        time.sleep(0.1)
    _kill_session(pid)


def _control(master: int, text: str) -> None:
    with contextlib.suppress(ValueError, TypeError, OSError):
        rows, cols = json.loads(text)["resize"]
        fcntl.ioctl(master, termios.TIOCSWINSZ, struct.pack("HHHH", int(rows), int(cols), 0, 0))


def _hang_up(pid: int, master: int) -> None:
    """What the kernel does when a terminal is closed: SIGHUP, then SIGCONT, to the shell (the session's
    leader) and to the terminal's foreground process group."""
    groups = {pid}
    with contextlib.suppress(OSError):
        groups.add(os.tcgetpgrp(master))  # 0 (or an error) once nobody holds the terminal
    for group in groups - {0, os.getpgrp()}:  # never the relay's own group: that would end the job as hung up
        for sig in (signal.SIGHUP, signal.SIGCONT):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(group, sig)


def _kill_session(session: int) -> None:
    """SIGKILL every process left in the shell's session (the shell leads it: its id is the shell's pid)."""
    for pid in _session_members(session):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)


def _session_members(session: int) -> list[int]:
    members = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()  # state ppid pgrp session ...
        if int(fields[3]) == session and int(entry.name) != os.getpid():
            members.append(int(entry.name))
    return members


def _alive(pid: int) -> bool:
    """Whether the shell is still running (not yet reaped, and not a zombie)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2] != "Z"


def _ended(pid: int) -> int | None:
    """The shell's exit code if it has ended (reaping it), else None."""
    try:
        done, status = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return 1
    if done == 0:
        return None
    return _code(status)


def _reap(pid: int) -> int:
    try:
        _, status = os.waitpid(pid, 0)
    except ChildProcessError:
        return 1
    return _code(status)


def _code(status: int) -> int:
    return os.waitstatus_to_exitcode(status) if os.WIFEXITED(status) else 128 + os.WTERMSIG(status)


if __name__ == "__main__":
    sys.exit(main())
