"""A multi-node job's log: each node's output is kept (offsets counted per node, so one node's bytes never
displace another's), the job's log interleaves them led by `[node]`, `?node=` reads one node by name or rank,
and a requeued run's output follows a `--- run N ---` line."""

from __future__ import annotations

from nanum.protocol import LogChunk
from nanum.server.context import ServerContext
from nanum.server.services import accounts
from tests.server.asgiclient import AsgiClient
from tests.server.conftest import ALICE, auth, job, submit, tick
from tests.server.fakeagent import FakeAgent


def _log(client: AsgiClient, job_id: object, node: str | None = None) -> tuple[int, str]:
    params = {"node": node} if node is not None else {}
    r = client.get(f"/api/v1/jobs/{job_id}/logs", params=params, headers=auth(ALICE))
    return r.status_code, r.text if r.status_code == 200 else r.json()["detail"]


def test_both_ranks_lines_are_kept_interleaved_and_apart(client: AsgiClient, ctx: ServerContext) -> None:
    a, b = (FakeAgent(client, n, accounts.add_node(ctx, n), gpus=1) for n in ("n-a", "n-b"))
    a.beat()
    b.beat()
    j = submit(client, gpus=1, nodes=2)["id"]
    tick(client)
    a.beat()
    b.beat()
    first, second = (x["node"] for x in job(client, j)["allocation"])  # type: ignore[union-attr]
    agents = {a.name: a, b.name: b}
    # Both nodes' first bytes start at offset 0: with one offset per job, the second would have been dropped.
    agents[first].logs = [LogChunk(job_id=j, offset=0, data="rank 0 starts\nrank 0 at ")]
    agents[first].beat()
    agents[second].logs = [LogChunk(job_id=j, offset=0, data="rank 1 starts\n")]
    agents[second].beat()
    agents[first].logs = [LogChunk(job_id=j, offset=24, data="step 5\n")]
    agents[first].beat()
    assert _log(client, j) == (200, f"[{first}] rank 0 starts\n[{first}] rank 0 at \n[{second}] rank 1 starts\n"
                                    f"[{first}] step 5\n")
    assert _log(client, j, first) == (200, "rank 0 starts\nrank 0 at step 5\n")
    assert _log(client, j, "1") == (200, "rank 1 starts\n")  # by rank
    assert _log(client, j, "n-zz") == (400, f"the job has no node n-zz; name one of its nodes or ranks "
                                            f"(0 = {first}, 1 = {second})")

    # The job is requeued (here: its owner asks) and runs again: its next run's lines come after a header.
    assert client.post(f"/api/v1/jobs/{j}/requeue", headers=auth(ALICE)).status_code == 200
    for agent in agents.values():
        agent.beat()  # each stops its part and reports it gone
        agent.beat()
    tick(client)
    for agent in agents.values():
        agent.beat()
    assert job(client, j)["runs"] == 2
    agents[second].logs = [LogChunk(job_id=j, offset=0, data="rank 1 again\n")]
    agents[second].beat()
    text = _log(client, j)[1]
    assert text.endswith(f"[{first}] step 5\n--- run 2 ---\n[{second}] rank 1 again\n"), text


def test_a_single_node_jobs_log_has_no_prefix(client: AsgiClient, agent: FakeAgent) -> None:
    j = submit(client, gpus=1)["id"]
    tick(client)
    agent.beat()
    agent.logs = [LogChunk(job_id=j, offset=0, data="hello\n")]
    agent.beat()
    assert _log(client, j) == (200, "hello\n")
    assert _log(client, j, "gpu-01") == (200, "hello\n")
