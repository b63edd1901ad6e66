"""A port for a server a test starts (`nanum up`, slapd, an OpenID provider), free when it is chosen."""

from __future__ import annotations

import random
import socket
from pathlib import Path

#: Where chosen ports start: below it, no server the machine runs by default listens.
LOWEST = 10_000


def free_port() -> int:
    """A port nothing listens on at 127.0.0.1, below the kernel's range of ephemeral ports.

    A port the kernel hands out (a bind to port 0) is released when this returns, and until the test's server binds
    it, any outgoing connection of any process may take it as its own end: with tests in parallel, a server then
    failed to start ("port ... is in use"). Below that range, only another test's choice can take it."""
    first = _ephemeral_start()
    for _ in range(200):
        port = random.randrange(LOWEST, first)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        return port
    raise RuntimeError(f"no free port on 127.0.0.1 between {LOWEST} and {first}")


def _ephemeral_start() -> int:
    try:
        first = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        first = 32_768
    return first if first > LOWEST + 1_000 else 32_768
