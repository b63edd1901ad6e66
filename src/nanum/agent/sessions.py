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

The session Python runs as the job's user, so every user must be able to run it: one under `/root` (a pyenv
install, say) cannot be, and a shell or notebook would end at once with exit code 126. An agent running as root
whose own Python is such (and that was given no `NANUM_SESSION_PYTHON`) makes one when it starts
(`make_session_python`): a venv of the system's Python of the same version, in its state directory, that reads
the agent's own packages. Where it cannot, it says why (`session_python_problem`), and such a job fails to start
with that sentence (`refuse_unrunnable`).
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import logging
import os
import shutil
import socket
import stat
import subprocess
import sys
import sysconfig
import tempfile
from collections.abc import Sequence
from pathlib import Path

from nanum.agent.accounts import Refused
from nanum.protocol import JobLaunch

__all__ = ["NOTEBOOK_ADDRESS", "RELAY_VARS", "prepared", "refuse_unrunnable", "relayed", "session_python_problem"]

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
#: The system's Pythons a session Python may be made of (`make_session_python`), the version's own first.
SYSTEM_PYTHONS = ("/usr/bin/python{v}", "/usr/local/bin/python{v}", "/usr/bin/python3", "/usr/local/bin/python3")
#: The file of a made session Python that adds the agent's packages to it.
_PACKAGES_PTH = "nanum-agent-packages.pth"
#: Where a session Python is made when other users cannot enter the agent's state directory.
SHARED_PLACE = Path("/var/lib/nanum")

log = logging.getLogger("nanum.agent")
_made: str | None = None  # the session Python `make_session_python` made, if it did


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
    return os.environ.get(SESSION_PYTHON) or _made or sys.executable


def make_session_python(state_dir: Path, own: str = sys.executable, systems: Sequence[str] = SYSTEM_PYTHONS,
                        packages: Sequence[str] | None = None, elsewhere: Path = SHARED_PLACE) -> str | None:
    """Where the agent's own Python (`own`) cannot run as other users and it was given no `NANUM_SESSION_PYTHON`,
    make one that can, and use it from now on: a venv of a system Python of the same version that every user may
    run (the first of `systems`), with a `.pth` file that adds the agent's packages (`packages`: its site
    directories), each of which every user may read. Made in `state_dir/session-python`, or where others cannot
    enter the state directory (a home under /root), in `elsewhere/session-python-HASH` (HASH: of the packages' places,
    so that agents of different installations on one machine keep theirs apart); kept while it reads the same
    packages. Returns what was made, or None (not needed, or not possible: `session_python_problem` then says
    why)."""
    global _made
    if os.environ.get(SESSION_PYTHON) or unrunnable(own) is None:
        return None
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    system = next((p for p in (s.format(v=version) for s in systems)
                   if os.path.exists(p) and unrunnable(p) is None and _version(p) == version), None)
    dirs = [d for d in (packages if packages is not None else _site_dirs()) if os.path.isdir(d)]
    if system is None or not dirs or any(unrunnable(d) is not None for d in dirs):
        return None  # no such Python, or packages others cannot read
    lines = "".join(f"import site; site.addsitedir({d!r})\n" for d in dirs)
    if unrunnable(str(state_dir)) is None:
        venv = state_dir / "session-python"
    else:
        venv = elsewhere / f"session-python-{hashlib.sha256(lines.encode()).hexdigest()[:12]}"
    try:
        ready = _reads(venv, version, lines) or _build(system, venv, version, lines)
    except OSError as exc:  # a state directory on a read-only file system, say: shells then say why they cannot run
        log.warning("could not make a Python for shells and notebooks in %s: %s", venv.parent, exc)
        ready = False
    if ready:
        _made = str(venv / "bin" / "python")
        log.info("shells and notebooks run with %s (%s with this agent's packages): %s", _made, system,
                 unrunnable(own))
    return _made


def _reads(venv: Path, version: str, lines: str) -> bool:
    """Whether `venv` is a session Python of `version` that reads the packages `lines` adds, made by this agent's
    user and changeable by no one else (in a state directory others may write to, one of theirs would run every
    other user's shells)."""
    site = venv / "lib" / f"python{version}" / "site-packages"
    if not all(_ours(path) for path in (venv, venv / "bin", venv / "lib", site.parent, site, site / _PACKAGES_PTH)):
        return False
    try:
        pth = (site / _PACKAGES_PTH).read_text()
    except OSError:
        return False
    return pth == lines and _version(str(venv / "bin" / "python")) == version


def _ours(path: Path) -> bool:
    """Whether `path` is no link, belongs to this process's user, and no one else may change it."""
    try:
        found = os.lstat(path)
    except OSError:
        return False
    return not stat.S_ISLNK(found.st_mode) and found.st_uid == os.geteuid() and not found.st_mode & 0o022


def _build(system: str, venv: Path, version: str, lines: str) -> bool:
    """Make `venv` of `system` with `lines` as its `.pth`: built beside it and moved into place, so that agents
    starting together (or a shell running one made before) never see half of one."""
    venv.parent.mkdir(parents=True, exist_ok=True)
    building = Path(tempfile.mkdtemp(prefix=".session-python-", dir=venv.parent))
    try:
        building.chmod(0o755)
        made = subprocess.run([system, "-I", "-m", "venv", "--without-pip", str(building)], capture_output=True,
                              text=True, cwd="/")
        if made.returncode != 0:
            log.warning("could not make a Python for shells and notebooks from %s: %s", system, made.stderr.strip())
            return False
        (building / "lib" / f"python{version}" / "site-packages" / _PACKAGES_PTH).write_text(lines)
        share = Path(sys.prefix) / "share"  # JupyterLab's own files (its themes and extensions)
        if share.is_dir():
            (building / "share").symlink_to(share)
        if venv.exists() and not _reads(venv, version, lines):
            if venv.is_symlink():  # not one this agent made: set aside, never followed
                venv.unlink()
            shutil.rmtree(venv, ignore_errors=True)  # one that reads packages no longer there
        with contextlib.suppress(OSError):  # another agent's, moved in first, is as good
            building.rename(venv)
        return _reads(venv, version, lines)
    finally:
        shutil.rmtree(building, ignore_errors=True)


def _version(python: str) -> str | None:
    """The `X.Y` version of the Python at `python`, or None where it does not run. Isolated (`-I`) and from `/`:
    the agent is root here, and no module of the directory it was started in or of `PYTHON*` variables runs."""
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        found = subprocess.run([python, "-I", "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                               capture_output=True, text=True, timeout=30, cwd="/")
        return found.stdout.strip() if found.returncode == 0 else None
    return None


def _site_dirs() -> list[str]:
    """The directories the agent's packages are installed in (a venv's, or the installation's)."""
    paths = sysconfig.get_paths()
    return list(dict.fromkeys((paths["purelib"], paths["platlib"])))


def session_python_problem() -> str | None:
    """Why the session Python cannot run as another user (`unrunnable`), as a sentence saying what to do; None
    where it can."""
    python = session_python()
    why = unrunnable(python)
    if why is None:
        return None
    return (f"shells and notebooks cannot start on this node: they run {python} as their user, and {why}; set "
            f"{SESSION_PYTHON} in the agent's environment to a Python every user may run, with nanum installed "
            "(docs/interactive.md)")


def unrunnable(program: str) -> str | None:
    """Why a user other than the owner cannot run `program`: a directory on its way (through its links, and to
    what they point at) that others may not enter, or the file itself that they may not run; None where any
    user may."""
    for path in dict.fromkeys((os.path.abspath(program), os.path.realpath(program))):
        parts = path.split("/")
        for depth in range(2, len(parts)):
            where = "/".join(parts[:depth])
            with contextlib.suppress(OSError):
                if os.path.isdir(where) and not os.stat(where).st_mode & stat.S_IXOTH:
                    return f"{where} is closed to other users"
    with contextlib.suppress(OSError):
        if not os.stat(program).st_mode & stat.S_IXOTH:
            return f"{os.path.realpath(program)} may be run by its owner alone"
    return None


def refuse_unrunnable(launch: JobLaunch) -> None:
    """A notebook or shell whose command is the session Python, which the job's user cannot run: `Refused`
    with `session_python_problem`'s sentence, rather than a job that ends at once with exit code 126."""
    if launch.kind in ("notebook", "shell") and launch.command[:1] == [session_python()]:
        problem = session_python_problem()
        if problem is not None:
            raise Refused(problem)


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
