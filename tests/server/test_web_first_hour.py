"""The job page as a new user reads it: a requeued job shows no allocation of its own, history to the second, a
finished job's chart and log say it is over, the login error is plain text."""

from __future__ import annotations

import re

from tests.server.asgiclient import AsgiClient
from tests.server.conftest import ADMIN, ALICE, BOB, auth, job, submit, tick
from tests.server.fakeagent import FakeAgent
from tests.server.test_web import get, login, login_form, post


def test_a_preempted_job_back_in_the_queue_shows_no_allocation_or_start_of_its_own(
    client: AsgiClient, agent: FakeAgent
) -> None:
    for lab, quota in (("vision", {"guaranteed_gpus": 4}), ("nlp", {"guaranteed_gpus": 0, "grace_s": 1})):
        assert client.patch(f"/api/v1/labs/{lab}", json=quota, headers=auth(ADMIN)).status_code == 200
    borrower = submit(client, BOB, lab="nlp", gpus=4)
    tick(client)
    agent.beat()
    submit(client, ALICE, gpus=4)
    tick(client)
    agent.beat()
    agent.beat()
    assert job(client, borrower["id"])["state"] == "pending"
    cookies = login(client, BOB)
    page = get(client, f"/jobs/{borrower['id']}", cookies).text
    allocation = re.search(r'data-field="allocation">([^<]*)<', page)
    started = re.search(r'data-field="started">([^<]*)<', page)
    assert allocation is not None and allocation[1] == "– (waiting; last ran on gpu-01 GPU 0, 1, 2, 3)"
    assert started is not None and started[1].startswith("– (last run started 20")
    live = get(client, f"/ui/jobs/{borrower['id']}.json", cookies).json()
    assert live["runtime"] == "" and live["waiting"]["allocation"] == allocation[1]


def test_history_is_to_the_second_and_a_finished_job_says_it_is_over(client: AsgiClient, agent: FakeAgent) -> None:
    j = submit(client, ALICE, gpus=1)
    tick(client)
    agent.beat()
    agent.exit(int(str(j["id"])))
    agent.beat()
    assert job(client, j["id"])["state"] == "completed"
    cookies = login(client, ALICE)
    page = get(client, f"/jobs/{j['id']}", cookies).text
    times = re.findall(r"<time>([^<]+)</time>", page)
    assert len(times) >= 3 and all(re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC", t) for t in times), times
    assert "no readings yet" not in page and "no readings were taken" in page
    assert "tail, live" not in page and 'data-field="log-note">(tail)<' in page
    running = submit(client, ALICE, gpus=1)
    tick(client)
    agent.beat()
    page = get(client, f"/jobs/{running['id']}", cookies).text
    assert "no readings yet" in page and "(tail, live)" in page


def test_the_login_error_is_plain_text(client: AsgiClient) -> None:
    nonce, cookies = login_form(client)
    r = post(client, "/login", {"token": "not-a-token", "nonce": nonce, "next": "/"}, cookies)
    error = re.search(r'<p class="error" role="alert">([^<]*)</p>', r.text)
    assert r.status_code == 401 and error is not None
    assert "`" not in error[1] and "nanum user add" in error[1]
