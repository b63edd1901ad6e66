"""`nanum agent`: run this machine's GPUs as a node of a nanum server."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from nanum.cli.app import app


@app.command()
def agent(
    server: Annotated[
        str,
        typer.Option(
            "--server",
            envvar="NANUM_SERVER",
            show_envvar=False,
            metavar="URL",
            help="The nanum server to join, e.g. http://head:8765; servers sharing one database, comma-separated "
            "(http://head1:8765,http://head2:8765): heartbeats go to the first that answers.",
        ),
    ],
    token_file: Annotated[
        Path | None,
        typer.Option(
            "--token-file",
            metavar="PATH",
            help="A file holding this node's token (from `nanum node add NAME`), readable by you alone "
            "(chmod 600). Default: $NANUM_NODE_TOKEN.",
        ),
    ] = None,
    token: Annotated[str | None, typer.Option("--token", hidden=True)] = None,
    simulate_nodes: Annotated[
        int | None,
        typer.Option(
            "--simulate-nodes",
            metavar="N",
            min=1,
            help="Run N simulated nodes in this process, each with its own token and heartbeats (with "
            "--simulate-gpus; --token-file holds one `NAME TOKEN` line per node). Their jobs run no process: "
            "`sleep S` takes S seconds, anything else ends at once. For trying a server at fleet scale.",
        ),
    ] = None,
    name: Annotated[str | None, typer.Option("--name", help="Node name (default: the host name).")] = None,
    simulate_gpus: Annotated[
        str | None,
        typer.Option(
            "--simulate-gpus",
            metavar="SPEC",
            help="Pretend to have GPUs: N, or NxMODEL such as 4xA100 or 8xH100.",
        ),
    ] = None,
    state_dir: Annotated[
        Path | None,
        typer.Option(
            "--state-dir",
            metavar="DIR",
            help="Where job records and logs live (default: agent-NAME in $NANUM_HOME, else in /var/lib/nanum for "
                 "root, ~/.local/share/nanum for others).",
        ),
    ] = None,
    sample_interval: Annotated[
        float,
        typer.Option(
            "--sample-interval",
            envvar="NANUM_SAMPLE_INTERVAL",
            show_envvar=False,
            metavar="S",
            min=0,
            help="Seconds between readings of GPU utilisation, memory, power and temperature (0: none).",
        ),
    ] = 5.0,
    hostname: Annotated[
        str | None,
        typer.Option(
            "--hostname",
            metavar="HOST",
            help="The name or address other nodes reach this one by, for multi-node jobs' rendezvous "
            "(default: the host name).",
        ),
    ] = None,
    container_runtime: Annotated[
        str | None,
        typer.Option(
            "--container-runtime",
            metavar="R",
            help="Run container environments with R: podman, docker, a path to either, or none (default: "
            "whichever answers here). It reads its settings from this agent's environment (CONTAINERS_CONF, ...).",
        ),
    ] = None,
    checkpoint_root: Annotated[
        Path | None,
        typer.Option(
            "--checkpoint-root",
            metavar="DIR",
            help="Give each job DIR/ID as its checkpoint directory (shared storage such as NFS, the same on every "
            "node and the server; default: the directory the server names).",
        ),
    ] = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="Log warnings and errors only.")] = False,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Also log every heartbeat.")] = False,
) -> None:
    """Run jobs the server assigns to this node, as their owners, and report on them. Ctrl-C stops the agent;
    running jobs keep running and are picked up again when it restarts."""
    import asyncio
    import logging
    import os
    import signal
    import socket

    from nanum import eventloop, heap, oom
    from nanum.agent import nodetoken
    from nanum.agent.agent import Agent, AgentConfig
    from nanum.agent.gpus import SpecError, parse_spec
    from nanum.agent.link import AgentError
    from nanum.cli.common import fail
    from nanum.config import default_home

    if token is not None:
        fail(
            "--token would show the node token to every user of this machine (`ps`); put it in a file only you can "
            "read (chmod 600 FILE) and pass --token-file FILE, or set NANUM_NODE_TOKEN",
            2,
        )
    try:
        secret = nodetoken.resolve(token_file, os.environ)
    except nodetoken.TokenError as exc:
        fail(str(exc), 2)
    if simulate_nodes is not None:
        _simulate_nodes(server, token_file, simulate_nodes, simulate_gpus or "8", quiet, sample_interval)
        return
    os.environ.pop(nodetoken.ENV_VAR, None)  # nothing this agent starts inherits it
    for url in server.split(","):
        if not url.strip().startswith(("http://", "https://")):
            fail(f"--server: {url.strip()!r} is not a server URL; give one like http://head:8765 (several: "
                 "comma-separated)", 2)
    node = name or socket.gethostname().split(".")[0]
    if simulate_gpus is not None:
        try:
            parse_spec(simulate_gpus)
        except SpecError as exc:
            fail(f"--simulate-gpus: {exc}", 2)
    logging.basicConfig(
        level=logging.WARNING if quiet else logging.INFO,
        format=f"%(asctime)s nanum agent {node}: %(message)s",
        datefmt="%Y-%m-%d %H:%M:%S",
    )
    logging.getLogger("httpx").setLevel(logging.WARNING)  # not a line per heartbeat
    if verbose:
        logging.getLogger("nanum.agent").setLevel(logging.DEBUG)
    config = AgentConfig(
        server=server,
        token=secret,
        name=node,
        simulate_gpus=simulate_gpus,
        state_dir=state_dir or default_home() / f"agent-{node}",
        sample_interval_s=sample_interval,
        hostname=hostname,
        container_runtime=container_runtime,
        checkpoint_root=checkpoint_root.expanduser().absolute() if checkpoint_root else None,
    )
    runner = Agent(config)
    if why := oom.spare_the_service():
        logging.getLogger("nanum.agent").info("%s: a machine out of memory may lose its agent before a job", why)
    _jobs_get_default_signals()
    heap.settle()

    async def main() -> None:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, runner.stop)
        watch = asyncio.create_task(_stop_with_parent(runner))
        try:
            await runner.run()
        finally:
            watch.cancel()

    try:
        eventloop.run(main())
    except AgentError as exc:
        fail(str(exc))


async def _stop_with_parent(runner: object) -> None:
    """The agent that `nanum up` starts stops when `nanum up` dies, even by SIGKILL: the next `nanum up` starts its
    own. Its jobs keep running and are re-adopted. `NANUM_AGENT_PARENT` names the pid to outlive no longer."""
    import asyncio
    import os

    parent = os.environ.get("NANUM_AGENT_PARENT")
    if not parent or not parent.isdigit():
        return
    while os.getppid() == int(parent):
        await asyncio.sleep(0.5)
    runner.stop()  # type: ignore[attr-defined]


def _simulate_nodes(server: str, token_file: Path | None, count: int, gpus: str, quiet: bool,
                    sample_interval: float) -> None:
    """`--simulate-nodes N`: the first N nodes of the token file, heartbeating (with a reading of their GPUs every
    `sample_interval` seconds) until Ctrl-C or SIGTERM."""
    import asyncio
    import logging
    import signal
    import time

    from nanum import eventloop, heap
    from nanum.agent.gpus import SpecError, parse_spec
    from nanum.agent.simnodes import NodeTokensError, SimulatedNode, read_node_tokens, run_nodes
    from nanum.cli.common import fail

    if token_file is None:
        fail("--simulate-nodes needs --token-file FILE with one `NAME TOKEN` line per node (from `nanum node add`)", 2)
    try:
        parse_spec(gpus)
        tokens = read_node_tokens(token_file)
    except SpecError as exc:
        fail(f"--simulate-gpus: {exc}", 2)
    except NodeTokensError as exc:
        fail(str(exc), 2)
    if len(tokens) < count:
        fail(f"--simulate-nodes {count}: {token_file} has tokens for {len(tokens)} nodes; add `NAME TOKEN` lines", 2)
    logging.basicConfig(level=logging.WARNING if quiet else logging.INFO,
                        format="%(asctime)s nanum agent (simulated nodes): %(message)s", datefmt="%Y-%m-%d %H:%M:%S")
    logging.getLogger("httpx").setLevel(logging.WARNING)
    nodes = [SimulatedNode(name, token, gpus, sample_interval_s=sample_interval) for name, token in tokens[:count]]
    heap.settle()

    async def main() -> None:
        stopping = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stopping.set)
        logging.getLogger("nanum.agent").info("%d simulated nodes with %s GPUs each joining %s", count, gpus, server)
        await run_nodes(server.split(",")[0].strip(), nodes, stopping)

    began = time.monotonic()
    eventloop.run(main())
    took = max(time.monotonic() - began, 1e-9)
    beats, failed = sum(n.heartbeats for n in nodes), sum(n.errors for n in nodes)
    print(f"simulated nodes: {beats} heartbeats in {took:.1f} s ({beats / took:.1f}/s), {failed} failed", flush=True)


def _jobs_get_default_signals() -> None:
    """An agent started under `nohup` or in the background ignores SIGHUP (or SIGINT and SIGQUIT), and an ignored
    signal stays ignored across exec: its jobs would inherit that, and a shell whose terminal closed would not hang
    up. The agent keeps not minding them, with a handler that does nothing, which exec resets to the default."""
    import signal

    for sig in (signal.SIGHUP, signal.SIGINT, signal.SIGQUIT):
        if signal.getsignal(sig) == signal.SIG_IGN:
            signal.signal(sig, _ignore)


def _ignore(_signum: int, _frame: object) -> None:
    """Not minding a signal, the way SIG_IGN would, without passing that on to the jobs."""
