"""Starting nanum on a machine: `nanum up` (server, scheduler and a local agent) and `nanum server` (server only).

`start` prepares the state directory and database (migrations run on every start), makes sure an admin exists
for the invoking Unix user (token in DIR/admin-token, mode 0600, and in the CLI credentials), then serves the API
with uvicorn. With a local agent it registers this host as a node (token in DIR/node-token) and supervises
`nanum agent` as a child process in its own session, restarting it if it dies. Ctrl-C or SIGTERM stops the
server and the agent; jobs keep running in their own sessions and the next start picks them up again.

With several workers (`nanum server --workers N`, PostgreSQL only), the process binds the port and forks N server
processes that take connections from it, each with its own interpreter: one process is bound to one core by its
interpreter lock. It forks one more that schedules and serves no request: while a server ticks, its own requests
wait (`Database.precedence`), so a request that reached a scheduling worker waited for whole ticks (at 1,000
nodes, the p99 of submissions). They share the database as separate servers do, and wake each other through it
(`nanum.server.bus`). The first process only supervises them: it starts a worker again if one dies, and stops them
all on Ctrl-C or SIGTERM. A worker stops by itself if the first process dies.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import fcntl
import getpass
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import FrameType

import uvicorn
from sqlalchemy import select, update
from sqlalchemy.engine import make_url
from sqlalchemy.exc import SQLAlchemyError

from nanum import eventloop, heap, oom
from nanum.config import load_credentials, save_credentials
from nanum.server.app import create_app
from nanum.server.callers import hash_token, new_token
from nanum.server.context import ServerContext
from nanum.server.metrics import MULTIPROCESS_ENV
from nanum.server.schemas import UserIn
from nanum.server.services import accounts, tokens
from nanum.server.settings import ServerSettings
from nanum.store import Database, NodeRow, TokenRow, UserRow, upgrade
from nanum.store.db import POOL_MAX

log = logging.getLogger("nanum.server")

AGENT_STOP_S = 15.0
#: The most server processes `--workers` starts.
MAX_WORKERS = 64
#: How often a worker looks whether the process that started it is still there.
PARENT_CHECK_S = 1.0


class StartError(Exception):
    """Why nanum cannot start, in one sentence that says what to do."""


@dataclass(frozen=True, slots=True, kw_only=True)
class LocalAgent:
    simulate_gpus: str | None = None


@dataclass(frozen=True, slots=True)
class Started:
    url: str
    admin_token: str
    created_admin: bool


def start(settings: ServerSettings, host: str, port: int, agent: LocalAgent | None, workers: int = 1) -> None:
    """Run until Ctrl-C or SIGTERM. Raises StartError when the port, directory or database is not usable."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s", datefmt="%H:%M:%S")
    logging.getLogger("alembic").setLevel(logging.WARNING)
    if not 1 <= workers <= MAX_WORKERS:
        raise StartError(f"--workers takes 1 to {MAX_WORKERS} server processes, not {workers}")
    if workers > 1 and agent is not None:
        raise StartError("--workers is for `nanum server`; `nanum up` runs one server process beside its agent")
    _check_port(host, port)
    if why := oom.spare_the_service():
        logging.getLogger("nanum.server").info("%s: a machine out of memory may lose its server before a job", why)
    ctx = prepare(settings)
    if workers > 1 and not ctx.db.is_postgres:
        raise StartError("--workers needs PostgreSQL (--db postgresql+psycopg://USER@HOST/DB): with SQLite one "
                         "process writes at a time, so more processes would only wait for each other")
    with _home_lock(settings.home):
        from nanum.server.services.tokens import purge_expired

        purge_expired(ctx, ctx.clock())
        url = f"http://{_connect_host(host)}:{port}"
        started = bootstrap_admin(ctx, url)
        node = bootstrap_node(ctx) if agent is not None else None
        _announce(ctx, url, started, agent, workers)
        if workers > 1:
            ctx.db.dispose()  # each worker opens its own connections
            heap.settle()  # before the forks: the workers share these pages
            Workers(settings, _listening_socket(host, port), workers).run()
            return
        eventloop.run(_serve(ctx, host, port, url, agent, node))


@contextlib.contextmanager
def _home_lock(home: Path) -> Iterator[None]:
    """One nanum per state directory: a second one would run a second agent for the same node."""
    fd = os.open(home / "server.lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            pid = os.pread(fd, 32, 0).decode(errors="replace").strip() or "?"
            raise StartError(
                f"nanum is already running with state directory {home} (pid {pid}); stop it first, or pass --home DIR"
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, str(os.getpid()).encode(), 0)
        yield
    finally:
        os.close(fd)


def prepare(settings: ServerSettings) -> ServerContext:
    """Create the state directory and bring the database schema up to date.

    The directory can be passed through but not listed by others (0711): jobs run as their owners and reach their
    checkpoint directories and the local agent's files under it. What is secret in it is the owner's alone: the
    tokens, the SQLite database (with its WAL) and the job logs (0600/0700)."""
    try:
        settings.home.mkdir(parents=True, exist_ok=True, mode=0o711)
        settings.logs_dir.mkdir(exist_ok=True, mode=0o700)
        settings.checkpoints_dir.mkdir(parents=True, exist_ok=True, mode=0o711)
        if settings.db_url is None:
            os.close(os.open(settings.home / "nanum.db", os.O_RDWR | os.O_CREAT, 0o600))
    except OSError as exc:
        raise StartError(
            f"cannot use {settings.home} as the state directory ({exc.strerror}); pass --home DIR"
        ) from exc
    where = make_url(settings.database_url).render_as_string(hide_password=True)
    try:
        db = Database(settings.database_url)
        upgrade(db)
    except (SQLAlchemyError, OSError) as exc:
        reason = str(getattr(exc, "orig", None) or exc).strip().splitlines()[0]
        raise StartError(f"cannot open the database {where}: {reason}") from exc
    return ServerContext.create(settings, db)


# -- first start ---------------------------------------------------------------------------------------------


def bootstrap_admin(ctx: ServerContext, url: str) -> Started:
    """Keep DIR/admin-token valid: create the admin (the invoking Unix user, lab "default") on first start. A
    home without a valid token (lost, or a second server's home on the same database) gets one more token for
    the admin, named after the home, beside the others: a second server does not cut off the first."""
    path = ctx.settings.home / "admin-token"
    token = _read_secret(path)
    with ctx.db.read() as s:
        digest = hash_token(token) if token is not None else None
        known = digest is not None and (
            s.scalar(select(UserRow.id).where(UserRow.token_hash == digest)) is not None
            or s.scalar(select(TokenRow.id).where(TokenRow.token_hash == digest, TokenRow.expires.is_(None)))
            is not None
        )
        me = getpass.getuser()
        admin_id = s.scalar(select(UserRow.id).where(UserRow.name == me))
    created = False
    if not known:
        token = new_token()
        if admin_id is not None:
            where = f"admin-token {socket.gethostname()}:{ctx.settings.home}"
            token = tokens.create(ctx, admin_id, where[:64], None).token
        else:
            accounts.create_user(ctx, UserIn(name=me, labs=["default"], admin=True, unix_user=me), token)
            created = True
        _write_secret(path, token)
    assert token is not None
    saved = load_credentials()
    if created or not saved or saved.get("token") == token:
        save_credentials(url, token)
    return Started(url, token, created)


def bootstrap_node(ctx: ServerContext) -> tuple[str, str]:
    """Register this host as a node; its token lives in DIR/node-token. Returns (name, token)."""
    name = socket.gethostname().split(".")[0] or "localhost"
    path = ctx.settings.home / "node-token"
    token = _read_secret(path)
    with ctx.db.read() as s:
        row = s.execute(select(NodeRow.name, NodeRow.token_hash).where(NodeRow.name == name)).first()
    if token is None or row is None or row.token_hash != hash_token(token):
        token = accounts.add_node(ctx, name, new_token(), replace=True)
        _write_secret(path, token)
    with ctx.db.write() as s:  # whoever starts `nanum up` is its admin: the local agent's next report is accepted
        s.execute(update(NodeRow).where(NodeRow.name == name).values(accepted_gpus=None, unaccepted_gpus=None))
    return name, token


def _read_secret(path: Path) -> str | None:
    try:
        return path.read_text().strip() or None
    except FileNotFoundError:
        return None


def _write_secret(path: Path, value: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(value + "\n")
    os.chmod(path, 0o600)


# -- serving -------------------------------------------------------------------------------------------------


class _Server(uvicorn.Server):
    """uvicorn, plus: on Ctrl-C/SIGTERM release held heartbeats at once and tell the agent to stop."""

    def __init__(self, config: uvicorn.Config, ctx: ServerContext) -> None:
        super().__init__(config)
        self.ctx = ctx
        self.agent: AgentSupervisor | None = None
        #: a worker of `Workers`: Ctrl-C reaches every process of the terminal's group, and the first process
        #: then sends each worker SIGTERM, which uvicorn would take as a second signal and cut its shutdown short
        self.worker = False

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        if self.worker and sig == signal.SIGINT:
            return
        self.ctx.signals.close()
        if self.agent is not None:
            self.agent.stop()
        super().handle_exit(sig, frame)
        # uvicorn re-raises the signal after shutting down, which would kill us before the agent is reaped and
        # before we say goodbye; we exit normally instead.
        captured = getattr(self, "_captured_signals", None)
        if isinstance(captured, list):
            captured.clear()


async def _serve(
    ctx: ServerContext, host: str, port: int, url: str, agent: LocalAgent | None, node: tuple[str, str] | None,
    *, sock: socket.socket | None = None, parent: int | None = None,
) -> None:
    """Serve until stopped. A worker (`sock`, `parent`) takes connections from its parent's socket, never
    schedules (a process of its own does: `_schedule`), and stops when that parent is gone."""
    app = create_app(ctx, may_lead=parent is None)
    heap.settle()
    config = uvicorn.Config(
        app, host=host, port=port, log_level="warning", access_log=False, timeout_graceful_shutdown=3, lifespan="on"
    )
    server = _Server(config, ctx)
    supervise = None
    if agent is not None and node is not None:
        server.agent = AgentSupervisor(url, node[0], node[1], ctx.settings.home / "agent", agent.simulate_gpus)
        supervise = asyncio.create_task(server.agent.run(lambda: server.started))
    if parent is not None:
        server.worker = True
        supervise = asyncio.create_task(_while_parent(parent, lambda: setattr(server, "should_exit", True)))
    try:
        await server.serve(sockets=[sock] if sock is not None else None)
    finally:
        if server.agent is not None:
            server.agent.stop()
            await asyncio.to_thread(server.agent.wait)
        if supervise is not None:
            supervise.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await supervise
        ctx.db.dispose()
    if parent is None:
        print("nanum stopped; running jobs keep running and are picked up at the next start.", flush=True)


async def _while_parent(parent: int, stop: Callable[[], None]) -> None:
    """Call `stop` once the process that started this one is gone (a worker is never left on its own)."""
    while os.getppid() == parent:
        await asyncio.sleep(PARENT_CHECK_S)
    log.warning("the first nanum server process is gone; this worker stops")
    stop()


async def _schedule(ctx: ServerContext, parent: int) -> None:
    """The scheduling worker: the server's background work (scheduler, bus, upkeep) and no requests, until
    SIGTERM or until `parent` is gone."""
    app = create_app(ctx)
    heap.settle()
    stopped = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stopped.set)
    watch = asyncio.create_task(_while_parent(parent, stopped.set))
    try:
        async with app.router.lifespan_context(app):
            await stopped.wait()
    finally:
        watch.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await watch
        ctx.db.dispose()


class Workers:
    """`count` server processes forked from this one, taking connections from `sock`, and one more that schedules
    (number `count`); this one only supervises."""

    def __init__(self, settings: ServerSettings, sock: socket.socket, count: int) -> None:
        self.settings, self.sock, self.count = settings, sock, count
        self.children: dict[int, int] = {}  # pid -> worker number
        self.stopping = False

    def run(self) -> None:
        signal.signal(signal.SIGTERM, self._stop)
        signal.signal(signal.SIGINT, self._stop)
        shared = self.settings.home / "metrics"  # what the workers observe, for `/metrics` (`nanum.server.metrics`)
        shutil.rmtree(shared, ignore_errors=True)
        shared.mkdir(mode=0o700)
        os.environ[MULTIPROCESS_ENV] = str(shared)
        for number in range(self.count + 1):
            self._fork(number)
        while self.children:
            try:
                pid, status = os.wait()
            except ChildProcessError:
                break
            if pid not in self.children or self.stopping:
                self.children.pop(pid, 0)
                continue
            number = self.children.pop(pid)
            log.warning("server worker %d (pid %d) ended (%s); starting another", number, pid,
                        _exit_text(status))
            time.sleep(1.0)  # a worker that dies at once does not make this spin
            if not self.stopping:
                self._fork(number)
        self.sock.close()
        print("nanum stopped; running jobs keep running and are picked up at the next start.", flush=True)

    def _stop(self, signum: int, frame: FrameType | None) -> None:
        self.stopping = True
        for pid in list(self.children):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)

    def _fork(self, number: int) -> None:
        parent = os.getpid()
        pid = os.fork()
        if pid:
            self.children[pid] = number
            return
        code = 0
        try:  # the worker: nothing of the supervisor's handlers or connections
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            signal.signal(signal.SIGINT, signal.SIG_IGN)  # the first process stops the workers (`_stop`)
            host, port = self.sock.getsockname()[:2]
            if number == self.count:
                self.sock.close()  # at once: the scheduling worker never takes a connection
            ctx = ServerContext.create(self.settings)
            url = f"http://{_connect_host(host)}:{port}"
            if number == self.count:
                eventloop.run(_schedule(ctx, parent))
            else:
                eventloop.run(_serve(ctx, host, port, url, None, None, sock=self.sock, parent=parent))
        except BaseException:  # a worker never returns into the supervisor's code
            log.exception("server worker %d failed", number)
            code = 1
        finally:
            logging.shutdown()
            os._exit(code)


def _exit_text(status: int) -> str:
    if os.WIFSIGNALED(status):
        return f"signal {os.WTERMSIG(status)}"
    return f"exit status {os.waitstatus_to_exitcode(status)}"


def _listening_socket(host: str, port: int) -> socket.socket:
    """The port, bound and listening, for the workers to share."""
    sock = _bound(host, port)
    sock.listen(2048)
    sock.set_inheritable(True)
    return sock


class AgentSupervisor:
    """Runs the local `nanum agent` as a child in its own session (so Ctrl-C reaches only us) and restarts it."""

    def __init__(self, url: str, name: str, token: str, state_dir: Path, simulate: str | None) -> None:
        self.argv = [
            sys.executable,
            "-m",
            "nanum.cli",
            "agent",
            "--server",
            url,
            "--name",
            name,
            "--state-dir",
            str(state_dir),
        ]
        if simulate:
            self.argv += ["--simulate-gpus", simulate]
        # The token is not on the command line, where anyone could read it; the agent stops if we die.
        self.env = {**os.environ, "NANUM_NODE_TOKEN": token, "NANUM_AGENT_PARENT": str(os.getpid())}
        self.proc: subprocess.Popen[bytes] | None = None
        self.stopping = False

    async def run(self, ready: object) -> None:
        while not callable(ready) or not ready():
            await asyncio.sleep(0.02)
        backoff = 1.0
        while not self.stopping:
            began = time.monotonic()
            self.proc = subprocess.Popen(self.argv, env=self.env, start_new_session=True)
            while self.proc.poll() is None:
                await asyncio.sleep(0.2)
            if self.stopping:
                return
            backoff = 1.0 if time.monotonic() - began > 30 else min(backoff * 2, 30.0)
            log.warning("the local agent exited (status %s); restarting it in %.0f s", self.proc.returncode, backoff)
            await asyncio.sleep(backoff)

    def stop(self) -> None:
        self.stopping = True
        if self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.send_signal(signal.SIGTERM)

    def wait(self) -> None:
        """Wait for the agent to stop; kill the agent process alone (never its jobs) if it takes too long."""
        if self.proc is None:
            return
        try:
            self.proc.wait(timeout=AGENT_STOP_S)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


# -- small helpers -------------------------------------------------------------------------------------------


def _check_port(host: str, port: int) -> None:
    _bound(host, port).close()


def _bound(host: str, port: int) -> socket.socket:
    """A socket bound to `host`:`port`; StartError, saying what to do, when it cannot be."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            raise StartError(f"port {port} on {host} is in use (is nanum already running?); pass --port") from exc
        raise StartError(f"cannot listen on {host}:{port} ({exc.strerror}); pass --host/--port") from exc
    return sock


def _connect_host(host: str) -> str:
    if host in ("0.0.0.0", ""):
        return "127.0.0.1"
    if host == "::":
        return "[::1]"
    return f"[{host}]" if ":" in host else host


def gpu_note(simulate: str | None) -> str | None:
    """What the local agent will run on, when that is not the machine's real GPUs."""
    if simulate:
        return f"The local agent simulates GPUs: {simulate}."
    from nanum.agent.gpus import DEFAULT_SIMULATED, discover_nvml

    if discover_nvml():
        return None
    return (
        f"No NVIDIA GPU found: the local agent simulates {DEFAULT_SIMULATED} GPUs "
        "(choose with --simulate-gpus, e.g. 8xA100)."
    )


def connection_note(db: Database, processes: int) -> str | None:
    """A warning when `processes` server processes may open more connections than PostgreSQL allows, else None.
    Each opens at most `POOL_MAX`; a request that finds none left fails with "too many clients"."""
    if not db.is_postgres:
        return None
    with db.engine.connect() as conn:
        allowed = int(conn.exec_driver_sql("SHOW max_connections").scalar_one())
        reserved = int(conn.exec_driver_sql("SHOW superuser_reserved_connections").scalar_one())
    need = processes * POOL_MAX
    if need <= allowed - reserved:
        return None
    return (f"Warning: the {processes} server processes may open up to {need} database connections, and PostgreSQL "
            f"takes {allowed - reserved} (max_connections {allowed}, {reserved} kept for superusers); under load "
            f"requests would fail. Raise max_connections to at least {need + reserved}, or run fewer --workers.")


def _announce(ctx: ServerContext, url: str, started: Started, agent: LocalAgent | None, workers: int = 1) -> None:
    db = "SQLite" if ctx.db.is_sqlite else make_url(ctx.db.url).render_as_string(hide_password=True)
    lines = [f"nanum is up at {url}  (state in {ctx.settings.home}, database {db})"]
    if workers > 1:
        lines.append(f"{workers} server processes share the port; one more schedules.")
        if connections := connection_note(ctx.db, workers + 1):
            lines.append(connections)
    if agent is not None and (gpus := gpu_note(agent.simulate_gpus)):
        lines.append(gpus)
    if getpass.getuser() == "root" and not ctx.settings.allow_root_jobs:
        lines.append(
            "You are root: root's jobs are refused unless nanum runs with --allow-root-jobs; add people "
            "with `nanum user add NAME --unix-user NAME` and submit as them."
        )
    if started.created_admin:
        lines.append(
            f"Created admin {getpass.getuser()}; token in {ctx.settings.home / 'admin-token'} "
            "(saved for the nanum CLI)."
        )
    if ctx.settings.ldap is not None:
        lines.append(f"People log in with their directory account ({ctx.settings.ldap.url}): nanum login {url}")
    if ctx.settings.oidc is not None:
        lines.append(f"People log in with single sign-on ({ctx.settings.oidc.issuer}): nanum login --oidc {url}, "
                     f"or the dashboard's 'Log in with {ctx.settings.oidc.name}'")
    lines += [
        "Submit a job:   nanum submit --gpus 1 -- python train.py",
        "Watch:          nanum ps   ·   nanum nodes   ·   nanum logs -f ID",
        "Add people:     nanum user add NAME --lab LAB",
    ]
    if agent is None:
        lines.append(
            "Add GPU nodes:  nanum node add NAME; on that machine save the token in a file only you can read "
            "(chmod 600 FILE) and run: nanum agent --server URL --token-file FILE"
        )
    lines.append("Ctrl-C stops nanum; running jobs keep running.")
    print("\n".join(lines), flush=True)
