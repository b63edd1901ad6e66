"""`nanum shell`'s end of a shell: this terminal joined to the job's pseudo-terminal over the server's websocket.

The local terminal is put in raw mode, so every key (Ctrl-C, Ctrl-D, arrows) goes to the remote shell as it
would to a local one; its size is sent at the start and on every SIGWINCH. Binary frames are terminal bytes
both ways; text frames are JSON: `{"resize": [ROWS, COLS]}` out, `{"exit": CODE}` in, once the shell ended.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import sys
import termios
import threading
import tty
from collections.abc import Callable
from typing import Any

__all__ = ["attach"]

#: How often, until the shell is heard from, whether its job still runs is asked.
WAIT_CHECK_S = 3.0


def attach(server: str, token: str | None, job_id: int, running: Callable[[], bool]) -> int | None:
    """Run the shell of job `job_id` in this terminal until it ends; its exit code (None: not told, or the
    server refused the connection: the job ended meanwhile). Until the shell's first output, `running()` is asked
    every few seconds: a job that ended without ever connecting (its relay could not start) ends the wait."""
    from websockets.exceptions import WebSocketException
    from websockets.sync.client import connect

    url = server.rstrip("/").replace("http://", "ws://", 1).replace("https://", "wss://", 1)
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    try:
        ws = connect(f"{url}/api/v1/jobs/{job_id}/shell", additional_headers=headers, max_size=2**22,
                     open_timeout=30, ping_interval=20)
    except (OSError, WebSocketException, TimeoutError):
        return None
    with ws:
        ended: dict[str, int | None] = {"code": None}
        heard = threading.Event()
        reader = threading.Thread(target=_print_output, args=(ws, ended, heard), daemon=True)
        reader.start()
        while not heard.wait(WAIT_CHECK_S):
            if not running():
                return None
        with _raw_terminal(ws):
            _send_input(ws, reader)
        reader.join(timeout=5)
        return ended["code"]


def _print_output(ws: Any, ended: dict[str, int | None], heard: threading.Event) -> None:
    out = sys.stdout.fileno()
    with contextlib.suppress(Exception):  # the connection closing ends the loop
        for message in ws:
            heard.set()
            if isinstance(message, bytes):
                os.write(out, message)
            else:
                with contextlib.suppress(ValueError, TypeError, KeyError):
                    ended["code"] = int(json.loads(message)["exit"])
    heard.set()  # closed: nothing more will come


def _send_input(ws: Any, reader: threading.Thread) -> None:
    """Send what is typed until the shell's side closes; stdin at its end stops only the typing."""
    fd = sys.stdin.fileno()
    open_input = True
    while reader.is_alive():
        if not open_input:
            reader.join(0.1)
            continue
        ready, _, _ = select.select([fd], [], [], 0.1)
        if not ready:
            continue
        data = os.read(fd, 4096)
        if not data:
            open_input = False
            continue
        with contextlib.suppress(Exception):
            ws.send(data)


@contextlib.contextmanager
def _raw_terminal(ws: Any) -> Any:
    """This terminal in raw mode with its size sent now and on every change; restored afterwards."""
    fd = sys.stdin.fileno()
    if not os.isatty(fd):
        yield
        return
    saved = termios.tcgetattr(fd)

    def send_size(*_: object) -> None:
        with contextlib.suppress(Exception):
            size = os.get_terminal_size(fd)
            ws.send(json.dumps({"resize": [size.lines, size.columns]}))

    previous = signal.signal(signal.SIGWINCH, send_size)
    try:
        tty.setraw(fd, termios.TCSANOW)  # keep what was typed ahead
        send_size()
        yield
    finally:
        termios.tcsetattr(fd, termios.TCSADRAIN, saved)
        signal.signal(signal.SIGWINCH, previous)
