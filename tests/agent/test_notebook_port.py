"""The port a notebook is told to take stays its own until JupyterLab binds it, on a busy node too."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap

import pytest

#: Run in a network namespace of its own, where the kernel has four ports to give out: take a notebook's port, then
#: open outgoing connections until none is left, then bind the port as JupyterLab does (SO_REUSEADDR, listen).
PROBE = textwrap.dedent("""
    import json, socket, subprocess
    from nanum.agent.sessions import free_port
    subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
    with open("/proc/sys/net/ipv4/ip_local_port_range", "w") as ports:  # this namespace's own
        ports.write("40000 40003")
    port = free_port("127.0.0.1")
    server = socket.create_server(("127.0.0.1", 9000), backlog=16)
    outgoing = []
    for _ in range(4):
        try:
            outgoing.append(socket.create_connection(("127.0.0.1", 9000)))
        except OSError:
            break
    taken = [c.getsockname()[1] for c in outgoing]
    jupyter = socket.socket()
    jupyter.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        jupyter.bind(("127.0.0.1", port))
        jupyter.listen()
        bound = "bound"
    except OSError as exc:
        bound = exc.strerror
    print(json.dumps({"port": port, "taken": taken, "bound": bound}))
""")


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("unshare") is None or shutil.which("ip") is None,
                    reason="needs root, unshare(1) and ip(8) for a network namespace of its own")
def test_outgoing_connections_never_take_a_notebooks_port_before_jupyterlab_binds_it() -> None:
    done = subprocess.run(["unshare", "--net", sys.executable, "-c", PROBE], capture_output=True, text=True,
                          timeout=30, check=True)
    seen = json.loads(done.stdout)
    assert len(seen["taken"]) >= 2, "the node made outgoing connections"
    assert seen["port"] not in seen["taken"]
    assert seen["bound"] == "bound"
