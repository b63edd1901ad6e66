"""The heartbeat loop against a real HTTP server: starts, exits, cancels, logs, and both sides restarting."""

from __future__ import annotations

import asyncio
import logging
import statistics
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from nanum.agent.agent import Agent, AgentConfig
from nanum.agent.executor import Executor
from nanum.agent.gpus import simulated_gpus
from nanum.agent.link import AgentError
from nanum.protocol import JobStatus
from tests.agent.conftest import NODE, make_launch
from tests.agent.fakeserver import TOKEN, FakeServer


@pytest.fixture
def server() -> Iterator[FakeServer]:
    srv = FakeServer()
    yield srv
    srv.close()


@pytest.fixture(autouse=True)
def no_jobs_left_behind(state_dir: Path) -> Iterator[None]:
    yield
    if (state_dir / "jobs").exists():
        ex = Executor(state_dir, NODE)
        for job_id, state in ex.held().items():
            if state == "running":
                ex.stop(job_id, 0.0)
                ex.wait(job_id, 5)
        ex.close()


def make_agent(url: str, state_dir: Path, token: str = TOKEN, long_poll_s: float = 10.0) -> Agent:
    config = AgentConfig(server=url, token=token, name=NODE, state_dir=state_dir, long_poll_s=long_poll_s,
                         backoff_max_s=0.5)
    return Agent(config, gpus=simulated_gpus("4", NODE), simulated=True)


@contextmanager
def running(agent: Agent) -> Iterator[Agent]:
    errors: list[BaseException] = []

    def target() -> None:
        try:
            asyncio.run(agent.run())
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    try:
        yield agent
    finally:
        agent.stop()
        thread.join(10)
        assert not thread.is_alive(), "the agent did not stop"
    if errors:
        raise errors[0]


def held_long_poll(server: FakeServer, long_poll_s: float = 10.0) -> None:
    """Wait until the agent's heartbeat is being held (it is idle, waiting for work)."""
    server.wait_until(lambda: bool(server.beats) and server.beats[-1].wait_s >= long_poll_s)
    time.sleep(0.05)


def test_the_first_heartbeat_asks_for_an_answer_at_once_and_the_next_waits_for_work(
        server: FakeServer, state_dir: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Held like the others, the first heartbeat of an idle node was answered 10 s later: `nanum up` said the
    agent was connected 10 s after it started."""
    caplog.set_level(logging.INFO, logger="nanum.agent")
    began = time.monotonic()
    with running(make_agent(server.url, state_dir)):
        held_long_poll(server)
        assert server.beats[0].wait_s == 0
        assert time.monotonic() - began < 5
        assert "connected to" in caplog.text


def test_runs_a_desired_job_reports_its_exit_and_log_then_forgets_it(server: FakeServer, state_dir: Path) -> None:
    with running(make_agent(server.url, state_dir)):
        server.submit(make_launch(1, "sh", "-c", "echo hello $CUDA_VISIBLE_DEVICES; exit 3", gpus=[2]))
        _, status = server.wait_state(1, "exited")
        assert status.exit_code == 3
        server.wait_until(lambda: server.log(1) == b"hello 2\n")  # the last output may follow the exit status
        server.wait_until(lambda: not (state_dir / "jobs" / "1").exists())
    first = server.beats[0].node
    assert first.name == NODE and [g.index for g in first.gpus] == [0, 1, 2, 3] and first.simulated


def reported(server: FakeServer, job_id: int, state: str) -> tuple[float, JobStatus]:
    """`server.wait_state`, saying on failure what the agent's last heartbeats reported."""
    try:
        return server.wait_state(job_id, state)
    except AssertionError:
        last = [(beat.wait_s, [(s.job_id, s.state) for s in beat.jobs]) for beat in server.beats[-6:]]
        raise AssertionError(f"job {job_id} was not reported {state}; the last heartbeats (wait_s, jobs): {last}"
                             ) from None


def test_start_and_exit_are_reported_promptly(server: FakeServer, state_dir: Path) -> None:
    # A long poll of 2 s: in the full suite a start has, rarely, come only with the agent's next heartbeat, a long
    # poll later (not yet understood: the held heartbeat seems not to have been answered at the submission). With
    # a short poll such an outlier costs 2 s, not the whole wait, and the median below still says whether starts
    # and exits are prompt.
    starts, exits = [], []
    with running(make_agent(server.url, state_dir, long_poll_s=2.0)):
        for job_id in range(1, 21):
            held_long_poll(server, long_poll_s=2.0)
            submitted = server.submit(make_launch(job_id, "sleep", "0.05"))
            _, running_status = reported(server, job_id, "running")
            received, exited = reported(server, job_id, "exited")
            starts.append((running_status.started_at or 0) - submitted)
            exits.append(received - (exited.ended_at or 0))
    print(
        f"\nsubmit-to-start median {statistics.median(starts) * 1000:.1f} ms, max {max(starts) * 1000:.1f} ms;"
        f" exit-to-report median {statistics.median(exits) * 1000:.1f} ms, max {max(exits) * 1000:.1f} ms"
    )
    assert statistics.median(starts) < 0.1 and statistics.median(exits) < 0.1


def test_a_run_that_ended_is_never_started_again_by_a_list_read_before_its_end(
        server: FakeServer, state_dir: Path, tmp_path: Path) -> None:
    # A busy server may acknowledge a job's end in a reply whose list of jobs was read before that end was recorded:
    # the job is still on it. Its agent must not run it a second time (on GPUs the server may have given away).
    runs = tmp_path / "runs"
    server.stale_replies = 1
    with running(make_agent(server.url, state_dir)):
        server.submit(make_launch(1, "sh", "-c", f"echo run >> {runs}", run=1))
        server.wait_state(1, "exited")
        server.wait_until(lambda: not (state_dir / "jobs" / "1").exists())  # forgotten, once acknowledged
        held_long_poll(server)
        server.submit(make_launch(2, "true", run=1))  # the agent goes on with other work
        server.wait_state(2, "exited")
    assert server.stale_replies == 0, "the stale reply was sent"
    assert runs.read_text() == "run\n"


def test_a_job_taken_off_the_list_is_stopped(server: FakeServer, state_dir: Path) -> None:
    with running(make_agent(server.url, state_dir)):
        server.submit(make_launch(1, "sleep", "60"))
        server.wait_state(1, "running")
        server.cancel(1)
        _, status = server.wait_state(1, "exited")
        assert status.exit_code == 143 and status.signal == 15


def test_failed_start_is_reported_with_its_reason(server: FakeServer, state_dir: Path) -> None:
    with running(make_agent(server.url, state_dir)):
        server.submit(make_launch(1, "true", workdir="/no/such/dir"))
        _, status = server.wait_state(1, "failed_to_start")
    assert status.reason == f"working directory /no/such/dir does not exist on node {NODE}"


def test_jobs_survive_a_server_restart(server: FakeServer, state_dir: Path) -> None:
    launch = make_launch(1, "sh", "-c", "sleep 0.6; echo done; exit 7")
    with running(make_agent(server.url, state_dir)):
        server.submit(launch)
        server.wait_state(1, "running")
        server.close()
        time.sleep(1.0)  # the job ends while the server is away
        again = FakeServer(server.port)
        try:
            again.submit(launch)  # the server's store still says the job runs here
            _, status = again.wait_state(1, "exited")
            assert status.exit_code == 7
            # The output it wrote meanwhile follows, in the same heartbeat or the next (this fake server, unlike
            # the real one, acknowledges an exit before it holds the whole log)
            again.wait_until(lambda: again.log(1) == b"done\n")
        finally:
            again.close()


def test_a_restarted_agent_readopts_its_jobs(server: FakeServer, state_dir: Path) -> None:
    with running(make_agent(server.url, state_dir)):
        server.submit(make_launch(1, "sh", "-c", "sleep 0.8; exit 2"))
        _, first = server.wait_state(1, "running")
    beats_before = len(server.beats)
    with running(make_agent(server.url, state_dir)):
        server.wait_until(lambda: len(server.beats) > beats_before)
        again = server.beats[beats_before].jobs
        assert [(s.job_id, s.state, s.pid) for s in again] == [(1, "running", first.pid)]
        _, status = server.wait_state(1, "exited")
        assert status.exit_code == 2


def test_a_long_log_arrives_whole_in_chunks(server: FakeServer, state_dir: Path) -> None:
    script = "import sys; sys.stdout.write('héllo wörld ' * 60000)"  # about 840 KB, with 2-byte characters
    with running(make_agent(server.url, state_dir)):
        server.submit(make_launch(1, "python3", "-c", script))
        server.wait_until(lambda: (1, "exited") in server.seen and not (state_dir / "jobs" / "1").exists())
    assert server.log(1) == ("héllo wörld " * 60000).encode()
    assert sum(1 for b in server.beats if b.logs) >= 3


def test_a_refused_token_is_a_clear_error(server: FakeServer, state_dir: Path) -> None:
    agent = make_agent(server.url, state_dir, token="wrong")
    with pytest.raises(AgentError, match="refused this node's token"):  # at its first heartbeat, however slow
        asyncio.run(asyncio.wait_for(agent.run(), timeout=60))


def test_a_token_refused_after_connecting_says_why_and_the_job_runs_on(
    server: FakeServer, state_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A node removed (or its token replaced) while its agent runs: the agent says what to do, and keeps its job."""
    with caplog.at_level(logging.INFO, logger="nanum.agent"), running(make_agent(server.url, state_dir)):
        server.submit(make_launch(1, "sleep", "30"))
        server.wait_state(1, "running")
        server.token = "another"
        server.submit(make_launch(2, "sleep", "30"))  # wakes the held heartbeat: the next one is refused
        server.wait_until(lambda: any("refused this node" in m for m in caplog.messages))
        server.token = TOKEN
        server.wait_state(2, "running")
        assert (1, "exited") not in server.seen
    refused = [m for m in caplog.messages if "refused this node" in m]
    assert refused[0] == (f"the server at {server.url} refused this node's token (401); get one with "
                          f"`nanum node add {NODE}`; retrying in 0.5s (jobs keep running)")


def test_two_agents_cannot_share_a_state_directory(server: FakeServer, state_dir: Path) -> None:
    with running(make_agent(server.url, state_dir)):
        server.wait_until(lambda: bool(server.beats))
        with pytest.raises(AgentError, match="another agent is using"):
            asyncio.run(make_agent(server.url, state_dir).run())


def test_output_streams_while_the_job_runs_and_arrives_once(server: FakeServer, state_dir: Path) -> None:
    with running(make_agent(server.url, state_dir)):
        server.submit(make_launch(1, "sh", "-c", "echo early; sleep 4; echo late"))
        server.wait_until(lambda: server.log(1) == b"early\n", timeout=3.5)
        assert (1, "exited") not in server.seen
        server.wait_until(lambda: (1, "exited") in server.seen and not (state_dir / "jobs" / "1").exists())
    assert server.log(1) == b"early\nlate\n"


def test_the_report_of_a_jobs_end_carries_the_rest_of_its_output(server: FakeServer, state_dir: Path) -> None:
    """`nanum wait ID && nanum logs ID` must show all the output. The job writes, the agent sends that and the
    server holds the heartbeat; the job writes again and ends while it is held: the agent drops the held request
    to report the end at once, and that report must carry the output the dropped request did not."""
    with running(make_agent(server.url, state_dir)):
        for job_id, pause in enumerate((0.6, 0.7, 0.8, 0.9), start=1):
            server.submit(make_launch(job_id, "sh", "-c", f"echo first; sleep {pause}; echo last"))
            server.wait_state(job_id, "exited")
    assert {job_id: server.log_when_seen[(job_id, "exited")] for job_id in range(1, 5)} == \
        {job_id: b"first\nlast\n" for job_id in range(1, 5)}
