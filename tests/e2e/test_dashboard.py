"""The dashboard in a real headless Chromium against a real `nanum up` (4 simulated GPUs, readings every half
second): log in, watch the grid change as a job starts, open the job page, cancel a job, be refused on someone
else's, see an idle job flagged and a GPU used outside nanum kept out of scheduling, submit a job from the Submit
page. Every page is photographed (into $NANUM_SCREENSHOTS, default tests/e2e/screenshots/; docs/img/submit.png is
a copy of submit.png)."""

from __future__ import annotations

import os
import re
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.cluster import Cluster, job_account, remove, shared_dir

pytestmark = pytest.mark.e2e

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
SHOTS = Path(os.environ.get("NANUM_SCREENSHOTS", Path(__file__).parent / "screenshots"))
WAIT_MS = 15_000

if not Path(CHROMIUM).exists():
    pytest.skip(f"needs Debian's chromium at {CHROMIUM} (apt-get install chromium)", allow_module_level=True)

from playwright.sync_api import Browser, Page, expect, sync_playwright  # noqa: E402

expect.set_options(timeout=WAIT_MS)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    c = Cluster(tmp_path_factory.mktemp("nanum-web"), extra_env={"NANUM_SAMPLE_INTERVAL": "0.5"})
    try:
        c.start()
    except RuntimeError as exc:
        pytest.fail(str(exc))
    account = job_account()
    c.add_user("alice", account, "vision")
    c.add_user("bob", account, "nlp")
    try:
        yield c
    finally:
        c.stop()


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with sync_playwright() as p:
        found = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield found
        found.close()


@pytest.fixture(scope="module")
def workdir() -> Iterator[Path]:
    path = shared_dir("nanum-web-")
    yield path
    remove(path)


@pytest.fixture(autouse=True)
def idle_cluster(cluster: Cluster) -> Iterator[None]:
    """Each test leaves no job behind."""
    yield
    for job in cluster.api("GET", "/jobs"):
        cluster.api("POST", f"/jobs/{job['id']}/cancel", ok=(200, 409))
    deadline = time.monotonic() + 20
    while cluster.api("GET", "/jobs", query="state=running") and time.monotonic() < deadline:
        time.sleep(0.1)


def login(browser: Browser, cluster: Cluster, token: str) -> Page:
    page = browser.new_page(viewport={"width": 1400, "height": 900})
    page.set_default_timeout(WAIT_MS)
    page.goto(cluster.url + "/queue")
    expect(page).to_have_url(re.compile(r"/login\?next=%2Fqueue$"))
    page.fill("#token", token)
    page.click("button[type=submit]")
    expect(page).to_have_url(cluster.url + "/queue")
    return page


def shot(page: Page, name: str) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / f"{name}.png"), full_page=True)


def tile(page: Page, gpu: int) -> object:
    return page.locator(f'[data-gpu$=":{gpu}"]')


def test_the_grid_updates_as_a_job_starts_and_the_owner_cancels_it(
    browser: Browser, cluster: Cluster, workdir: Path
) -> None:
    page = login(browser, cluster, cluster.tokens["alice"])
    page.goto(cluster.url + "/")
    expect(page.locator('[data-total="free"]')).to_have_text("4")
    shot(page, "cluster-idle")
    script = "for i in $(seq 1 600); do echo step $i loss 0.$((1000 - i)); sleep 0.2; done"
    job_id = cluster.submit("alice", "-e", "NANUM_SIM_UTIL=70", "--gpus", "2", "--", "sh", "-c", script, cwd=workdir)
    first = tile(page, 0)
    expect(first).to_have_class(re.compile(r"\bbusy\b"))  # no reload: the page polls
    expect(first.locator(".who")).to_have_text(f"#{job_id} alice")
    expect(first.locator(".util")).to_have_text(re.compile(r"^(6[5-9]|7[0-5])%$"))
    expect(page.locator('[data-total="busy"]')).to_have_text("2")
    shot(page, "cluster")

    first.click()
    expect(page).to_have_url(f"{cluster.url}/jobs/{job_id}")
    expect(page.locator('[data-field="state"]')).to_have_text("running")
    expect(page.locator("[data-log]")).to_contain_text("step 3 loss")
    expect(page.locator('polyline[data-series="util"]')).to_have_attribute(
        "points", re.compile(r"[\d.]+,[\d.]+ [\d.]+,[\d.]+")
    )
    shot(page, "job")

    page.once("dialog", lambda dialog: dialog.accept())
    page.click("text=Cancel job")
    expect(page.locator('[data-field="state"]')).to_have_text("cancelled")
    expect(page.locator("[data-cancel]")).to_be_hidden()
    expect(page.locator("[data-events]")).to_contain_text("cancelled by alice")
    shot(page, "job-cancelled")
    page.close()


def test_a_page_in_a_hidden_tab_stops_asking_and_catches_up_when_shown(
    browser: Browser, cluster: Cluster, workdir: Path
) -> None:
    page = login(browser, cluster, cluster.tokens["alice"])
    # The tab's visibility as the browser would report it, switched here (a headless page is always visible).
    page.add_init_script("window.__hidden = false;"
                         " Object.defineProperty(document, 'hidden', {get: function () { return window.__hidden; }});")
    asked: list[float] = []
    page.on("request", lambda r: asked.append(time.monotonic()) if "/ui/cluster.json" in r.url else None)
    page.goto(cluster.url + "/")
    expect(page.locator('[data-total="free"]')).to_have_text("4")
    page.wait_for_timeout(3_000)
    assert asked, "the visible page asks for its live data"
    page.evaluate("window.__hidden = true; document.dispatchEvent(new Event('visibilitychange'))")
    page.wait_for_timeout(3_000)  # any ask already under way is answered; no new one starts
    hidden_at = time.monotonic()
    job_id = cluster.submit("alice", "--gpus", "1", "--", "sleep", "60", cwd=workdir)
    cluster.wait_state(job_id, "running")
    page.wait_for_timeout(6_000)
    assert not [t for t in asked if t > hidden_at], "a hidden page asked for its live data"
    expect(page.locator('[data-total="busy"]')).to_have_text("0")
    page.evaluate("window.__hidden = false; document.dispatchEvent(new Event('visibilitychange'))")
    expect(page.locator('[data-total="busy"]')).to_have_text("1", timeout=2_000)  # at once, not a poll later
    page.close()


def test_someone_elses_job_cannot_be_cancelled(browser: Browser, cluster: Cluster, workdir: Path) -> None:
    job_id = cluster.submit("bob", "--gpus", "1", "--", "sleep", "300", cwd=workdir)
    cluster.wait_state(job_id, "running")
    page = login(browser, cluster, cluster.tokens["alice"])
    page.goto(f"{cluster.url}/jobs/{job_id}")
    expect(page.get_by_text("Only bob or an admin can cancel this job.")).to_be_visible()
    expect(page.locator("text=Cancel job")).to_have_count(0)
    expect(page.get_by_text("Only bob or an admin can read this job's log.")).to_be_visible()
    # Send the cancel form anyway, with alice's own valid CSRF token: the server refuses.
    page.evaluate(
        """([id]) => {
            const form = document.createElement("form");
            form.method = "post"; form.action = "/jobs/" + id + "/cancel";
            const csrf = document.querySelector('input[name="csrf"]').cloneNode();
            form.appendChild(csrf); document.body.appendChild(form); form.submit();
        }""",
        [job_id],
    )
    expect(page.locator(".error")).to_have_text(
        f"Refused: job {job_id} belongs to another user; only its owner, a manager of its lab or an admin may do that"
    )
    shot(page, "job-refused")
    assert cluster.job(job_id)["state"] == "running"
    page.close()


def test_a_gpu_used_outside_nanum_is_shown_and_not_handed_out(
    browser: Browser, cluster: Cluster, workdir: Path
) -> None:
    stray = subprocess.Popen(["sleep", "300"])
    rogue = cluster.home / "agent" / "simulated-gpu-processes"
    try:
        rogue.write_text(f"3 {stray.pid} 4096\n")
        page = login(browser, cluster, cluster.admin_token)
        page.goto(cluster.url + "/")
        expect(tile(page, 3)).to_have_class(re.compile(r"\brogue\b"))
        expect(tile(page, 3).locator(".who")).to_have_text(re.compile(rf"^pid {stray.pid}"))
        expect(page.locator('[data-total="rogue"]')).to_have_text("1")
        whole = cluster.submit("alice", "--gpus", "4", "--", "sleep", "300", cwd=workdir)
        single = cluster.submit("bob", "--gpus", "3", "--", "sleep", "300", cwd=workdir)
        assert cluster.wait_state(single, "running")["allocation"][0]["gpus"] == [0, 1, 2]
        time.sleep(1.5)
        assert cluster.job(whole)["state"] == "pending"
        shot(page, "cluster-outside-nanum")
        page.goto(cluster.url + "/nodes")
        expect(page.locator(".stranger")).to_contain_text(f"pid {stray.pid}")
        shot(page, "nodes")
        cluster.api("POST", f"/jobs/{single}/cancel")
        stray.kill()  # the stranger leaves: the 4-GPU job gets the whole node
        cluster.wait_state(whole, "running")
        page.close()
    finally:
        stray.kill()
        stray.wait()
        rogue.unlink(missing_ok=True)


def test_an_idle_job_is_flagged_on_the_dashboard(browser: Browser, cluster: Cluster, workdir: Path) -> None:
    assert cluster.nanum("idle", "set", "--batch-flag", "2s").returncode == 0  # the admin's command line
    try:
        lazy = cluster.submit("alice", "-J", "waits-for-data", "-e", "NANUM_SIM_UTIL=0", "--", "sleep", "300",
                              cwd=workdir)  # fmt: skip
        busy = cluster.submit("bob", "-J", "bert-ft", "--gpus", "2", "--", "sleep", "300", cwd=workdir)
        cluster.wait_state(busy, "running")
        page = login(browser, cluster, cluster.tokens["bob"])
        expect(page.locator('[data-rows="running"]')).to_contain_text("idle")
        shot(page, "queue")
        page.goto(cluster.url + "/")
        expect(page.locator(".gpu.idle.flagged")).to_have_count(1)
        shot(page, "cluster-idle-flagged")
        ps = cluster.nanum("ps", user="bob").stdout
        assert re.search(rf"(?m)^\s*{lazy}\s+waits-for-data .* idle \d+s, flagged$", ps), ps
        page.goto(f"{cluster.url}/jobs/{lazy}")
        expect(page.locator("[data-events]")).to_contain_text("idle-flagged")
        expect(page.locator("[data-events]")).to_contain_text("GPU utilisation at most 5% (now 0%)")
        shot(page, "job-idle")
        page.close()
    finally:
        cluster.nanum("idle", "set", "--batch-flag", "inherit")


def test_a_long_queue_shows_its_first_jobs_and_counts_the_rest(
    browser: Browser, cluster: Cluster, workdir: Path
) -> None:
    """600 waiting tasks: the queue page lists the 500 that start first and says how many more wait; the live
    updates keep the count as the queue moves."""
    array = cluster.submit("alice", "--array", "0-600", "--gpus", "4", "--", "sleep", "300", cwd=workdir)
    try:
        cluster.wait_state(array, "running")  # task 0 holds every GPU; the other 600 wait
        page = login(browser, cluster, cluster.tokens["alice"])
        rows = page.locator('[data-rows="pending"] tr')
        expect(page.locator('[data-count="pending"]')).to_have_text("600")
        expect(rows).to_have_count(501)
        expect(rows.last).to_have_text("and 100 more; nanum ps lists every one")
        cluster.api("POST", f"/jobs/{array + 600}/cancel", query="one=true")  # one task fewer: the page follows
        expect(page.locator('[data-count="pending"]')).to_have_text("599")
        expect(rows.last).to_have_text("and 99 more; nanum ps lists every one")
        expect(rows).to_have_count(501)
        rows.last.scroll_into_view_if_needed()
        page.screenshot(path=str(SHOTS / "queue-long.png"))  # the end of the list, not all 500 rows
        page.close()
    finally:
        cluster.api("POST", f"/jobs/{array}/cancel")


def test_every_other_page(browser: Browser, cluster: Cluster, workdir: Path) -> None:
    cluster.api("PATCH", "/labs/vision", {"guaranteed_gpus": 2, "monthly_gpu_hours": 500})
    job_id = cluster.submit("alice", "--gpus", "1", "--", "sleep", "1", cwd=workdir)
    cluster.wait_state(job_id, "completed")
    page = login(browser, cluster, cluster.admin_token)
    for path, name, marker in [
        ("/labs", "labs", "GPU-hours per day, last 30 days"),
        ("/admin", "admin", "Idle policy"),
        (f"/jobs/{job_id}", "job-completed", "completed"),
        ("/reports", "reports", "nanum report usage --format html"),
    ]:
        page.goto(cluster.url + path)
        expect(page.locator("main")).to_contain_text(marker)
        shot(page, name)
    charts = page.locator("main figure img")
    assert charts.count() >= 1 and all(charts.nth(i).evaluate("i => i.naturalWidth > 0") for i in range(charts.count()))
    page.click("text=Log out")
    expect(page).to_have_url(cluster.url + "/login")
    shot(page, "login")
    page.goto(cluster.url + "/")
    expect(page).to_have_url(cluster.url + "/login")
    page.close()


def test_a_job_submitted_from_the_web_runs_and_shows_its_page(
    browser: Browser, cluster: Cluster, workdir: Path
) -> None:
    page = login(browser, cluster, cluster.tokens["alice"])
    page.click("header nav >> text=Submit")
    expect(page).to_have_url(cluster.url + "/submit")
    page.check("input[name=kind][value=notebook]")
    expect(page.locator("#command")).to_be_hidden()  # a notebook runs JupyterLab, not a command
    expect(page.locator("input[name=no_preempt]")).to_be_checked()  # as `nanum notebook`: never preempted
    page.check("input[name=kind][value=batch]")
    expect(page.locator("input[name=no_preempt]")).not_to_be_checked()
    script = "for i in $(seq 1 600); do echo web step $i; sleep 0.2; done"
    page.fill("#command", f"sh -c '{script}'")
    page.fill("#name", "web-train")
    page.fill("#gpus", "2")
    page.fill("#memory", "2G")
    page.fill("#time", "30m")
    page.fill("#workdir", str(workdir))
    page.fill("#env", "NANUM_SIM_UTIL=70\nSEED=1")
    page.check("input[name=no_preempt]")
    shot(page, "submit")
    page.fill("#time", "4x")
    page.click("form.submit button[type=submit]")
    expect(page.locator(".error")).to_contain_text("Refused: time limit: cannot read '4x'; give e.g. 90s, 30m, 4h")
    expect(page.locator("#command")).to_have_value(f"sh -c '{script}'")  # the form comes back as typed
    expect(page.locator("input[name=no_preempt]")).to_be_checked()
    shot(page, "submit-refused")
    page.fill("#time", "30m")
    page.click("form.submit button[type=submit]")
    expect(page).to_have_url(re.compile(rf"{re.escape(cluster.url)}/jobs/\d+$"))
    job_id = int(page.url.rsplit("/", 1)[1])
    expect(page.locator('[data-field="state"]')).to_have_text("running")
    expect(page.locator('[data-field="allocation"]')).to_have_text(re.compile(r"^\S+ GPU \d, \d$"))  # live
    expect(page.locator('[data-field="started"]')).to_have_text(re.compile(r"UTC$"))
    expect(page.locator("[data-log]")).to_contain_text("web step 3")
    shot(page, "submit-job")
    job = cluster.job(job_id)
    assert job["command"] == ["sh", "-c", script] and job["name"] == "web-train" and job["user"] == "alice"
    assert (job["gpus"], job["memory_mb"], job["time_limit_s"], job["preemptible"]) == (2, 2048, 1800, False)
    assert job["env"] == {"NANUM_SIM_UTIL": "70", "SEED": "1"} and job["workdir"] == str(workdir)
    page.close()
