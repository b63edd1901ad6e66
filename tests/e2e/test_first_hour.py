"""A new user's first hour against a real `nanum up` as root, tried as they would: the README's sharing example
as written, a first job submitted as root, and /docs in Chromium with no way out to the internet."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.cluster import Cluster, job_account

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = "/usr/bin/chromium"


@pytest.fixture(scope="module")
def fresh(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """A cluster as `make run` leaves it: the admin, no labs besides `default`, no other users."""
    c = Cluster(tmp_path_factory.mktemp("nanum-first-hour"))
    try:
        c.start()
    except RuntimeError as exc:
        pytest.fail(str(exc))
    try:
        yield c
    finally:
        c.stop()


def readme_block(title: str) -> list[str]:
    text = (ROOT / "README.md").read_text()
    section = text[text.index(f"## {title}\n"):]
    block = section[section.index("```sh\n") + 6:]
    return block[:block.index("```")].splitlines()


def test_the_readmes_sharing_example_runs_as_written(fresh: Cluster) -> None:
    lines = [line.split("#")[0].split() for line in readme_block("Sharing between labs")]
    labs = [words for words in lines if words[:2] == ["nanum", "lab"]]
    assert labs[0][:4] == ["nanum", "lab", "add", "vision"]
    for words in labs:
        result = fresh.nanum(*words[1:])
        assert result.returncode == 0, (words, result.stderr)
    shown = json.loads(fresh.nanum("lab", "show", "vision", "--json").stdout)
    assert shown["guaranteed_gpus"] == 8 and shown["max_gpus"] == 16


def test_a_first_job_as_root_is_refused_with_what_to_do(fresh: Cluster) -> None:
    if os.geteuid() != 0:
        pytest.skip("`nanum up` makes its admin the account that runs it; this test needs that to be root")
    result = fresh.nanum("submit", "--gpus", "1", "--", "true")
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.startswith("nanum: error: user root's jobs would run as root, which this server refuses;")
    assert "nanum user add NAME --unix-user NAME" in result.stderr
    assert fresh.api("GET", "/jobs", query="all=true") == []


@pytest.mark.skipif(not Path(CHROMIUM).exists(), reason=f"needs Debian's chromium at {CHROMIUM}")
def test_api_docs_render_with_no_internet(fresh: Cluster) -> None:
    from playwright.sync_api import Route, expect, sync_playwright

    refused: list[str] = []

    def local_only(route: Route) -> None:
        if route.request.url.startswith(fresh.url):
            route.continue_()
        else:
            refused.append(route.request.url)
            route.abort()

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--headless", "--no-sandbox", "--disable-gpu"])
        try:
            page = browser.new_page()
            page.route("**/*", local_only)
            page.goto(f"{fresh.url}/docs")
            expect(page.locator(".opblock").first).to_be_visible(timeout=15_000)
            assert page.locator(".opblock").count() > 20
            expect(page.locator(".info .title")).to_contain_text(re.compile("nanum"))
        finally:
            browser.close()
    assert refused == []


def test_the_readmes_python_example_runs_as_written(fresh: Cluster) -> None:
    text = (ROOT / "README.md").read_text()
    section = text[text.index("## From Python\n"):]
    code = section[section.index("```python\n") + 10:]
    code = code[:code.index("```")]
    fresh.add_user("pat", job_account(), "default")
    result = subprocess.run([sys.executable, "-c", code], env=fresh.env(fresh.tokens["pat"]), capture_output=True,
                            text=True, timeout=120)  # the job runs in the home directory of pat's account
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        "completed 0 on GPU 0",
        "422 unknown field 'gpu'; docs/api.md lists the fields this request takes",
    ]
    assert [j["name"] for j in fresh.api("GET", "/jobs", query="all=true")] == ["hello"]
