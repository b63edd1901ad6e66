"""The agent protocol end to end against the real app: a fake agent client posting real heartbeats."""

from __future__ import annotations

import dataclasses
import errno
import time

import pytest
from sqlalchemy import select

from nanum.protocol import JobStatus, LogChunk
from nanum.server.context import ServerContext
from nanum.server.services import accounts
from nanum.store import EventRow
from tests.server.asgiclient import AsgiClient
from tests.server.conftest import ADMIN, ALICE, BOB, auth, job, submit, tick
from tests.server.fakeagent import FakeAgent


def gpu_holders(client: AsgiClient) -> dict[tuple[str, int], int | None]:
    nodes = client.get("/api/v1/nodes", headers=auth(BOB)).json()
    return {(n["name"], g["index"]): g["job_id"] for n in nodes for g in n["gpus"]}


def events(ctx: ServerContext, job_id: object) -> list[str]:
    with ctx.db.read() as s:
        return list(s.scalars(select(EventRow.kind).where(EventRow.job_id == job_id).order_by(EventRow.id)))


def test_a_job_is_placed_on_the_agents_gpus_with_everything_it_needs(client: AsgiClient, agent: FakeAgent) -> None:
    j = submit(client, gpus=2, env={"SEED": "7"}, workdir="/home/alice/proj", time_limit_s=600)
    tick(client)
    running = job(client, j["id"])
    assert running["state"] == "running" and running["runs"] == 1 and running["start_time"]
    assert running["allocation"] == [{"node": "gpu-01", "gpus": [0, 1]}]
    reply = agent.beat()
    [launch] = reply.desired
    assert launch.job_id == j["id"] and launch.gpus == [0, 1]
    assert launch.command == ["python", "train.py"] and launch.workdir == "/home/alice/proj"
    assert launch.env == {"SEED": "7"} and launch.unix_user == "alice" and launch.time_limit_s == 600
    assert launch.checkpoint_dir.endswith(f"checkpoints/{j['id']}")
    assert launch.nnodes == 1 and launch.master_addr is None
    assert gpu_holders(client)[("gpu-01", 0)] == j["id"]


def test_a_users_unix_account_defaults_to_their_name(client: AsgiClient, agent: FakeAgent) -> None:
    submit(client, BOB)
    tick(client)
    assert agent.beat().desired[0].unix_user == "bob"


def test_an_exit_completes_the_job_and_frees_its_gpus(client: AsgiClient, ctx: ServerContext, agent: FakeAgent) -> None:
    j = submit(client, gpus=4)
    tick(client)
    agent.beat()
    agent.exit(j["id"], code=0)
    reply = agent.beat()
    assert reply.ack == [j["id"]] and reply.desired == []
    done = job(client, j["id"])
    assert done["state"] == "completed" and done["exit_code"] == 0 and done["end_time"]
    assert done["allocation"] == [{"node": "gpu-01", "gpus": [0, 1, 2, 3]}]  # where it ran stays visible
    assert set(gpu_holders(client).values()) == {None}
    assert events(ctx, j["id"]) == ["submitted", "started", "completed"]


def test_failures_and_time_limits_end_the_job_with_the_reason(
    client: AsgiClient, ctx: ServerContext, agent: FakeAgent
) -> None:
    crash, missing, slow = (submit(client, gpus=1) for _ in range(3))
    tick(client)
    agent.beat()
    agent.exit(crash["id"], code=3)
    agent.fail_to_start(missing["id"], "user alice has no account on node gpu-01")
    agent.exit(slow["id"], code=137, signal=9, timed_out=True)
    agent.beat()
    crashed = job(client, crash["id"])
    assert crashed["state"] == "failed" and crashed["exit_code"] == 3 and crashed["reason"] == "exited with code 3"
    assert job(client, missing["id"])["state"] == "failed"
    assert job(client, missing["id"])["reason"] == "user alice has no account on node gpu-01"
    assert job(client, slow["id"])["state"] == "timeout"
    assert events(ctx, crash["id"]) == ["submitted", "started", "failed"]


def test_a_job_whose_node_could_not_tell_how_it_ended_fails_not_completes(
    client: AsgiClient, agent: FakeAgent
) -> None:
    """Its exit status could not be written on the node (a full disk) or its agent was down when it ended: it had
    been recorded as completed with exit code 0."""
    unknown = submit(client, gpus=1)
    tick(client)
    agent.beat()
    agent.running.pop(unknown["id"])
    said = "its exit status is unknown: its node could not record it (the node's disk was full)"
    agent.exited[unknown["id"]] = JobStatus(job_id=unknown["id"], state="exited", reason=said, ended_at=time.time())
    agent.beat()
    ended = job(client, unknown["id"])
    assert (ended["state"], ended["exit_code"], ended["reason"]) == ("failed", None, said)


def test_two_jobs_never_get_the_same_gpu(client: AsgiClient, agent: FakeAgent) -> None:
    ids = [submit(client, ALICE if i % 2 else BOB, gpus=1 + i % 2)["id"] for i in range(8)]
    done: set[int] = set()
    for _ in range(20):
        tick(client)
        agent.beat()
        held = agent.held_gpus()
        flat = [g for gpus in held.values() for g in gpus]
        assert len(flat) == len(set(flat)), held
        holders = gpu_holders(client)  # a job being preempted holds its GPUs here until it has stopped
        assert all(holders[(agent.name, g)] == j for j, gpus in held.items() for g in gpus), (held, holders)
        if not held:
            break
        first = min(held)
        agent.exit(first)
        done.add(first)
        agent.beat()
    assert done == set(ids)
    assert all(job(client, i)["state"] == "completed" for i in ids)


def test_a_queued_job_starts_as_soon_as_gpus_free(client: AsgiClient, agent: FakeAgent) -> None:
    big = submit(client, gpus=4)
    waiting = submit(client, gpus=2)
    tick(client)
    agent.beat()
    assert job(client, waiting["id"])["state"] == "pending"
    agent.exit(big["id"])
    agent.beat()  # the exit frees the GPUs and wakes the scheduler
    tick(client)
    assert job(client, waiting["id"])["state"] == "running"
    assert [d.job_id for d in agent.beat().desired] == [waiting["id"]]


def test_cancelling_a_running_job_stops_it_first(client: AsgiClient, ctx: ServerContext, agent: FakeAgent) -> None:
    j = submit(client)
    tick(client)
    agent.beat()
    r = client.post(f"/api/v1/jobs/{j['id']}/cancel", headers=auth(ALICE))
    assert r.status_code == 200 and r.json()["state"] == "running"  # still running until its process is gone
    reply = agent.beat()  # not desired any more: the agent stops it and reports the exit next time
    assert reply.desired == [] and j["id"] in agent.exited
    agent.beat()
    cancelled = job(client, j["id"])
    assert cancelled["state"] == "cancelled" and cancelled["reason"] == "cancelled by alice"
    assert events(ctx, j["id"])[-2:] == ["cancel-requested", "cancelled"]
    assert set(gpu_holders(client).values()) == {None}


def test_a_job_stopped_before_its_agent_heard_of_it_frees_its_gpus(client: AsgiClient, agent: FakeAgent) -> None:
    j = submit(client, gpus=4)
    tick(client)  # started on gpu-01, but its agent has not been told yet
    client.post(f"/api/v1/jobs/{j['id']}/cancel", headers=auth(ALICE))
    reply = agent.beat()  # the agent does not hold it, so it never will
    assert reply.desired == [] and not agent.running
    assert job(client, j["id"])["state"] == "cancelled"
    assert set(gpu_holders(client).values()) == {None}


def test_a_silent_node_requeues_its_jobs_and_keeps_them_if_it_comes_back(
    client: AsgiClient, ctx: ServerContext, agent: FakeAgent
) -> None:
    j = submit(client, gpus=2)
    tick(client)
    agent.beat()
    later = time.time() + ctx.settings.node_timeout_s + 5
    client.app.state.scheduler.tick(now=later)
    requeued = job(client, j["id"])
    assert requeued["state"] == "pending" and requeued["runs"] == 1
    assert requeued["submit_time"] == j["submit_time"]
    assert client.get("/api/v1/nodes", headers=auth(BOB)).json()[0]["state"] == "down"
    assert set(gpu_holders(client).values()) == {None}
    reply = agent.beat()  # the node is back and still runs the job: keep it there
    assert [d.job_id for d in reply.desired] == [j["id"]]
    back = job(client, j["id"])
    assert back["state"] == "running" and back["runs"] == 1 and back["allocation"][0]["gpus"] == [0, 1]
    assert events(ctx, j["id"])[-3:] == ["lost", "requeued", "recovered"]


def test_a_job_restarted_elsewhere_is_not_disturbed_when_its_old_node_returns(
    client: AsgiClient, ctx: ServerContext, agent: FakeAgent
) -> None:
    j = submit(client, gpus=4)
    tick(client)
    agent.beat()
    other = FakeAgent(client, "gpu-02", accounts.add_node(ctx, "gpu-02"), gpus=4)
    later = time.time() + ctx.settings.node_timeout_s + 5
    client.app.state.scheduler.tick(now=later)  # gpu-01 silent: requeued
    other.beat()
    tick(client)
    assert job(client, j["id"])["allocation"] == [{"node": "gpu-02", "gpus": [0, 1, 2, 3]}]
    other.beat()
    reply = agent.beat()  # gpu-01 returns still running the job: it is told to stop it
    assert reply.desired == []
    agent.beat()  # ... and its exit report does not touch the run on gpu-02
    again = job(client, j["id"])
    assert again["state"] == "running" and again["runs"] == 2
    assert [d.job_id for d in other.beat().desired] == [j["id"]]


def test_borrowed_gpus_are_reclaimed_for_a_lab_within_its_guarantee(client: AsgiClient, agent: FakeAgent) -> None:
    for lab in ("vision", "nlp"):
        client.patch(f"/api/v1/labs/{lab}", json={"guaranteed_gpus": 2}, headers=auth(ADMIN))
    nlp = [submit(client, BOB, lab="nlp", gpus=1)["id"] for _ in range(4)]
    tick(client)
    agent.beat()
    assert sorted(job(client, i)["borrowing"] for i in nlp) == [False, False, True, True]
    mine = [submit(client, ALICE, gpus=1)["id"] for _ in range(2)]
    tick(client)  # reclaim: the two borrowers are asked to stop
    assert all(job(client, i)["state"] == "pending" for i in mine)
    agent.beat()  # the agent stops the borrowers ...
    agent.beat()  # ... and reports them gone: they are requeued, and their GPUs go to alice
    tick(client)
    assert all(job(client, i)["state"] == "running" for i in mine)
    requeued = [i for i in nlp if job(client, i)["state"] == "pending"]
    assert len(requeued) == 2 and all(job(client, i)["runs"] == 1 for i in requeued)


def test_a_gang_gets_rendezvous_settings_and_fails_as_a_whole(client: AsgiClient, ctx: ServerContext) -> None:
    a = FakeAgent(client, "gpu-01", accounts.add_node(ctx, "gpu-01"))
    b = FakeAgent(client, "gpu-02", accounts.add_node(ctx, "gpu-02"))
    a.beat(), b.beat()
    j = submit(client, gpus=4, nodes=2)
    tick(client)
    [la], [lb] = a.beat().desired, b.beat().desired
    assert (la.nnodes, lb.nnodes) == (2, 2) and {la.node_rank, lb.node_rank} == {0, 1}
    assert la.master_addr == lb.master_addr == "gpu-01.lan" and la.master_port == lb.master_port
    assert la.nproc_per_node == 4
    b.exit(j["id"], code=1)
    b.beat()  # one rank failed: the job fails, and the other rank is stopped
    assert job(client, j["id"])["state"] == "running"
    assert a.beat().desired == []
    a.beat()
    failed = job(client, j["id"])
    assert failed["state"] == "failed" and failed["exit_code"] == 1
    assert set(gpu_holders(client).values()) == {None}


def test_logs_are_appended_at_their_offsets_and_read_back(client: AsgiClient, agent: FakeAgent) -> None:
    from nanum.protocol import LogChunk

    j = submit(client)
    tick(client)
    agent.beat()
    agent.logs = [LogChunk(job_id=j["id"], offset=0, data="epoch 1\n"), LogChunk(job_id=j["id"], offset=8, data="é\n")]
    reply = agent.beat()
    assert reply.log_offsets[j["id"]] == 11
    agent.logs = [LogChunk(job_id=j["id"], offset=50, data="gap\n")]  # would leave a hole: dropped
    assert agent.beat().log_offsets[j["id"]] == 11
    agent.logs = [LogChunk(job_id=j["id"], offset=11, data="\ufffd\n", nbytes=2)]  # one byte was not UTF-8
    assert agent.beat().log_offsets[j["id"]] == 13
    r = client.get(f"/api/v1/jobs/{j['id']}/logs", headers=auth(ALICE))
    assert r.text == "epoch 1\né\n\ufffd\n" and r.headers["X-Nanum-Job-State"] == "running"
    offset = int(r.headers["X-Nanum-Log-Offset"])
    r = client.get(f"/api/v1/jobs/{j['id']}/logs", params={"offset": offset}, headers=auth(ALICE))
    assert r.text == "" and int(r.headers["X-Nanum-Log-Offset"]) == offset


def test_output_sent_again_is_kept_once_and_its_new_bytes_appended(client: AsgiClient, agent: FakeAgent) -> None:
    """An agent whose request got no reply sends again from what the server last said it held: the server keeps
    the bytes it has and appends the rest."""
    from nanum.protocol import LogChunk

    j = submit(client)
    tick(client)
    agent.beat()
    agent.logs = [LogChunk(job_id=j["id"], offset=0, data="epoch 1\n")]
    assert agent.beat().log_offsets[j["id"]] == 8
    agent.logs = [LogChunk(job_id=j["id"], offset=0, data="epoch 1\népoch 2\n")]  # the reply above was lost
    assert agent.beat().log_offsets[j["id"]] == 17
    agent.logs = [LogChunk(job_id=j["id"], offset=9, data="\ufffd2\nepoch 3\n", nbytes=15)]  # not UTF-8: not cut
    assert agent.beat().log_offsets[j["id"]] == 17
    agent.logs = [LogChunk(job_id=j["id"], offset=17, data="epoch 3\n")]
    assert agent.beat().log_offsets[j["id"]] == 25
    assert client.get(f"/api/v1/jobs/{j['id']}/logs", headers=auth(ALICE)).text == "epoch 1\népoch 2\nepoch 3\n"


def test_the_output_an_ended_job_still_has_on_its_node_is_counted_until_it_arrives(client: AsgiClient,
                                                                                  agent: FakeAgent) -> None:
    """More output than a heartbeat carries: the report of the end comes with part of it, and `nanum logs` is told
    how much is still to come."""
    from nanum.protocol import LogChunk

    j = submit(client)
    tick(client)
    agent.beat()
    agent.exit(j["id"])
    ended = agent.exited[j["id"]] = agent.exited[j["id"]].model_copy(update={"log_size": 20})
    agent.logs = [LogChunk(job_id=j["id"], offset=0, data="epoch 1\n")]
    assert agent.beat().ack == [j["id"]]
    r = client.get(f"/api/v1/jobs/{j['id']}/logs", headers=auth(ALICE))
    assert (r.headers["X-Nanum-Job-State"], r.headers["X-Nanum-Log-Missing"], r.text) == ("completed", "12",
                                                                                          "epoch 1\n")
    agent.exited[j["id"]] = ended  # an agent reports an ended job until the server holds all its output
    agent.logs = [LogChunk(job_id=j["id"], offset=8, data="epoch 2\nend\n")]
    agent.beat()
    r = client.get(f"/api/v1/jobs/{j['id']}/logs", headers=auth(ALICE))
    assert "X-Nanum-Log-Missing" not in r.headers and r.text == "epoch 1\nepoch 2\nend\n"


def test_logs_are_kept_where_the_file_system_takes_no_locks_and_that_is_said_once(
        client: AsgiClient, agent: FakeAgent, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    from nanum.server.services import joblogs

    def no_locks(fd: int, operation: int) -> None:
        raise OSError(errno.ENOLCK, "No locks available")

    monkeypatch.setattr(joblogs.fcntl, "flock", no_locks)
    monkeypatch.setattr(joblogs, "_unlockable", False)
    j = submit(client)
    tick(client)
    agent.beat()
    for offset, line in ((0, "epoch 1\n"), (8, "epoch 2\n")):
        agent.logs = [LogChunk(job_id=j["id"], offset=offset, data=line)]
        assert agent.beat().log_offsets[j["id"]] == offset + 8
    assert client.get(f"/api/v1/jobs/{j['id']}/logs", headers=auth(ALICE)).text == "epoch 1\nepoch 2\n"
    said = [r.getMessage() for r in caplog.records if "cannot lock" in r.getMessage()]
    assert len(said) == 1 and "No locks available" in said[0] and "local disk" in said[0]


def test_a_node_may_not_write_another_nodes_job_logs(client: AsgiClient, ctx: ServerContext, agent: FakeAgent) -> None:
    from nanum.protocol import LogChunk

    j = submit(client)
    tick(client)
    intruder = FakeAgent(client, "gpu-09", accounts.add_node(ctx, "gpu-09"))
    intruder.logs = [LogChunk(job_id=j["id"], offset=0, data="forged\n")]
    intruder.beat()
    assert client.get(f"/api/v1/jobs/{j['id']}/logs", headers=auth(ALICE)).text == ""


def test_the_server_keeps_at_most_max_output_of_a_run_whatever_a_node_sends(
    client: AsgiClient, ctx: ServerContext, agent: FakeAgent
) -> None:
    """An agent of an earlier version (or a stolen node token) ignores `max_output_bytes` and sends without end:
    the server keeps the first `--max-output` bytes of the run and says so once, and takes the rest as received
    (else the agent would send it again and again) without writing it, so its disk cannot fill."""
    ctx.settings = dataclasses.replace(ctx.settings, max_output_bytes=1 << 20)
    j = submit(client)
    tick(client)
    agent.beat()
    piece = 600 * 1024
    for n, letter in enumerate("abc"):
        agent.logs = [LogChunk(job_id=j["id"], offset=n * piece, data=letter * piece)]
        assert agent.beat().log_offsets[j["id"]] == (n + 1) * piece  # the node moves on
    text, offset = "", 0
    while (r := client.get(f"/api/v1/jobs/{j['id']}/logs", params={"offset": offset}, headers=auth(ALICE))).text:
        text, offset = text + r.text, int(r.headers["X-Nanum-Log-Offset"])  # a read returns at most 1 MiB
    said = ("\n[nanum: this run's output passed 1 MiB, the most the server keeps (its --max-output); the rest was not "
            "kept]\n")
    assert text == "a" * piece + "b" * ((1 << 20) - piece) + said
    assert (ctx.settings.logs_dir / f"{j['id']}.log").stat().st_size == (1 << 20) + len(said)
    agent.exit(j["id"])
    agent.exited[j["id"]] = agent.exited[j["id"]].model_copy(update={"log_size": 3 * piece})
    agent.beat()
    r = client.get(f"/api/v1/jobs/{j['id']}/logs", headers=auth(ALICE))
    assert r.headers["X-Nanum-Job-State"] == "completed" and "X-Nanum-Log-Missing" not in r.headers  # nothing owed


def test_a_requeued_jobs_next_run_logs_from_zero_after_a_header(
    client: AsgiClient, ctx: ServerContext, agent: FakeAgent
) -> None:
    from nanum.protocol import LogChunk

    j = submit(client)
    tick(client)
    agent.beat()
    agent.logs = [LogChunk(job_id=j["id"], offset=0, data="first run\n")]
    assert agent.beat().log_offsets[j["id"]] == 10
    client.app.state.scheduler.tick(now=time.time() + ctx.settings.node_timeout_s + 5)  # node silent: requeued
    agent.running.clear()  # the node comes back without the job (its agent was reinstalled, say)
    agent.beat()
    tick(client)
    assert job(client, j["id"])["runs"] == 2
    reply = agent.beat()
    assert reply.log_offsets.get(j["id"], 0) == 0  # the new run's log starts again at byte 0 on the agent
    agent.logs = [LogChunk(job_id=j["id"], offset=0, data="second run\n")]
    assert agent.beat().log_offsets[j["id"]] == 11
    text = client.get(f"/api/v1/jobs/{j['id']}/logs", headers=auth(ALICE)).text
    assert text == "first run\n\n--- run 2 on gpu-01 ---\nsecond run\n"


def test_a_nul_byte_in_a_report_does_not_cut_the_node_off(client: AsgiClient, agent: FakeAgent) -> None:
    """A job that prints a NUL byte, or a process whose command holds one, must not make the node's heartbeats fail
    (PostgreSQL refuses NUL in text): the byte is shown as U+FFFD and the node goes on being served."""
    j = submit(client)
    tick(client)
    agent.beat()
    agent.logs = [LogChunk(job_id=j["id"], offset=0, data="a\0b\n", nbytes=4)]
    body = agent.heartbeat().model_dump(mode="json")
    body["node"]["hostname"] = "gpu-01\0.lan"
    body["samples"] = [{"time": time.time(), "gpus": [{"index": 0, "util": 50, "processes": [
        {"pid": 4242, "user": "mallory\0", "command": "python\0-c"}]}]}]
    r = client.post("/api/v1/agent/heartbeat", json=body, headers={"Authorization": f"Bearer {agent.token}"})
    assert r.status_code == 200, r.text
    assert client.get(f"/api/v1/jobs/{j['id']}/logs", headers=auth(ALICE)).text == "a\ufffdb\n"
    assert client.app.state.monitoring.flush() == 1  # the readings are written a moment later, whole
    [shown] = client.get("/api/v1/nodes", headers=auth(ALICE)).json()
    assert shown["gpus"][0]["outside"][0]["user"] == "mallory\ufffd"
    agent.exit(j["id"], code=0)
    agent.beat()
    assert job(client, j["id"])["state"] == "completed"


def test_a_backslash_u0000_written_as_text_arrives_as_written(client: AsgiClient, agent: FakeAgent) -> None:
    """Only a NUL byte is replaced: a log that prints the six characters `\\u0000` (a Windows path, a JSON
    dump) keeps them, byte for byte, beside a real NUL in the same heartbeat."""
    j = submit(client)
    tick(client)
    agent.beat()
    agent.logs = [LogChunk(job_id=j["id"], offset=0, data="C:\\u0000\\x y\0z\n", nbytes=12)]
    agent.beat()
    assert client.get(f"/api/v1/jobs/{j['id']}/logs", headers=auth(ALICE)).text == "C:\\u0000\\x y\ufffdz\n"


def test_a_heartbeat_that_is_not_json_is_refused_with_a_sentence_after_its_token(client: AsgiClient,
                                                                                 agent: FakeAgent) -> None:
    for body in (b'{"node": ', b"\xff\xfe", b"", b'{"node": {"name": "gpu-01\\u0000"'):
        r = client.post("/api/v1/agent/heartbeat", content=body, headers={"Authorization": f"Bearer {agent.token}"})
        assert r.status_code == 422 and r.json()["detail"] == "the request body is not valid JSON", r.text
    r = client.post("/api/v1/agent/heartbeat", content=b'{"node": ', headers={"Authorization": "Bearer forged"})
    assert r.status_code == 401  # the token is looked at first: a stranger learns nothing of the format
    body = agent.heartbeat().model_dump(mode="json")
    del body["node"]["unix_user"]
    r = client.post("/api/v1/agent/heartbeat", json=body, headers={"Authorization": f"Bearer {agent.token}"})
    assert r.status_code == 422 and r.json()["detail"] == "invalid node.unix_user: field required"


def test_a_report_with_nan_or_infinity_is_refused_with_a_sentence(client: AsgiClient, agent: FakeAgent) -> None:
    body = agent.heartbeat().model_dump(mode="json")
    body["samples"] = [{"time": "Infinity", "gpus": [{"index": 0, "util": "NaN"}]}]
    r = client.post("/api/v1/agent/heartbeat", json=body, headers={"Authorization": f"Bearer {agent.token}"})
    assert r.status_code == 422 and "finite" in r.json()["detail"]


def test_an_earlier_runs_end_reported_again_does_not_end_the_next_run(client: AsgiClient, agent: FakeAgent) -> None:
    """An agent keeps an ended run until its whole log is uploaded, reporting its end meanwhile; the job may be
    requeued and started on the same node in that time. That report must not end the new run (before: the new
    run failed with the old run's 'killed by signal 15')."""
    j = submit(client)
    tick(client)
    agent.beat()
    first = agent.running[j["id"]].run
    assert first == 1
    assert client.post(f"/api/v1/jobs/{j['id']}/requeue", headers=auth(ALICE)).status_code == 200
    agent.beat()  # not desired any more: stopped (SIGTERM)
    agent.beat()  # its end reported: queued again
    tick(client)
    agent.beat()
    assert agent.running[j["id"]].run == 2 and job(client, j["id"])["state"] == "running"
    agent.exited[j["id"]] = JobStatus(
        job_id=j["id"], state="exited", exit_code=143, signal=15, ended_at=time.time(), stopped=True, run=first
    )
    reply = agent.beat()
    assert j["id"] in reply.ack and [d.job_id for d in reply.desired] == [j["id"]]
    assert job(client, j["id"])["state"] == "running"
    agent.exit(j["id"], code=0)
    agent.beat()
    assert job(client, j["id"])["state"] == "completed"


def test_quiet_heartbeats_get_the_latest_launches_after_a_lab_change_or_a_cancel(
    client: AsgiClient, agent: FakeAgent
) -> None:
    """A heartbeat that reports nothing new is answered with the node's desired jobs as last built while its
    desired version and its jobs' GPUs stay the same; a lab's new grace and a cancel still reach the next one."""
    j = submit(client, gpus=1)
    tick(client)
    agent.beat()  # the job starts
    agent.beat()  # it reports running: written
    lab = job(client, j["id"])["lab"]
    [before] = agent.beat().desired  # quiet
    [again] = agent.beat().desired  # quiet, as last built
    assert again == before
    r = client.patch(f"/api/v1/labs/{lab}", json={"grace_s": 7.5}, headers=auth(ADMIN))
    assert r.status_code == 200, r.text
    [after] = agent.beat().desired
    assert after.grace_s == 7.5 and before.grace_s != 7.5
    assert client.post(f"/api/v1/jobs/{j['id']}/cancel", headers=auth(ALICE)).status_code == 200
    assert agent.beat().desired == []
