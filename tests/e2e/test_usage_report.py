"""`nanum report usage --format html` on a real `nanum up`'s history: one self-contained file that Chromium shows
offline, charts included (screenshot into $NANUM_SCREENSHOTS, default tests/e2e/screenshots/)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.cluster import Cluster, job_account
from tests.e2e.test_dashboard import CHROMIUM, CHROMIUM_ARGS, SHOTS

pytestmark = pytest.mark.e2e

from playwright.sync_api import sync_playwright  # noqa: E402


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    c = Cluster(tmp_path_factory.mktemp("nanum-report"), extra_env={"NANUM_SAMPLE_INTERVAL": "0.5"})
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


def test_html_usage_report_opens_offline_with_its_charts(cluster: Cluster, workdir: Path, tmp_path: Path) -> None:
    ids = [cluster.submit("alice", "-e", "NANUM_SIM_UTIL=70", "--gpus", "2", "--", "sleep", "4", cwd=workdir),
           cluster.submit("bob", "-e", "NANUM_SIM_UTIL=5", "--gpus", "1", "--", "sleep", "4", cwd=workdir),
           cluster.submit("bob", "--gpus", "2", "--", "sleep", "2", cwd=workdir)]
    for i in ids:
        cluster.wait_state(i, "completed", timeout=60)
    as_json = cluster.nanum("report", "usage", "--since", "1d", "--format", "json")
    assert as_json.returncode == 0, as_json.stderr
    report = json.loads(as_json.stdout)
    labs = {r["key"]: r for r in report["rows"]}
    assert set(labs) == {"vision", "nlp"} and report["gpus"] == 4
    assert labs["vision"]["gpu_util_percent"] > labs["nlp"]["gpu_util_percent"]  # 70% against 5% (and unmeasured)

    page_file = tmp_path / "usage.html"
    written = cluster.nanum("report", "usage", "--since", "1d", "--format", "html", "-o", str(page_file))
    assert written.returncode == 0, written.stderr
    text = page_file.read_text()
    assert "http://" not in text and "https://" not in text and "<script" not in text
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1200, "height": 900})
        outside: list[str] = []
        page.route("**/*", lambda route: (outside.append(route.request.url), route.abort())
                   if not route.request.url.startswith(("file:", "data:")) else route.continue_())
        page.goto(page_file.as_uri())
        widths = page.eval_on_selector_all("img", "imgs => imgs.map(i => i.naturalWidth)")
        assert len(widths) == 3 and all(w > 0 for w in widths)
        assert "GPU usage from" in page.inner_text("h1") and "Top users" in page.inner_text("body")
        SHOTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(SHOTS / "usage-report.png"), full_page=True)
        browser.close()
    assert outside == []
