"""The dashboard over real HTTP (in process): logging in with a token, the session cookie's flags, CSRF on every
form, pages for everyone, cancel for owners and admins only, the admin page for admins only."""

from __future__ import annotations

import re

import httpx
import pytest

from nanum.server.context import ServerContext
from nanum.server.services import accounts
from tests.server.asgiclient import AsgiClient
from tests.server.conftest import ADMIN, ALICE, BOB, auth, count_calls, job, submit, tick
from tests.server.monitoredagent import MonitoredAgent


def browse(
    client: AsgiClient, method: str, path: str, cookies: dict[str, str] | None = None, **kw: object
) -> httpx.Response:
    """One request with exactly these cookies (as a browser holding them would send)."""
    client.cookies.clear()
    if cookies:
        kw["headers"] = {**kw.get("headers", {}), "Cookie": "; ".join(f"{k}={v}" for k, v in cookies.items())}  # type: ignore[dict-item]
    response = client.request(method, path, **kw)  # type: ignore[arg-type]
    client.cookies.clear()
    return response


def get(client: AsgiClient, path: str, cookies: dict[str, str] | None = None) -> httpx.Response:
    return browse(client, "GET", path, cookies)


def post(client: AsgiClient, path: str, data: dict[str, str], cookies: dict[str, str] | None = None) -> httpx.Response:
    return browse(client, "POST", path, cookies, data=data)


def login_form(client: AsgiClient) -> tuple[str, dict[str, str]]:
    form = get(client, "/login")
    nonce = re.search(r'name="nonce" value="([^"]+)"', form.text)
    assert nonce is not None
    return nonce[1], {"nanum_login": form.cookies["nanum_login"]}


def login(client: AsgiClient, token: str) -> dict[str, str]:
    """Log in through the form; the cookies a browser would then send."""
    nonce, cookies = login_form(client)
    r = post(client, "/login", {"token": token, "nonce": nonce, "next": "/queue"}, cookies)
    assert r.status_code == 303 and r.headers["location"] == "/queue", r.text
    return {"nanum_session": r.cookies["nanum_session"]}


def csrf(client: AsgiClient, cookies: dict[str, str], path: str = "/") -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', get(client, path, cookies).text)
    assert found is not None
    return found[1]


@pytest.fixture
def node(client: AsgiClient, ctx: ServerContext) -> MonitoredAgent:
    agent = MonitoredAgent(client, "gpu-01", accounts.add_node(ctx, "gpu-01"), gpus=4)
    agent.beat()
    return agent


def test_pages_need_a_session(client: AsgiClient) -> None:
    r = get(client, "/queue")
    assert r.status_code == 303 and r.headers["location"] == "/login?next=%2Fqueue"
    assert get(client, "/").headers["location"] == "/login"
    assert get(client, "/ui/cluster.json").status_code == 401
    assert get(client, "/static/app.css").status_code == 200  # assets are public


def test_login_sets_a_strict_httponly_cookie(client: AsgiClient) -> None:
    nonce, cookies = login_form(client)
    r = post(client, "/login", {"token": ALICE, "nonce": nonce}, cookies)
    cookie = next(c for c in r.headers.get_list("set-cookie") if c.startswith("nanum_session="))
    assert "HttpOnly" in cookie and "SameSite=strict" in cookie and "Path=/" in cookie
    page = get(client, "/", {"nanum_session": r.cookies["nanum_session"]})
    assert page.status_code == 200 and "alice" in page.text
    assert "frame-ancestors 'none'" in page.headers["content-security-policy"]


def test_a_wrong_token_or_a_forged_login_is_refused(client: AsgiClient) -> None:
    nonce, cookies = login_form(client)
    r = post(client, "/login", {"token": "nope", "nonce": nonce}, cookies)
    assert r.status_code == 401 and "That token is not known here" in r.text and "nanum_session" not in r.cookies
    assert post(client, "/login", {"token": ALICE, "nonce": "guess"}, cookies).status_code == 403
    assert post(client, "/login", {"token": ALICE, "nonce": nonce}).status_code == 403  # no cookie: cross-site


def test_a_forged_or_stale_session_is_refused(client: AsgiClient, ctx: ServerContext) -> None:
    cookies = login(client, ALICE)
    _, expires, _ = cookies["nanum_session"].split(".")
    assert get(client, "/", {"nanum_session": f"1.{expires}.{'0' * 40}"}).status_code == 303
    assert get(client, "/", cookies).status_code == 200
    accounts.set_token(ctx, "alice", "a-new-token")  # a new token ends old sessions
    ctx.caches.callers.clear()
    assert get(client, "/", cookies).status_code == 303


def test_every_page_renders(client: AsgiClient, node: MonitoredAgent) -> None:
    cookies = login(client, ADMIN)
    j = submit(client, gpus=2)
    submit(client, gpus=4)
    tick(client)
    node.beat()
    node.read(util=64.0)
    node.beat()
    for path, expect in [("/", "64%"), ("/queue", "Why it waits"), (f"/jobs/{j['id']}", "GPU utilisation"),
                         ("/labs", "GPU-hours per day"), ("/nodes", "1 node · 4 GPUs"),
                         ("/admin", "Idle policy")]:  # fmt: skip
        r = get(client, path, cookies)
        assert r.status_code == 200 and expect in r.text, path
    grid = get(client, "/ui/cluster.json", cookies).json()
    assert grid["totals"] == {"total": 4, "busy": 2, "idle": 0, "free": 2, "rogue": 0, "drained": 0, "down": 0}
    tiles = {t["key"]: t for t in grid["nodes"][0]["tiles"]}
    assert tiles["gpu-01:0"]["who"] == f"#{j['id']} alice" and tiles["gpu-01:0"]["cls"] == "gpu busy u6"
    queue = get(client, "/ui/queue.json", cookies).json()
    assert [p["position"] for p in queue["pending"]] == [1] and queue["running"][0]["util"] == "64%"
    live = get(client, f"/ui/jobs/{j['id']}.json", cookies).json()
    assert live["state"] == "running" and live["util"] == "64%" and live["may_cancel"]


def test_a_few_gpu_seconds_are_not_drawn_as_a_full_bar() -> None:
    """A lab that used a few GPU-seconds this month (shown as "0.0 GPU-h") gets a sliver, not the whole chart; real
    usage still fills it."""
    from nanum.server.web import charts

    tiny = charts.columns([("12-07", 0.0), ("12-08", 0.002)], "GPU-h")
    assert tiny.max_value == 1.0 and tiny.bars[1].h < 0.01 * 160
    assert charts.rows([("fin", 0.002)], "GPU-h").bars[0].w <= 1
    busy = charts.columns([("12-07", 12.0), ("12-08", 48.0)], "GPU-h")
    assert busy.max_value == 48.0 and busy.bars[1].h == 4 * busy.bars[0].h


def test_the_labs_page_reads_this_months_usage_once_for_every_lab(
    client: AsgiClient, node: MonitoredAgent, ctx: ServerContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    """This month's usage of every lab (it reads every running job) is read once for the Labs page, not once a lab:
    each lab still shows what `nanum lab show` says of it."""
    from nanum.server.services import budgets, labs
    from nanum.server.web import data

    submit(client, gpus=2)
    submit(client, token=BOB, lab="nlp", gpus=1)
    tick(client)
    node.beat()
    moment = ctx.clock() + 3600.0  # an hour on: the running jobs have used GPU-hours
    ctx.clock = lambda: moment
    reads = count_calls(monkeypatch, budgets, "month_seconds")
    r = get(client, "/labs", login(client, ADMIN))
    assert r.status_code == 200 and len(reads) == 1
    shown = {lab["name"]: lab["used_gpu_hours"] for lab in data.labs_page(ctx)}
    assert shown == {name: labs.lab_detail(ctx, name)["used_gpu_hours"] for name in shown}
    assert shown["vision"] == pytest.approx(2.0, abs=0.01) and shown["nlp"] == pytest.approx(1.0, abs=0.01)


def test_a_small_clusters_live_data_shows_a_start_at_once_and_a_large_ones_is_built_once_for_every_viewer(
    client: AsgiClient, node: MonitoredAgent, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The Cluster page's live data and `/metrics` read one view, and the Queue page and its live data one queue:
    built for each request where that is quick, shared for a second where building it is slow (a large cluster;
    here, by lowering the threshold)."""
    from nanum.server import context
    from nanum.server.services import cluster
    from nanum.server.web import data

    builds = count_calls(monkeypatch, cluster, "cluster")
    monkeypatch.setattr(context, "SHARE_AFTER_S", 10.0)  # no build of a small cluster takes as long, however busy
    cookies, bobs = login(client, ALICE), login(client, BOB)
    assert get(client, "/ui/cluster.json", cookies).json()["totals"]["busy"] == 0
    submit(client, gpus=2)
    tick(client)
    assert get(client, "/ui/cluster.json", cookies).json()["totals"]["busy"] == 2  # seen at once
    assert len(builds) == 2
    monkeypatch.setattr(context, "SHARE_AFTER_S", 0.0)
    monkeypatch.setattr(context, "SHARE_FOR_S", 60.0)  # however slow the requests below
    first = get(client, "/ui/cluster.json", cookies)
    again = get(client, "/ui/cluster.json", bobs)
    metrics = get(client, "/metrics").text
    assert len(builds) == 3 and again.content == first.content
    assert 'nanum_gpus{state="busy"} 2.0' in metrics
    queues = count_calls(monkeypatch, data, "queue")
    assert get(client, "/queue", cookies).status_code == 200
    assert get(client, "/ui/queue.json", cookies).json()["running"][0]["user"] == "alice"
    assert len(queues) == 1


def test_large_live_data_goes_gzipped_to_a_browser_that_takes_it(
    client: AsgiClient, node: MonitoredAgent, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Live data past `GZIP_FROM` bytes is sent gzipped where the request accepts it, plain otherwise; the
    pages themselves never are (their forms carry a CSRF token)."""
    from nanum.server.web import pages

    cookies = login(client, ALICE)
    submit(client, gpus=2)
    tick(client)
    small = browse(client, "GET", "/ui/cluster.json", cookies, headers={"Accept-Encoding": "gzip"})
    assert "content-encoding" not in small.headers  # a few hundred bytes: not worth it
    monkeypatch.setattr(pages, "GZIP_FROM", 0)
    for path in ("/ui/cluster.json", "/ui/queue.json"):
        packed = browse(client, "GET", path, cookies, headers={"Accept-Encoding": "gzip, deflate"})
        plain = browse(client, "GET", path, cookies, headers={"Accept-Encoding": "identity"})
        assert packed.headers["content-encoding"] == "gzip" and "content-encoding" not in plain.headers, path
        assert packed.headers["vary"] == "Accept-Encoding" and packed.json().keys() == plain.json().keys()
    assert packed.json()["running"][0]["user"] == "alice"
    page = browse(client, "GET", "/", cookies, headers={"Accept-Encoding": "gzip"})
    assert page.status_code == 200 and "content-encoding" not in page.headers


def test_a_long_queue_lists_its_first_jobs_and_counts_the_rest(
    client: AsgiClient, node: MonitoredAgent, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The queue page lists the waiting jobs that start first (`QUEUE_SHOWN` of them) and says how many more
    wait, in the page and in its live updates."""
    from nanum.server.web import data

    monkeypatch.setattr(data, "QUEUE_SHOWN", 2)
    cookies = login(client, ALICE)
    submit(client, gpus=4)
    for p in (10, 90, 50):
        submit(client, gpus=4, priority=p)
    tick(client)
    shown = client.get("/api/v1/jobs?state=pending", headers=auth(ALICE)).json()
    by_start = sorted(shown, key=lambda j: (j["estimated_start"], -j["priority"], j["id"]))  # as the queue orders
    queue = get(client, "/ui/queue.json", cookies).json()
    assert queue["waiting"] == 3
    assert [(p["position"], p["id"]) for p in queue["pending"]] == [(1, by_start[0]["id"]), (2, by_start[1]["id"])]
    page = get(client, "/queue", cookies).text
    assert '<span class="count" data-count="pending">3</span>' in page
    assert "and 1 more; <code>nanum ps</code> lists every one" in page
    assert f'href="/jobs/{by_start[2]["id"]}"' not in page


def test_only_the_owner_or_an_admin_may_cancel(client: AsgiClient, node: MonitoredAgent) -> None:
    j = submit(client, ALICE, gpus=1)
    bob = login(client, BOB)
    token = csrf(client, bob, f"/jobs/{j['id']}")
    page = get(client, f"/jobs/{j['id']}", bob).text
    assert "Cancel job" not in page and "Only alice or an admin can cancel this job." in page
    assert "can read this job's log" in page
    r = post(client, f"/jobs/{j['id']}/cancel", {"csrf": token}, bob)
    assert r.status_code == 403 and "Refused: job" in r.text and "belongs to another user" in r.text
    assert job(client, j["id"])["state"] == "pending"
    alice = login(client, ALICE)
    assert post(client, f"/jobs/{j['id']}/cancel", {"csrf": token}, alice).status_code == 403  # bob's token
    r = post(client, f"/jobs/{j['id']}/cancel", {"csrf": csrf(client, alice)}, alice)
    assert r.status_code == 303 and job(client, j["id"])["state"] == "cancelled"


def test_a_held_job_is_released_from_its_page_by_its_owner(client: AsgiClient, node: MonitoredAgent) -> None:
    j = submit(client, ALICE, gpus=1, hold=True)
    bob, alice = login(client, BOB), login(client, ALICE)
    assert "Release job" not in get(client, f"/jobs/{j['id']}", bob).text
    r = post(client, f"/jobs/{j['id']}/release", {"csrf": csrf(client, bob, f"/jobs/{j['id']}")}, bob)
    assert r.status_code == 403 and "belongs to another user" in r.text and job(client, j["id"])["state"] == "held"
    assert "Release job" in get(client, f"/jobs/{j['id']}", alice).text
    r = post(client, f"/jobs/{j['id']}/release", {"csrf": csrf(client, alice)}, alice)
    assert r.status_code == 303 and job(client, j["id"])["state"] != "held"
    assert "Release job" not in get(client, f"/jobs/{j['id']}", alice).text
    r = post(client, f"/jobs/{j['id']}/release", {"csrf": csrf(client, alice)}, alice)
    assert r.status_code == 409 and "only a held job can be released" in r.text


def test_the_admin_page_is_for_admins(client: AsgiClient) -> None:
    alice = login(client, ALICE)
    assert get(client, "/admin", alice).status_code == 403
    assert post(client, "/admin/labs", {"csrf": csrf(client, alice), "name": "robotics"}, alice).status_code == 403
    admin = login(client, ADMIN)
    token = csrf(client, admin, "/admin")
    r = post(client, "/admin/labs", {"csrf": token, "name": "robotics", "guaranteed_gpus": "2"}, admin)
    assert r.status_code == 303
    r = post(client, "/admin/labs/robotics", {"csrf": token, "max_gpus": "x"}, admin)
    assert r.status_code == 400 and "&#39;x&#39; is not a number" in r.text
    r = post(client, "/admin/users", {"csrf": token, "name": "erin", "labs": "robotics", "email": "e@x.org"}, admin)
    assert r.status_code == 200 and "Token for <b>erin</b>" in r.text
    r = post(client, "/admin/idle", {"csrf": token, "batch_flag_s": "45", "batch_release_s": "never"}, admin)
    assert r.status_code == 303
    policy = client.get("/api/v1/monitoring/idle", headers={"Authorization": f"Bearer {ALICE}"}).json()["policy"]
    assert policy["batch_flag_s"] == 2700 and policy["batch_release_s"] is None
    labs = {lab["name"]: lab for lab in client.get("/api/v1/labs", headers={"Authorization": f"Bearer {ADMIN}"}).json()}
    assert labs["robotics"]["guaranteed_gpus"] == 2


def test_logout_needs_the_csrf_token(client: AsgiClient) -> None:
    alice = login(client, ALICE)
    assert post(client, "/logout", {"csrf": ""}, alice).status_code == 403
    r = post(client, "/logout", {"csrf": csrf(client, alice)}, alice)
    assert r.status_code == 303 and 'nanum_session=""' in r.headers["set-cookie"]


def test_login_never_redirects_off_site(client: AsgiClient) -> None:
    assert 'name="next" value="/"' in get(client, "/login?next=//evil.example/").text


def test_an_arrays_tasks_are_named_as_ps_names_them(client: AsgiClient, node: MonitoredAgent) -> None:
    """The queue page and a task's page say `12_1`, as `nanum ps --expand` and the reasons do, linking to the
    task's job id."""
    cookies = login(client, ALICE)
    submit(client, gpus=0)  # so that the tasks' job ids differ from the array's id and task indices
    array = int(submit(client, gpus=4, array="0-1", time_limit_s=600)["id"])  # type: ignore[call-overload]
    tick(client)
    node.beat()
    queue = get(client, "/ui/queue.json", cookies).json()
    running = next(r for r in queue["running"] if r["ref"] == f"{array}_0")
    [waiting] = queue["pending"]
    assert waiting["ref"] == f"{array}_1" and waiting["id"] != array and f"job {array}_0" in waiting["reason"]
    page = get(client, "/queue", cookies).text
    assert f'<a href="/jobs/{waiting["id"]}">{array}_1</a>' in page
    assert f'<a href="/jobs/{running["id"]}">{array}_0</a>' in page
    assert f"<h1>Job {array}_1 " in get(client, f"/jobs/{waiting['id']}", cookies).text
