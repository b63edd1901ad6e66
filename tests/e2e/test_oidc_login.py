"""Single sign-on end to end: a real OpenID Connect provider (Authlib's, over HTTP), a real `nanum up
--oidc-issuer ...`, the real `nanum` and Chromium. A person logs in to the dashboard through the provider's page
and lands in the labs of their groups; `nanum login --oidc` shows a code, the person approves it at the
provider, and the saved token submits a job that runs as their Unix account."""

from __future__ import annotations

import json
import pwd
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.cluster import Cluster, job_account, nanum_command
from tests.oidc_provider import Provider

pytestmark = pytest.mark.e2e

CHROMIUM = "/usr/bin/chromium"
PASSWORD = "sso-pw-1"


@pytest.fixture(scope="module")
def provider() -> Iterator[Provider]:
    # A public client (PKCE in the browser, the device grant in a shell), at "localhost": another site than the
    # nanum at 127.0.0.1 to the browser, as a real provider is, so the cookies must survive cross-site redirects.
    with Provider(client_id="nanum-cli", host="localhost") as p:
        p.add_user(job_account(), PASSWORD, groups=("/vision", "/robotics-managers", "/staff users"))
        yield p


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory, provider: Provider) -> Iterator[Cluster]:
    c = Cluster(tmp_path_factory.mktemp("nanum-oidc"), extra_args=[
        "--oidc-issuer", provider.issuer, "--oidc-client-id", "nanum-cli", "--oidc-name", "Uni SSO",
        "--oidc-manager-group", "^/(.*)-managers$", "--oidc-token-days", "7"])
    try:
        c.start()
    except RuntimeError as exc:
        pytest.fail(str(exc))
    try:
        yield c
    finally:
        c.stop()


def test_nanum_login_oidc_by_the_device_flow_then_submit(cluster: Cluster, provider: Provider, workdir: Path) -> None:
    account = job_account()
    assert f"People log in with single sign-on ({provider.issuer}): nanum login --oidc {cluster.url}" in \
        cluster.log_tail(100)
    env = cluster.env()
    login = subprocess.Popen([*nanum_command(), "login", "--oidc", "--server", cluster.url], env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert login.stdout is not None
        shown = login.stdout.readline() + login.stdout.readline()
        found = re.search(r"open (\S+)\nand enter the code (\S+)", shown)
        assert found, shown
        assert found[1].startswith(f"{provider.issuer}/device")
        assert provider.approve_device(found[2], account, "wrong").status_code == 401
        assert provider.approve_device(found[2], account, PASSWORD).status_code == 200
        out, err = login.communicate(timeout=60)
    finally:
        login.kill()
    assert login.returncode == 0, err
    assert f"Logged in to {cluster.url} as {account}" in out and "the token expires" in out
    tokens = json.loads(subprocess.run([*nanum_command(), "token", "list", "--json"], env=env, capture_output=True,
                                       text=True, timeout=60).stdout)
    assert tokens[-1]["name"].startswith("login on ") and tokens[-1]["expires"]
    submitted = subprocess.run([*nanum_command(), "submit", "--json", "--gpus", "0", "--", "sh", "-c",
                                "id -u; id -un"], env=env, capture_output=True, text=True, timeout=60, cwd=workdir)
    assert submitted.returncode == 0, submitted.stderr
    job = json.loads(submitted.stdout)
    assert (job["user"], job["lab"]) == (account, "vision")
    cluster.wait_state(job["id"], "completed")
    logs = subprocess.run([*nanum_command(), "logs", str(job["id"])], env=env, capture_output=True, text=True,
                          timeout=60).stdout.split()
    assert logs == [str(pwd.getpwnam(account).pw_uid), account]


def test_a_denied_device_login_says_so(cluster: Cluster, provider: Provider, tmp_path: Path) -> None:
    env = {**cluster.env(), "XDG_CONFIG_HOME": str(tmp_path / "config")}
    login = subprocess.Popen([*nanum_command(), "login", "--oidc", cluster.url], env=env, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    try:
        assert login.stdout is not None
        code = re.search(r"enter the code (\S+)", login.stdout.readline() + login.stdout.readline())
        assert code
        provider.approve_device(code[1], job_account(), PASSWORD, allow=False)
        _, err = login.communicate(timeout=60)
    finally:
        login.kill()
    assert (login.returncode, err) == (2, "nanum: error: the login was denied at the provider\n")
    assert not (tmp_path / "config").exists() or "token" not in "".join(
        p.read_text() for p in (tmp_path / "config").rglob("*") if p.is_file())


@pytest.mark.skipif(not Path(CHROMIUM).exists(), reason=f"needs Debian's chromium at {CHROMIUM}")
def test_the_dashboard_logs_in_through_the_provider(cluster: Cluster, provider: Provider) -> None:
    from playwright.sync_api import expect, sync_playwright

    account = job_account()
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--headless", "--no-sandbox", "--disable-gpu"])
        try:
            page = browser.new_page()
            page.goto(f"{cluster.url}/labs")
            page.wait_for_url(re.compile(r"/login\?next="))
            page.click("text=Log in with Uni SSO")
            page.wait_for_url(re.compile(re.escape(provider.issuer) + "/authorize"))
            page.fill("#username", account)
            page.fill("#password", "wrong")
            page.click("#sign-in")
            expect(page.locator(".error")).to_have_text("Wrong username or password.")
            page.fill("#username", account)
            page.fill("#password", PASSWORD)
            page.click("#sign-in")
            page.wait_for_url(f"{cluster.url}/labs")
            expect(page.locator("body")).to_contain_text(account)
            expect(page.locator("body")).to_contain_text("vision")
            expect(page.locator("body")).to_contain_text("robotics")
        finally:
            browser.close()


def test_an_admin_disables_a_user_whose_queued_job_then_waits(cluster: Cluster, workdir: Path) -> None:
    """Runs after the device login above: the person's saved token is in the cluster's config."""
    account = job_account()
    env = cluster.env()

    def as_person(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*nanum_command(), *args], env=env, capture_output=True, text=True, timeout=60,
                              cwd=workdir)

    big = json.loads(as_person("submit", "--json", "--gpus", "4", "--", "sleep", "60").stdout)["id"]
    cluster.wait_state(big, "running")
    queued = json.loads(as_person("submit", "--json", "--gpus", "1", "--", "true").stdout)["id"]
    disabled = cluster.nanum("user", "disable", account)
    assert (disabled.returncode, disabled.stdout) == (
        0, f"User {account} is disabled: their tokens and sessions are refused, their queued jobs wait\n")
    refused = as_person("ps")
    assert (refused.returncode, refused.stderr) == (
        2, f"nanum: error: user {account} is disabled; ask an admin if that is a mistake\n")
    assert cluster.nanum("cancel", str(big)).returncode == 0
    cluster.wait_state(big, "cancelled")
    shown = cluster.job(queued)
    assert (shown["state"], shown["reason"]) == (
        "pending", "owner's account is disabled; an admin can enable it again (nanum user enable NAME)")
    assert cluster.nanum("user", "enable", account).stdout == f"User {account} is enabled again\n"
    cluster.wait_state(queued, "completed")
    assert as_person("ps").returncode == 0
