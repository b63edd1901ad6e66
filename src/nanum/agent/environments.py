"""Running a job in its environment: a Python environment or setup line on the host, or a container image.

On the host (`host_command`) a Python environment's bin/ goes first on PATH with VIRTUAL_ENV (or CONDA_PREFIX,
for a conda prefix) set, each dataset's path is in `NANUM_DATASET_<NAME>`, and a setup line runs in the job's
shell, as its user, before the command: the command becomes `/bin/sh -c 'SETUP; exec "$@"' nanum-setup CMD...`.

In a container (`container_command`) the agent starts the runtime (Podman or Docker) itself, as root where it
runs as root: rootless Podman would need subordinate uid ranges and a per-user image store on every node. What
the user controls never reaches a root process as anything but data:

- the job runs as its owner inside (`--user UID:GID` and their groups), with every capability dropped and
  `no-new-privileges`, so it gains nothing the account does not have;
- its variables go in an `--env-file` (0600, root's), never on a command line or through the runtime's own
  environment, which is the agent's (PATH and the runtime's configuration variables alone);
- its working directory is entered and resolved as its user first (`env -C DIR pwd -P` through setpriv), so a
  directory the user may not reach is refused as on the host, and the resolved path, without links, is mounted;
- the image reference was checked when the environment was added (no option can hide in it), and the command
  comes after it, where the runtime passes it to the container unread.

The working directory and checkpoint directory are mounted at their own paths, the job's agent files (its
preempt and activity files) too, and each dataset read-only at `/datasets/NAME`. GPUs are passed with CDI
(`--device nvidia.com/gpu=N`, Podman) or `--gpus device=N` (Docker), and CUDA_VISIBLE_DEVICES counts them from 0
as the container sees them; simulated GPUs pass nothing. Where the node enforces limits, the job's --cpus and
--mem become the container's own (`Containers.limits`). A stopped job's SIGTERM is sent through the runtime
(`podman kill --signal TERM NAME`, `terminate_container`) to the container's init (`--init`), which passes it on:
a SIGTERM to the runtime's own process could arrive before it forwards signals, and it then exits 0, leaving the
job unwarned. After the grace the runtime's process is killed and the container removed.
The runtime's configuration comes from the agent's environment (CONTAINERS_CONF, CONTAINERS_STORAGE_CONF,
DOCKER_HOST, ...), so an operator points every job at one store.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from nanum.agent.accounts import Account, Refused
from nanum.agent.sessions import RELAY_VARS
from nanum.protocol import JobLaunch

__all__ = [
    "Containers", "container_command", "container_ended", "container_name", "container_sessions", "find_runtimes",
    "host_command", "in_container", "present_paths", "runtime_env", "terminate_container",
]

RUNTIMES = ("podman", "docker")
#: The agent's variables the runtime may read (its configuration), passed on to it and nothing else.
RUNTIME_VARS = ("CONTAINERS_CONF", "CONTAINERS_STORAGE_CONF", "CONTAINERS_REGISTRIES_CONF", "REGISTRY_AUTH_FILE",
                "DOCKER_HOST", "DOCKER_CONFIG", "XDG_RUNTIME_DIR", "XDG_CONFIG_HOME", "XDG_DATA_HOME", "HOME", "TMPDIR")
RUNTIME_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
#: Variables of the host's login that mean nothing in an image.
HOST_ONLY = ("PATH", "SHELL", "HOME")
PROBE_TIMEOUT_S = 20.0
#: The exit status with which podman and docker say that they could not run a container.
RUNTIME_FAILED = 125


@dataclass(frozen=True, slots=True)
class Containers:
    """The container runtimes of this node (name -> executable), whether its GPUs are simulated, and whether
    containers get the job's CPU and memory limits."""

    runtimes: Mapping[str, str] = field(default_factory=dict)
    simulated_gpus: bool = False
    #: Whether the node holds jobs to their --cpus and --mem; a container then gets them as its own limits.
    limits: bool = False

    def pick(self, launch: JobLaunch, node: str) -> tuple[str, str]:
        """(name, executable) of the runtime for `launch`, or `Refused` saying what the node lacks."""
        spec = launch.environment_spec
        wanted = spec.runtime if spec is not None else None
        for name in (wanted,) if wanted else RUNTIMES:
            if name in self.runtimes:
                return name, self.runtimes[name]
        what = wanted or "a container runtime (podman or docker)"
        raise Refused(f"node {node} has no {what} for environment {launch.environment}")


def runtime_env() -> dict[str, str]:
    env = {k: os.environ[k] for k in RUNTIME_VARS if k in os.environ}
    env["PATH"] = RUNTIME_PATH
    return env


def find_runtimes(choice: str | None = None) -> dict[str, str]:
    """The runtimes that answer here. `choice`: `podman`, `docker`, a path to either, or `none`; None: both."""
    if choice == "none":
        return {}
    if choice is None:
        candidates = [(name, shutil.which(name, path=RUNTIME_PATH)) for name in RUNTIMES]
    else:
        exe = choice if "/" in choice else shutil.which(choice, path=RUNTIME_PATH)
        name = Path(choice).name
        candidates = [("docker" if "docker" in name else "podman", exe)]
    found = {}
    for name, exe in candidates:
        if exe and _answers(exe):
            found[name] = exe
    return found


def _answers(exe: str) -> bool:
    try:
        done = subprocess.run([exe, "version"], env=runtime_env(), capture_output=True, timeout=PROBE_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


def present_paths(paths: Sequence[str]) -> list[str]:
    """Those of `paths` that exist on this node (as the agent sees them)."""
    return [p for p in paths if os.path.exists(p)]


def dataset_variable(name: str) -> str:
    return "NANUM_DATASET_" + re.sub(r"[^A-Za-z0-9]", "_", name).upper()


# -- on the host ----------------------------------------------------------------------------------------------


def host_command(launch: JobLaunch, env: dict[str, str], node: str) -> list[str]:
    """Set up `env` for the job's Python environment and datasets; its command, behind its setup line if any."""
    _check_datasets(launch, node)
    env.update({dataset_variable(name): path for name, path in launch.datasets.items()})
    spec = launch.environment_spec
    if spec is None:
        return list(launch.command)
    if spec.python:
        if not os.path.isdir(spec.python):
            raise Refused(f"python environment {spec.python} is not on node {node}")
        env["PATH"] = f"{spec.python}/bin:{env.get('PATH', '')}".rstrip(":")
        conda = os.path.isdir(os.path.join(spec.python, "conda-meta"))
        env["CONDA_PREFIX" if conda else "VIRTUAL_ENV"] = spec.python
    return _behind_setup(spec.setup, launch.command)


def _behind_setup(setup: str | None, command: Sequence[str]) -> list[str]:
    if not setup:
        return list(command)
    return ["/bin/sh", "-c", f'{setup}\nexec "$@"', "nanum-setup", *command]


def _check_datasets(launch: JobLaunch, node: str) -> None:
    for name, path in launch.datasets.items():
        if not os.path.exists(path):
            raise Refused(f"dataset {name} ({path}) is not on node {node}")


# -- in a container -------------------------------------------------------------------------------------------


def container_command(
    launch: JobLaunch, env: Mapping[str, str], account: Account, containers: Containers, *, node: str,
    env_file: Path, setpriv: str | None,
) -> list[str]:
    """The runtime's command line that runs the job in its image as `account`; writes its `env_file` (0600)."""
    spec = launch.environment_spec
    assert spec is not None and spec.image
    name, exe = containers.pick(launch, node)
    _check_datasets(launch, node)
    _check_image(exe, spec.image, launch.environment, node)
    workdir = resolve_as(account, launch.workdir, setpriv)
    inside = {k: v for k, v in env.items() if k not in HOST_ONLY and k not in RELAY_VARS}
    inside["HOME"] = workdir
    inside.update({dataset_variable(d): f"/datasets/{d}" for d in launch.datasets})
    if not containers.simulated_gpus:
        inside["CUDA_VISIBLE_DEVICES"] = ",".join(str(i) for i in range(len(launch.gpus)))
    _write_env_file(env_file, inside)
    argv = [exe, "run", "--rm", "--name", container_name(launch), "--init", "--user", f"{account.uid}:{account.gid}"]
    argv += [f"--group-add={g}" for g in account.groups if g != account.gid]
    argv += ["--cap-drop=all", "--security-opt", "no-new-privileges", "--network", "host", "--pull", "never"]
    argv += ["--env-file", str(env_file), "--workdir", workdir]
    mounts = [workdir, *([launch.checkpoint_dir] if launch.checkpoint_dir else []), str(env_file.parent)]
    argv += [a for path in mounts for a in ("-v", f"{path}:{path}")]
    argv += [a for d, path in launch.datasets.items() for a in ("-v", f"{path}:/datasets/{d}:ro")]
    argv += _gpu_options(name, launch.gpus, containers.simulated_gpus)
    argv += _limit_options(launch) if containers.limits else []
    argv += ["--interactive", "--tty"] if launch.kind == "shell" else []  # on the relay's terminal
    return [*argv, spec.image, *_behind_setup(spec.setup, launch.command)]


def in_container(launch: JobLaunch) -> bool:
    return launch.environment_spec is not None and bool(launch.environment_spec.image)


def container_name(launch: JobLaunch) -> str:
    return f"nanum-job-{launch.job_id}-{launch.run}"


def container_ended(launch: JobLaunch, containers: Containers, node: str, exit_code: int | None) -> str | None:
    """Remove the container its killed runtime may have left (in a thread of its own); why it did not run, if the
    runtime says it could not (exit status 125)."""
    with contextlib.suppress(Refused):
        _, exe = containers.pick(launch, node)
        threading.Thread(target=_remove, args=(exe, launch), name="nanum-container-rm", daemon=True).start()
    if exit_code == RUNTIME_FAILED and launch.environment_spec is not None:
        return f"the container runtime could not run image {launch.environment_spec.image}; the job's log says why"
    return None


def terminate_container(launch: JobLaunch, containers: Containers, node: str, until: float,
                        running: Callable[[], bool]) -> None:
    """SIGTERM the job's container through its runtime, in a thread of its own: trying again while the runtime
    is still creating it, until it takes the signal, `running()` turns false, or `until` (time.time()) passes."""
    try:
        _, exe = containers.pick(launch, node)
    except Refused:
        return

    def send() -> None:
        while running() and time.time() < until:
            with contextlib.suppress(OSError, subprocess.TimeoutExpired):
                done = subprocess.run([exe, "kill", "--signal", "TERM", container_name(launch)], env=runtime_env(),
                                      capture_output=True, timeout=30)
                if done.returncode == 0:
                    return
            time.sleep(0.2)

    threading.Thread(target=send, name="nanum-container-term", daemon=True).start()


def _remove(exe: str, launch: JobLaunch) -> None:
    with contextlib.suppress(OSError, subprocess.TimeoutExpired):
        subprocess.run([exe, "rm", "-f", container_name(launch)], env=runtime_env(), capture_output=True,
                       timeout=60)


def _limit_options(launch: JobLaunch) -> list[str]:
    """The job's --cpus and --mem as the container's own limits (memory counts swap too, as on the host)."""
    options = [f"--cpus={launch.cpus}"] if launch.cpus else []
    if launch.memory_mb:
        options += [f"--memory={launch.memory_mb}m", f"--memory-swap={launch.memory_mb}m"]
    return options


def container_sessions(names: Mapping[str, int], proc: Path = Path("/proc")) -> dict[int, int]:
    """Session id -> job id for the processes in the jobs' containers (`names`: container name -> job id).

    A Podman container's first process is a child of its `conmon` (root's, naming the container after `-n`) and
    leads a session its processes share, so the monitor counts their CPU and GPU use as the job's, as it does for
    the job's own session. Docker's shim does not name the container: its jobs' container processes are not
    matched (their GPUs are the job's anyway; their processes show as the node's)."""
    monitors: dict[int, int] = {}
    children: list[tuple[int, int, int]] = []  # (pid, parent, session)
    for entry in os.scandir(proc):
        if not entry.name.isdigit():
            continue
        try:
            raw = (proc / entry.name / "stat").read_text()
            fields = raw[raw.rindex(")") + 2 :].split()
            comm = raw[raw.index("(") + 1 : raw.rindex(")")]
            if comm == "conmon" and os.stat(entry.path).st_uid == 0:
                argv = (proc / entry.name / "cmdline").read_bytes().split(b"\0")
                name = argv[argv.index(b"-n") + 1].decode() if b"-n" in argv[:-1] else ""
                if name in names:
                    monitors[int(entry.name)] = names[name]
            else:
                children.append((int(entry.name), int(fields[1]), int(fields[3])))
        except (OSError, ValueError, IndexError):
            continue
    return {session: monitors[parent] for _, parent, session in children if parent in monitors}


def _gpu_options(runtime: str, gpus: Sequence[int], simulated: bool) -> list[str]:
    if simulated or not gpus:
        return []
    if runtime == "docker":  # its --gpus value is CSV: several devices go in double quotes
        return ["--gpus", '"device=' + ",".join(str(i) for i in gpus) + '"']
    return [a for i in gpus for a in ("--device", f"nvidia.com/gpu={i}")]


def _check_image(exe: str, image: str, environment: str | None, node: str) -> None:
    verb = ["image", "exists"] if Path(exe).name.startswith("podman") else ["image", "inspect"]
    try:
        done = subprocess.run([exe, *verb, image], env=runtime_env(), capture_output=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise Refused(f"the container runtime {exe} did not answer on node {node}: {exc}") from None
    if done.returncode != 0:
        raise Refused(f"image {image} of environment {environment} is not on node {node}; pull or load it there "
                      f"(`{Path(exe).name} pull {image}`)")


def resolve_as(account: Account, workdir: str, setpriv: str | None) -> str:
    """`workdir` entered as `account` and resolved without links, or `Refused` as the kernel refuses it."""
    probe = ["/usr/bin/env", "-C", workdir, "/bin/pwd", "-P"]
    if os.geteuid() == 0 and account.uid != 0:
        if setpriv is None:
            raise Refused("running a job in a container as its user needs setpriv (util-linux) on the node")
        groups = ",".join(str(g) for g in account.groups)
        drop = [f"--reuid={account.uid}", f"--regid={account.gid}"]
        probe = [setpriv, *drop, f"--groups={groups}" if groups else "--clear-groups", "--", *probe]
    try:
        done = subprocess.run(probe, env={"PATH": RUNTIME_PATH, "LC_ALL": "C"}, cwd="/", capture_output=True,
                              text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise Refused(f"cannot enter working directory {workdir} as {account.name}: {exc}") from None
    resolved = done.stdout.strip()
    if done.returncode != 0 or not resolved.startswith("/"):
        why = done.stderr.strip().splitlines()[-1] if done.stderr.strip() else "it cannot be entered"
        raise Refused(f"cannot enter working directory {workdir} as {account.name}: {why}")
    if any(c in resolved for c in ":,"):
        raise Refused(f"working directory {resolved} has ':' or ',' in its path, which a container mount cannot name")
    return resolved


def _write_env_file(path: Path, env: Mapping[str, str]) -> None:
    bad = [k for k, v in env.items() if "\n" in v or "\n" in k]
    if bad:
        raise Refused(f"variable {bad[0]} has a line break, which a container's environment file cannot hold")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write("".join(f"{k}={v}\n" for k, v in env.items()))
