"""A shell job's relay: the user's login shell on a pseudo-terminal, joined to the server over a websocket.

Run by the job wrapper as the job's user (`python -m nanum.agent.relay`), with `NANUM_RELAY_URL` (the server's
websocket for this job) and `NANUM_RELAY_SECRET` (the job's secret, shown to the server as a bearer token)
in its environment; neither reaches the shell. It dials out to the server, which pairs it with the owner's
`nanum shell`. Messages: binary frames are terminal bytes both ways; text frames are JSON, `{"resize": [ROWS,
COLS]}` from the user and, last, `{"exit": CODE}` to the user once the shell has ended. The relay exits with the
shell's exit code (128+N when a signal N ended it), which becomes the job's. If the user's side goes away
first, the shell gets SIGHUP, as a closed terminal gives it.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import pty
import pwd
import signal
import struct
import sys
import termios
import threading
from typing import Any

__all__ = ["main"]

CHUNK = 65536


def main() -> int:
    from websockets.exceptions import WebSocketException
    from websockets.sync.client import connect

    url = os.environ.pop("NANUM_RELAY_URL", "")
    secret = os.environ.pop("NANUM_RELAY_SECRET", "")
    if not url:
        print("nanum relay: NANUM_RELAY_URL is not set; it is started by the nanum agent", file=sys.stderr)
        return 2
    pid, master = _spawn_shell()
    try:
        with connect(url, additional_headers={"Authorization": f"Bearer {secret}"}, max_size=2**22,
                     open_timeout=30, ping_interval=20) as ws:
            threading.Thread(target=_from_user, args=(ws, master, pid), daemon=True).start()
            code = _to_user(ws, master, pid)
            with contextlib.suppress(WebSocketException, OSError):
                ws.send(json.dumps({"exit": code}))
    except (WebSocketException, OSError) as exc:
        print(f"nanum relay: cannot reach the server at {url}: {exc}", file=sys.stderr)
        _hang_up(pid)
        code = _reap(pid)
    return code


def _spawn_shell() -> tuple[int, int]:
    """Fork the user's login shell on a new pseudo-terminal; (its pid, the terminal's master side)."""
    shell = os.environ.get("SHELL") or pwd.getpwuid(os.getuid()).pw_shell or "/bin/sh"
    pid, master = pty.fork()
    if pid == 0:  # the child: the shell, as a login shell (argv[0] starts with '-')
        with contextlib.suppress(OSError):
            os.execv(shell, ["-" + os.path.basename(shell)])
        os._exit(127)
    return pid, master


def _to_user(ws: Any, master: int, pid: int) -> int:
    """Copy the terminal's output to the user until the shell is gone; its exit code."""
    while True:
        try:
            data = os.read(master, CHUNK)
        except OSError:  # EIO: every process holding the terminal has gone
            data = b""
        if not data:
            return _reap(pid)
        try:
            ws.send(data)
        except Exception:  # the user went away: hang up the shell, as a closed terminal does
            _hang_up(pid)
            return _reap(pid)


def _from_user(ws: Any, master: int, pid: int) -> None:
    """Copy the user's keys to the terminal and apply window sizes, until the user's side closes."""
    with contextlib.suppress(Exception):  # a closed connection ends the loop as its end does
        for message in ws:
            if isinstance(message, bytes):
                os.write(master, message)
            else:
                _control(master, message)
    _hang_up(pid)


def _control(master: int, text: str) -> None:
    with contextlib.suppress(ValueError, TypeError, OSError):
        rows, cols = json.loads(text)["resize"]
        fcntl.ioctl(master, termios.TIOCSWINSZ, struct.pack("HHHH", int(rows), int(cols), 0, 0))


def _hang_up(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(os.getpgid(pid), signal.SIGHUP)


def _reap(pid: int) -> int:
    try:
        _, status = os.waitpid(pid, 0)
    except ChildProcessError:
        return 1
    return os.waitstatus_to_exitcode(status) if os.WIFEXITED(status) else 128 + os.WTERMSIG(status)


if __name__ == "__main__":
    sys.exit(main())
