"""Notebooks and shells on a node: what the agent runs for a launch of kind `notebook` or `shell`.

A notebook is JupyterLab, started as the job's user in its working directory like any job:
`jupyter lab --no-browser --ServerApp.base_url=/notebooks/ID/ --ServerApp.ip=ADDRESS --ServerApp.port=PORT`,
on a port the agent picked free on the node's address (the one it reaches the server from); in a job's
environment (`-E`), the environment's own `jupyter lab`. Its token is the
job's secret from the launch, passed in `JUPYTER_TOKEN` (the environment reaches the job through its exec,
never a command line, where any user could read it), so JupyterLab answers no request without it; the
server holds the same secret and adds it to every request it proxies for the notebook's owner. The address
is reported in the job's status (`NOTEBOOK_ADDRESS`), and `NANUM_JUPYTER_URL` lets the monitor read the
kernel's last activity for the idle rules.

A shell is `python -m nanum.agent.relay` (`session_python()`), which opens a pseudo-terminal running
the user's login shell and dials out to the server over a websocket, showing the job's secret; the server
pairs it with the owner's `nanum shell`; in a Python environment or behind a setup line, the shell starts in it.
In a container image the relay runs as the agent (as the runtime does for any container job) and what it runs on
its terminal is the runtime's `run --interactive --tty ... IMAGE /bin/sh -l` (`relayed`): the shell runs inside,
as the job's user, like any container job. Nodes need no port open to users.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import socket
import sys

from nanum.protocol import JobLaunch

__all__ = ["NOTEBOOK_ADDRESS", "RELAY_VARS", "prepared", "relayed"]

#: The variable of a notebook's launch that holds `HOST:PORT` (reported in its status).
NOTEBOOK_ADDRESS = "NANUM_NOTEBOOK_ADDRESS"
RELAY_URL = "NANUM_RELAY_URL"
RELAY_SECRET = "NANUM_RELAY_SECRET"
SESSION_PYTHON = "NANUM_SESSION_PYTHON"
#: Variables of a shell's launch that are the relay's own (kept out of a container's environment).
RELAY_VARS = (RELAY_URL, RELAY_SECRET)
#: The shell a container image runs for `nanum shell`: a login shell every image has.
CONTAINER_SHELL = ("/bin/sh", "-l")
#: How long the agent tries to connect to a notebook's port on its own address (`free_port`), in seconds.
SELF_CONNECT_S = 1.0


def prepared(launch: JobLaunch, *, address: str, server: str) -> JobLaunch:
    """`launch` with the command (and variables) a notebook or shell runs; other kinds unchanged."""
    if launch.kind == "notebook":
        return _notebook(launch, address)
    if launch.kind == "shell":
        return _shell(launch, server)
    return launch


def _notebook(launch: JobLaunch, address: str) -> JobLaunch:
    port = free_port(address)
    base = f"/notebooks/{launch.job_id}/"
    command = [
        *jupyter_command(launch), "--no-browser", f"--ServerApp.base_url={base}", f"--ServerApp.ip={address}",
        f"--ServerApp.port={port}", "--ServerApp.port_retries=0", "--ServerApp.allow_remote_access=True",
    ]
    host = f"[{address}]" if ":" in address else address
    env = {**launch.env, "JUPYTER_TOKEN": launch.secret, NOTEBOOK_ADDRESS: f"{host}:{port}",
           "NANUM_JUPYTER_URL": f"http://{host}:{port}{base}"}
    return launch.model_copy(update={"command": command, "env": env})


def _shell(launch: JobLaunch, server: str) -> JobLaunch:
    url = server.rstrip("/").replace("http://", "ws://", 1).replace("https://", "wss://", 1)
    env = {**launch.env, RELAY_URL: f"{url}/api/v1/agent/shells/{launch.job_id}", RELAY_SECRET: launch.secret}
    if launch.environment_spec is not None and launch.environment_spec.image:  # the relay is put around it later
        return launch.model_copy(update={"command": list(CONTAINER_SHELL), "env": env})
    return launch.model_copy(update={"command": [session_python(), "-m", "nanum.agent.relay"], "env": env})


def relayed(command: list[str], launch: JobLaunch, runtime_env: dict[str, str]) -> tuple[list[str], dict[str, str]]:
    """A shell in a container image: the relay (as the agent, like the runtime it starts) runs the runtime's
    command on the terminal it owns, `command` being `podman run --interactive --tty ... IMAGE /bin/sh -l`; the
    shell runs inside as the job's user. The relay's variables go to the relay alone, never into the image."""
    env = {**runtime_env, RELAY_URL: launch.env[RELAY_URL], RELAY_SECRET: launch.env[RELAY_SECRET]}
    return [session_python(), "-m", "nanum.agent.relay", "--", *command], env


def session_python() -> str:
    """The Python that notebooks and shell relays run with: `$NANUM_SESSION_PYTHON` where the agent was given
    one (an interpreter every user may run, with nanum and JupyterLab), else the agent's own."""
    return os.environ.get(SESSION_PYTHON) or sys.executable


def jupyter_command(launch: JobLaunch) -> list[str]:
    """`jupyter lab` from the job's environment where it runs in one (a Python environment, a setup line, a
    container image); else JupyterLab from the session Python where it has it, else `jupyter lab` on PATH."""
    if launch.environment_spec is None and (
            os.environ.get(SESSION_PYTHON) or importlib.util.find_spec("jupyterlab") is not None):
        return [session_python(), "-m", "jupyterlab"]
    return ["jupyter", "lab"]


def free_port(address: str) -> int:
    """A TCP port free at `address`, held for JupyterLab, which binds it seconds later.

    A port merely found free could meanwhile become the local end of one of the node's outgoing connections, and
    the notebook would then fail to start (it is told to take this port and no other). So the port is left in
    TIME_WAIT for the kernel's minute: a connection to it is made and closed from its end, and until that minute
    has passed the kernel gives it to no outgoing connection and to no plain bind, while JupyterLab, which binds
    with SO_REUSEADDR as servers do, takes it. The port stays in the kernel's ephemeral range, as before. Where the
    node's firewall keeps it from connecting to its own address, the port is only found free."""
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    with socket.socket(family) as listener:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # so that its TIME_WAIT gives way to Jupyter
        listener.bind((address, 0))
        listener.listen(1)
        listener.settimeout(SELF_CONNECT_S)
        where = listener.getsockname()
        with socket.socket(family) as client, contextlib.suppress(OSError):
            client.settimeout(SELF_CONNECT_S)
            client.connect(where)
            accepted, _ = listener.accept()
            accepted.close()  # the port's end closes first: the TIME_WAIT is on its side
        return int(where[1])


def reach_address(server: str) -> str:
    """This node's address on the route to `server` (what the server can reach it at), 127.0.0.1 if unknown."""
    from urllib.parse import urlsplit

    parts = urlsplit(server)
    try:
        info = socket.getaddrinfo(parts.hostname or "127.0.0.1", parts.port or 80, type=socket.SOCK_DGRAM)[0]
        with socket.socket(info[0], socket.SOCK_DGRAM) as s:
            s.connect(info[4])
            return str(s.getsockname()[0])
    except (OSError, IndexError):
        return "127.0.0.1"
