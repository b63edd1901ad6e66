"""A real nanum on this machine for end-to-end tests: `nanum up` in a private home on a free port, and the
real `nanum` command run as a subprocess by the users the tests create."""

from __future__ import annotations

import contextlib
import json
import os
import pwd
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.accounts import unix_account
from tests.ports import free_port

JOB_ACCOUNT = "nanum-e2e"


def nanum_command() -> list[str]:
    exe = Path(sys.executable).with_name("nanum")
    return [str(exe)] if exe.exists() else [sys.executable, "-c", "from nanum.cli import main; main()"]


def job_account() -> str:
    """The Unix account test jobs run as: never root. As root, a dedicated account is created once."""
    if os.geteuid() != 0:
        return pwd.getpwuid(os.geteuid()).pw_name
    return unix_account(JOB_ACCOUNT, home=True).pw_name


def shared_dir(prefix: str) -> Path:
    """A directory every account can write (jobs run as another user than the test)."""
    path = Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp"))
    path.chmod(0o1777)
    return path


@dataclass
class Cluster:
    """One `nanum up` process (server, scheduler and local agent) with simulated GPUs, or the machine's own
    (`gpus=None`: found through NVML)."""

    root: Path
    gpus: str | None = "4"
    port: int = field(default_factory=free_port)
    proc: subprocess.Popen[bytes] | None = None
    admin_token: str = ""
    tokens: dict[str, str] = field(default_factory=dict)
    starts: int = 0
    #: Environment of `nanum up` and its agent beyond the usual, e.g. NANUM_SAMPLE_INTERVAL.
    extra_env: dict[str, str] = field(default_factory=dict)
    #: More options for `nanum up`, e.g. a directory's --ldap-url.
    extra_args: list[str] = field(default_factory=list)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def home(self) -> Path:
        return self.root / "home"

    def env(self, token: str | None = None) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("NANUM_")}
        env.update(XDG_CONFIG_HOME=str(self.root / "config"), NANUM_HOME=str(self.home), COLUMNS="100")
        env.update(self.extra_env)
        if token is not None:
            env.update(NANUM_SERVER=self.url, NANUM_TOKEN=token)
        return env

    def start(self, timeout: float = 60.0) -> None:
        """Start (or restart) `nanum up` and wait until it answers."""
        self.starts += 1
        with (self.root / f"up-{self.starts}.log").open("wb") as log:
            self.proc = subprocess.Popen(
                [*nanum_command(), "up", "--home", str(self.home), "--port", str(self.port),
                 *(["--simulate-gpus", self.gpus] if self.gpus is not None else []), *self.extra_args],
                env=self.env(), stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
            )
        deadline = time.monotonic() + timeout
        while not self._healthy():
            if self.proc.poll() is not None:
                raise RuntimeError(f"`nanum up` exited with {self.proc.returncode}:\n{self.log_tail()}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"`nanum up` did not answer within {timeout} s:\n{self.log_tail()}")
            time.sleep(0.1)
        self.admin_token = (self.home / "admin-token").read_text().strip()
        self.wait_for_gpus()

    def wait_for_gpus(self, timeout: float = 30.0) -> None:
        """Until the local agent has reported its node as up."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            nodes = self.api("GET", "/nodes")
            if any(n["state"] == "up" and n["gpus"] for n in nodes):
                return
            time.sleep(0.1)
        raise RuntimeError(f"no node came up within {timeout} s:\n{self.log_tail()}")

    def kill(self, sig: int = signal.SIGKILL) -> None:
        """Signal the `nanum up` process itself (jobs live in their own sessions and survive it)."""
        assert self.proc is not None
        self.proc.send_signal(sig)
        self.proc.wait(timeout=30)

    def agent_pids(self) -> list[int]:
        """The local agents serving this cluster's home: `nanum up`'s child, or one orphaned by a kill -9."""
        pids = []
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                try:
                    argv = (entry / "cmdline").read_bytes().split(b"\0")
                except OSError:
                    continue
                if b"agent" in argv and any(a.startswith(str(self.home).encode()) for a in argv):
                    pids.append(int(entry.name))
        return pids

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self._cancel_everything()
            self.kill(signal.SIGTERM)
        for pid in self.agent_pids():  # an agent left behind when `nanum up` was killed
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)

    def _cancel_everything(self) -> None:
        try:
            for job in self.api("GET", "/jobs"):
                self.api("POST", f"/jobs/{job['id']}/cancel", ok=(200, 409))
            deadline = time.monotonic() + 15
            while self.api("GET", "/jobs", query="state=running") and time.monotonic() < deadline:
                time.sleep(0.2)
        except OSError:
            pass

    def log_tail(self, lines: int = 40) -> str:
        logs = sorted(self.root.glob("up-*.log"))
        return "\n".join(logs[-1].read_text(errors="replace").splitlines()[-lines:]) if logs else ""

    def _healthy(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.url}/api/v1/health", timeout=1) as r:
                return bool(r.status == 200)
        except OSError:
            return False

    def api(self, method: str, path: str, body: Any = None, query: str = "", token: str | None = None,
            ok: tuple[int, ...] = (200, 201)) -> Any:
        """A direct API call (for setup and inspection; the behaviour under test goes through `nanum`)."""
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(f"{self.url}/api/v1{path}" + (f"?{query}" if query else ""), data=data,
                                     method=method, headers={"Authorization": f"Bearer {token or self.admin_token}",
                                                             "Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=10) as r:
                return json.loads(r.read() or b"null")
        except urllib.error.HTTPError as err:
            if err.code in ok:
                return None
            raise

    def nanum(self, *args: str, user: str = "admin", cwd: Path | None = None,
              timeout: float = 60) -> subprocess.CompletedProcess[str]:
        """Run the real `nanum ARGS` as one of the cluster's users."""
        token = self.admin_token if user == "admin" else self.tokens[user]
        return subprocess.run([*nanum_command(), *args], env=self.env(token), cwd=cwd, capture_output=True,
                              text=True, timeout=timeout)

    def add_user(self, name: str, unix_user: str, *labs: str) -> None:
        args = ["user", "add", name, "--unix-user", unix_user]
        for lab in labs:
            args += ["--lab", lab]
        result = self.nanum(*args)
        assert result.returncode == 0, result.stderr
        self.tokens[name] = result.stdout.strip()

    def submit(self, user: str, *args: str, cwd: Path | None = None) -> int:
        """`nanum submit --json ARGS` as `user`; the new job's id."""
        result = self.nanum("submit", "--json", *args, user=user, cwd=cwd)
        assert result.returncode == 0, f"submit failed: {result.stderr}"
        return int(json.loads(result.stdout)["id"])

    def job(self, job_id: int) -> dict[str, Any]:
        result = self.nanum("show", "--json", str(job_id))
        assert result.returncode == 0, result.stderr
        return dict(json.loads(result.stdout))

    def wait_state(self, job_id: int, *states: str, timeout: float = 30) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            job = self.api("GET", f"/jobs/{job_id}")
            if job["state"] in states:
                return dict(job)
            if time.monotonic() > deadline:
                runs = f"run {job['runs']}, preempted {job['preemptions']} times"
                raise AssertionError(f"job {job_id} is {job['state']} ({runs}), not {states}, after {timeout} s")
            time.sleep(0.05)


def remove(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)


# -- a server and separate agents, each its own process ---------------------------------------------------------


@dataclass
class ServerProc:
    """`nanum server ARGS` on `host`:`port` (SQLite in `root/home`), for tests that kill, freeze or cut off its
    parts one at a time."""

    root: Path
    args: tuple[str, ...] = ()
    host: str = "127.0.0.1"
    port: int = field(default_factory=free_port)
    proc: subprocess.Popen[bytes] | None = None
    admin_token: str = ""
    starts: int = 0

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def home(self) -> Path:
        return self.root / "home"

    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("NANUM_")}
        env.update(XDG_CONFIG_HOME=str(self.root / "config"), NANUM_HOME=str(self.home))
        return env

    def start(self, timeout: float = 60.0) -> None:
        self.starts += 1
        self.root.mkdir(parents=True, exist_ok=True)
        with (self.root / f"server-{self.starts}.log").open("wb") as log:
            self.proc = subprocess.Popen(
                [*nanum_command(), "server", "--home", str(self.home), "--host", self.host, "--port", str(self.port),
                 *self.args],
                env=self.env(), stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
            )
        deadline = time.monotonic() + timeout
        while not self.healthy():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"`nanum server` did not come up:\n{self.log_tail()}")
            time.sleep(0.05)
        self.admin_token = (self.home / "admin-token").read_text().strip()

    def healthy(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.url}/api/v1/health", timeout=1) as r:
                return bool(r.status == 200)
        except OSError:
            return False

    def kill(self, sig: int = signal.SIGKILL) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(sig)
            self.proc.wait(timeout=30)

    def log_tail(self, lines: int = 40) -> str:
        path = self.root / f"server-{self.starts}.log"
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:]) if path.exists() else ""

    def api(self, method: str, path: str, body: Any = None, token: str | None = None, timeout: float = 10) -> Any:
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(f"{self.url}/api/v1{path}", data=data, method=method,
                                     headers={"Authorization": f"Bearer {token or self.admin_token}",
                                              "Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return json.loads(r.read() or b"null")


@dataclass
class AgentProc:
    """`nanum agent` for one node with simulated GPUs, optionally inside a network namespace (`netns`)."""

    name: str
    server_url: str
    token: str
    root: Path
    gpus: str = "1"
    netns: str | None = None
    proc: subprocess.Popen[bytes] | None = None
    #: More `nanum agent` options, e.g. ("--hostname", "10.0.0.2").
    args: tuple[str, ...] = ()
    starts: int = 0

    @property
    def state_dir(self) -> Path:
        return self.root / f"agent-{self.name}"

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def start(self) -> None:
        self.starts += 1
        env = {k: v for k, v in os.environ.items() if not k.startswith("NANUM_")}
        env["NANUM_NODE_TOKEN"] = self.token
        argv = [*nanum_command(), "agent", "--server", self.server_url, "--name", self.name, "--simulate-gpus",
                self.gpus, "--state-dir", str(self.state_dir), "--sample-interval", "0", *self.args]
        if self.netns:
            argv = ["ip", "netns", "exec", self.netns, *argv]
        with (self.root / f"agent-{self.name}-{self.starts}.log").open("wb") as log:
            self.proc = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)

    def signal(self, sig: int) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(sig)

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
            self.proc.kill()
            self.proc.wait(timeout=30)

    def stop(self) -> None:
        """SIGTERM (the agent leaves its jobs running), then SIGKILL if it lingers."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
            self.proc.terminate()
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.kill()

    def log_text(self) -> str:
        return "\n".join(p.read_text(errors="replace") for p in sorted(self.root.glob(f"agent-{self.name}-*.log")))


def process_alive(pid: int) -> bool:
    """Whether `pid` runs (a zombie does not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2] not in "ZXx"


def kill_job_processes(state_dir: Path) -> None:
    """SIGKILL the processes of every job an agent's state directory records, as the machine's end would: each
    job's process group, and what its processes started outside it (torchrun's workers lead sessions of their own),
    found by the variable every job process inherits that names a file in that directory."""
    for record in state_dir.glob("jobs/*/job.json"):
        with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
            pid = int(json.loads(record.read_text())["pid"])
            if process_alive(pid):
                os.killpg(pid, signal.SIGKILL)
    marker = f"NANUM_PREEMPT_FILE={state_dir / 'jobs'}/".encode()
    for entry in Path("/proc").iterdir():
        with contextlib.suppress(OSError, ValueError):
            if entry.name.isdigit() and marker in (entry / "environ").read_bytes():
                os.kill(int(entry.name), signal.SIGKILL)


def wait_until(what: str, check: object, timeout: float, *why: object) -> None:
    """Until `check()` is true; fails naming `what` and showing `why` (log tails) after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not (callable(check) and check()):
        assert time.monotonic() < deadline, f"not {what} within {timeout} s: {why}"
        time.sleep(0.1)


def submit_many(servers: str, token: str, workdir: Path, count: int, command: list[str]) -> list[int]:
    """`nanum submit --gpus 1 -- COMMAND` `count` times as a user would, with `servers` in NANUM_SERVER; the ids."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("NANUM_")}
    env.update(NANUM_SERVER=servers, NANUM_TOKEN=token, XDG_CONFIG_HOME=str(workdir / ".config"))
    ids = []
    for _ in range(count):
        done = subprocess.run([*nanum_command(), "submit", "--gpus", "1", "--workdir", str(workdir), "--", *command],
                              env=env, capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        ids.append(int(done.stdout.split()[2]))  # "Submitted job 12"
    return ids
