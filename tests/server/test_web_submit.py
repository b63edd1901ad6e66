"""The dashboard's Submit page over real HTTP (in process): a batch job and a notebook submitted from the form land
as the API would make them; a bad value, a lab of someone else's, a shell, a missing CSRF token are refused with
one sentence and the form comes back as typed; the owner of a running notebook gets "Open notebook", and the page
that was open when it started shows where it runs."""

from __future__ import annotations

import html
import re

import pytest

from nanum.server.context import ServerContext
from tests.server.asgiclient import AsgiClient
from tests.server.conftest import ADMIN, ALICE, BOB, auth, job, tick
from tests.server.fakeagent import FakeAgent
from tests.server.test_web import csrf, get, login, post


def form(client: AsgiClient, cookies: dict[str, str], **fields: str) -> dict[str, str]:
    """The Submit form as the page renders it (its CSRF token and request id), with `fields` typed in."""
    text = get(client, "/submit", cookies).text
    hidden = dict(re.findall(r'<input type="hidden" name="(\w+)" value="([^"]*)"', text))
    return {"csrf": hidden["csrf"], "request": hidden["request"], "kind": "batch", "gpus": "1", **fields}


def refusal(text: str) -> str:
    found = re.search(r'<p class="error" role="alert">Refused: (.*?)</p>', text)
    assert found is not None, text
    return html.unescape(found[1])


@pytest.fixture
def alice(client: AsgiClient) -> dict[str, str]:
    return login(client, ALICE)


def test_a_batch_job_from_the_form_is_the_job_the_api_makes(client: AsgiClient, alice: dict[str, str]) -> None:
    for body in ({"name": "torch", "python": "/opt/envs/torch", "lab": "vision"},):
        assert client.post("/api/v1/environments", json=body, headers=auth(ALICE)).status_code == 201
    for name in ("imagenet", "coco"):
        body = {"name": name, "path": f"/data/{name}"}
        assert client.post("/api/v1/datasets", json=body, headers=auth(ADMIN)).status_code == 201
    page = get(client, "/submit", alice).text
    assert '<a href="/submit" class="active">Submit</a>' in page and 'value="shell"' in page
    assert '<option value="torch">torch (lab vision)</option>' in page and "coco (everyone)" in page
    assert '<option value="vision" selected>vision</option>' in page and '"nlp"' not in page  # alice's labs only
    fields = form(client, alice, command="python train.py --note 'two words'", name="resnet", gpus="2",
                  nodes="1", gpu_model="A100", gpu_memory="40G", constraints="net=ib, rack=b2", cpus="8",
                  memory="32G", time="1-00:00:00", lab="vision",
                  priority="7", environment="torch", workdir="/home/alice/exp", env="SEED=1\r\nWANDB_MODE=offline\r\n",
                  no_preempt="on")  # fmt: skip
    r = post(client, "/submit", fields | {"datasets": ["coco", "imagenet"]}, alice)  # type: ignore[dict-item]
    assert r.status_code == 303, refusal(r.text)
    job_id = int(r.headers["location"].removeprefix("/jobs/"))
    j = job(client, job_id)
    assert j["command"] == ["python", "train.py", "--note", "two words"] and j["name"] == "resnet"
    assert (j["gpus"], j["nodes"], j["gpu_model"], j["cpus"]) == (2, 1, "A100", 8)
    assert (j["gpu_memory_mb"], j["constraints"]) == (40960, ["net=ib", "rack=b2"])
    assert (j["memory_mb"], j["time_limit_s"], j["priority"]) == (32768, 86400, 7)
    assert (j["lab"], j["environment"], j["workdir"], j["kind"]) == ("vision", "torch", "/home/alice/exp", "batch")
    assert j["env"] == {"SEED": "1", "WANDB_MODE": "offline"} and j["preemptible"] is False
    assert j["datasets"] == {"coco": "/data/coco", "imagenet": "/data/imagenet"}
    again = post(client, "/submit", fields | {"datasets": ["coco", "imagenet"]}, alice)  # type: ignore[dict-item]
    assert again.headers["location"] == f"/jobs/{job_id}"  # the same form sent twice makes one job
    shown = get(client, r.headers["location"], alice)
    assert shown.status_code == 200
    assert "2 GPUs (A100) with at least 40 GiB each, on nodes labelled net=ib, rack=b2, 8 CPUs" in shown.text


def test_a_job_held_from_the_form_waits_until_released(client: AsgiClient, alice: dict[str, str]) -> None:
    assert 'name="hold"' in get(client, "/submit", alice).text
    r = post(client, "/submit", form(client, alice, command="python train.py", gpus="1", hold="on"), alice)
    assert r.status_code == 303, refusal(r.text)
    job_id = int(r.headers["location"].removeprefix("/jobs/"))
    assert job(client, job_id)["state"] == "held"
    r = post(client, "/submit", form(client, alice, command="python train.py", gpus="1"), alice)
    assert job(client, int(r.headers["location"].removeprefix("/jobs/")))["state"] == "pending"


def test_an_array_from_the_form_is_one_job_per_index(client: AsgiClient, alice: dict[str, str]) -> None:
    r = post(client, "/submit", form(client, alice, command="python train.py", gpus="1", array="0-3%2"), alice)
    assert r.status_code == 303, refusal(r.text)
    first = int(r.headers["location"].removeprefix("/jobs/"))
    tasks = client.get("/api/v1/jobs", params={"array": first}, headers=auth(ALICE)).json()
    assert [t["array_task"] for t in tasks] == [0, 1, 2, 3] and {t["array_limit"] for t in tasks} == {2}
    assert f"Job {first}_0" in get(client, r.headers["location"], alice).text


@pytest.mark.parametrize(
    ("fields", "status", "sentence"),
    [
        ({"gpus": "abc"}, 422, "invalid gpus: 'abc' is not a whole number; give digits only, such as 3"),
        ({"gpus": "-1"}, 422, "invalid gpus: input should be greater than or equal to 0"),
        ({"time": "4x"}, 422, "time limit: cannot read '4x'; give e.g. 90s, 30m, 4h, 2d, 1:30:00 or 2-00:00:00 "
                              "(a bare number is minutes)"),
        ({"memory": "lots"}, 422, "memory: cannot read 'lots'; give a size such as 512M, 32G or 1T"),
        ({"gpu_memory": "-5G"}, 422, "GPU memory: cannot read '-5G'; give a size such as 512M, 32G or 1T"),
        ({"constraints": "net=ib rack"}, 422, "node labels: cannot read 'rack'; give a node label KEY=VALUE, e.g. "
                                              "net=ib"),
        ({"constraints": "k=" + "v" * 500}, 422, f"node labels: {'k=' + 'v' * 38!r}... (502 characters) is too long"),
        ({"env": "SEED"}, 422, "environment variables: 'SEED' is not NAME=VALUE with a valid name, e.g. SEED=1"),
        ({"command": "python train.py > log"}, 422, "command: '>' needs a shell"),
        ({"command": "python 'train.py"}, 422, "command: no closing quotation; close the quote"),
        ({"command": ""}, 422, "command: nothing to run"),
        ({"lab": "nlp"}, 403, "user alice is not a member of lab nlp"),
        ({"environment": "nope"}, 400, "no environment named nope for this job's lab"),
        ({"kind": "daemon"}, 422, "invalid kind: input should be 'batch', 'notebook' or 'shell'"),
        ({"array": "0-"}, 422, "invalid array: cannot read array '0-'; give e.g. 0-99, 0-99%8, 1,3,5-9 or 0-20:2"),
        ({"array": "0-3", "kind": "notebook"}, 422, "array: a notebook is one job; give an array for a batch job"),
    ],
)
def test_a_bad_value_comes_back_with_the_form_and_one_sentence(
    client: AsgiClient, alice: dict[str, str], fields: dict[str, str], status: int, sentence: str
) -> None:
    typed = form(client, alice, command="python train.py", name="kept-name", memory="16G") | fields
    r = post(client, "/submit", typed, alice)
    assert r.status_code == status and refusal(r.text).startswith(sentence), refusal(r.text)
    assert 'value="kept-name"' in r.text and f'name="request" value="{typed["request"]}"' in r.text
    assert client.get("/api/v1/jobs", headers=auth(ALICE)).json() == []


@pytest.mark.parametrize(("field", "value"), [("gpus", "abc"), ("array", "0-")])
def test_the_api_gives_the_same_sentence(client: AsgiClient, alice: dict[str, str], field: str, value: str) -> None:
    """A validator's own sentence, without pydantic's "Value error, " before it, in both."""
    api = client.post("/api/v1/jobs", json={"command": ["true"], field: value}, headers=auth(ALICE))
    web = post(client, "/submit", form(client, alice, command="true", **{field: value}), alice)
    assert api.status_code == web.status_code == 422 and api.json()["detail"] == refusal(web.text)
    assert "value error" not in api.json()["detail"]


def test_no_csrf_token_no_job_and_no_session_no_page(client: AsgiClient, alice: dict[str, str]) -> None:
    fields = form(client, alice, command="python train.py")
    assert post(client, "/submit", fields | {"csrf": ""}, alice).status_code == 403
    assert post(client, "/submit", fields | {"csrf": csrf(client, login(client, BOB))}, alice).status_code == 403
    r = get(client, "/submit")
    assert r.status_code == 303 and r.headers["location"] == "/login?next=%2Fsubmit"
    assert post(client, "/submit", fields).status_code == 303  # to the login page, nothing queued
    assert client.get("/api/v1/jobs", headers=auth(ALICE)).json() == []


def test_a_shell_from_the_form_opens_its_terminal_page_for_its_owner_alone(
    client: AsgiClient, alice: dict[str, str]
) -> None:
    r = post(client, "/submit", form(client, alice, kind="shell", command="ignored", env="SEED=1"), alice)
    assert r.status_code == 303, refusal(r.text)
    job_id = int(r.headers["location"].removeprefix("/jobs/").removesuffix("/terminal"))
    assert r.headers["location"] == f"/jobs/{job_id}/terminal"
    j = job(client, job_id)
    assert (j["kind"], j["name"], j["command"]) == ("shell", "shell", ["shell"])
    assert j["env"] == {"TERM": "xterm-256color", "SEED": "1"}  # the browser's terminal is an xterm
    terminal = get(client, f"/jobs/{job_id}/terminal", alice)
    assert terminal.status_code == 200 and f'data-job="{job_id}"' in terminal.text
    assert "style-src 'self' 'unsafe-inline'" in terminal.headers["content-security-policy"]
    assert "script-src 'self';" in terminal.headers["content-security-policy"]  # scripts stay the server's own
    link = f'href="/jobs/{job_id}/terminal" data-terminal-link>Open terminal'
    assert link in get(client, f"/jobs/{job_id}", alice).text
    bob = login(client, BOB)
    refused = get(client, f"/jobs/{job_id}/terminal", bob)
    assert refused.status_code == 403 and "another user&#39;s" in refused.text
    assert "Open terminal" not in get(client, f"/jobs/{job_id}", bob).text


def test_a_notebook_opens_from_its_page_once_it_runs(
    client: AsgiClient, ctx: ServerContext, agent: FakeAgent, alice: dict[str, str]
) -> None:
    r = post(client, "/submit", form(client, alice, kind="notebook", command="ignored"), alice)
    assert r.status_code == 303, refusal(r.text)
    job_id = int(r.headers["location"].removeprefix("/jobs/"))
    j = job(client, job_id)
    assert (j["kind"], j["name"], j["command"]) == ("notebook", "notebook", ["jupyter", "lab"])
    assert get(client, f"/ui/jobs/{job_id}.json", alice).json()["notebook"] == ""
    assert "data-notebook hidden" in get(client, f"/jobs/{job_id}", alice).text
    tick(client)
    assert job(client, job_id)["state"] == "running"
    live = get(client, f"/ui/jobs/{job_id}.json", alice).json()
    assert live["notebook"] == f"/notebooks/{job_id}/lab"
    assert live["allocation"] == [{"node": "gpu-01", "gpus": "0"}] and live["started"].endswith(" UTC")
    page = get(client, f"/jobs/{job_id}", alice).text
    assert f'href="/notebooks/{job_id}/lab" target="_blank" rel="noopener" data-notebook>Open notebook' in page
    # Opened before JupyterLab answers: a page that says so and loads the notebook by itself once it does.
    cookie = {"Cookie": f"nanum_session={alice['nanum_session']}"}
    client.cookies.clear()
    opened = client.get(f"/notebooks/{job_id}/lab", headers=cookie | {"Accept": "text/html,*/*"})
    assert opened.status_code == 503 and opened.headers["refresh"] == "3"
    assert f"Notebook {job_id} has not started its JupyterLab yet" in opened.text and "tries again" in opened.text
    assert "refresh" not in client.get(f"/notebooks/{job_id}/api/status", headers=cookie).headers  # JupyterLab's own
    bob = login(client, BOB)  # bob shares the lab but not the notebook: the proxy would refuse him
    assert get(client, f"/ui/jobs/{job_id}.json", bob).json()["notebook"] == ""
    assert "Open notebook" not in get(client, f"/jobs/{job_id}", bob).text
    assert client.post(f"/api/v1/jobs/{job_id}/cancel", headers=auth(ALICE)).status_code == 200
    agent.beat()
    agent.beat()
    assert job(client, job_id)["state"] == "cancelled"
    client.cookies.clear()
    ended = client.get(f"/notebooks/{job_id}/lab", headers=cookie | {"Accept": "text/html"})
    assert ended.status_code == 503 and "refresh" not in ended.headers  # it will not start: no retrying
