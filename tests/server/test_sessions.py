"""Notebooks and shells at the API: their defaults, what their agent is told, where a notebook listens, and the
proxy's answers before the notebook listens (the notebook itself is proxied end to end in tests/e2e)."""

from __future__ import annotations

from tests.server.asgiclient import AsgiClient
from tests.server.conftest import ALICE, BOB, auth, job, submit, tick
from tests.server.fakeagent import FakeAgent


def test_notebooks_and_shells_are_not_preemptible_unless_asked_and_batch_jobs_are(client: AsgiClient) -> None:
    assert submit(client, kind="notebook", gpus=0)["preemptible"] is False
    assert submit(client, kind="shell", gpus=0)["preemptible"] is False
    assert submit(client, kind="notebook", gpus=0, preemptible=True)["preemptible"] is True
    assert submit(client, gpus=0)["preemptible"] is True


def test_the_agent_gets_a_secret_for_a_notebook_that_no_one_reads_back(client: AsgiClient, agent: FakeAgent) -> None:
    notebook, batch = submit(client, kind="notebook", gpus=1), submit(client, gpus=1)
    tick(client)
    agent.beat()
    launches = {launch.job_id: launch for launch in agent.running.values()}
    secret = launches[notebook["id"]].secret  # type: ignore[index]
    assert launches[notebook["id"]].kind == "notebook" and len(secret) >= 32  # type: ignore[index]
    assert launches[batch["id"]].secret == "" and launches[batch["id"]].kind == "batch"  # type: ignore[index]
    for token in (ALICE, "admin-token"):
        assert secret not in client.get(f"/api/v1/jobs/{notebook['id']}", headers=auth(token)).text
        assert secret not in client.get("/api/v1/jobs", headers=auth(token)).text


def test_the_proxy_waits_for_the_notebooks_address_and_lets_only_its_owner_in(
    client: AsgiClient, agent: FakeAgent
) -> None:
    notebook = submit(client, kind="notebook", gpus=1)
    url = f"/notebooks/{notebook['id']}/api/status"
    assert client.get(url, headers=auth(ALICE)).status_code == 503  # pending: nothing listens yet
    tick(client)
    agent.beat()
    answer = client.get(url, headers=auth(ALICE))
    assert answer.status_code == 503 and "has not started its JupyterLab yet" in answer.json()["detail"]
    assert client.get(url, headers=auth(BOB)).status_code == 403
    assert client.get(url, headers=auth("admin-token")).status_code == 403
    assert client.get(url).status_code == 303  # nobody: the login page
    batch = submit(client, gpus=0)
    assert client.get(f"/notebooks/{batch['id']}/api/status", headers=auth(ALICE)).status_code == 404

    # The agent reports where JupyterLab listens; a closed port answers 503, not a traceback.
    beat = agent.heartbeat()
    beat.jobs = [s.model_copy(update={"address": "127.0.0.1:9"}) for s in beat.jobs]
    r = client.post("/api/v1/agent/heartbeat", content=beat.model_dump_json(),
                    headers={"Authorization": f"Bearer {agent.token}", "Content-Type": "application/json"})
    assert r.status_code == 200, r.text
    answer = client.get(url, headers=auth(ALICE))
    assert answer.status_code == 503 and "does not answer" in answer.json()["detail"]
    assert job(client, notebook["id"])["state"] == "running"
