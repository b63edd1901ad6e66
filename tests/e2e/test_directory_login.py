"""Campus login end to end: a real slapd, a real `nanum up --ldap-url ...`, the real `nanum` and Chromium. A
directory user logs in by the CLI (password not echoed, read here from stdin) and by the web form, lands in the
labs of their groups, runs a job as their directory uid, and is refused once the directory disables them."""

from __future__ import annotations

import json
import pwd
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.directory import Directory
from tests.e2e.cluster import Cluster, job_account, nanum_command

pytestmark = pytest.mark.e2e

CHROMIUM = "/usr/bin/chromium"
PASSWORD = "campus-pw-1"


@pytest.fixture(scope="module")
def directory(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Directory]:
    with Directory(tmp_path_factory.mktemp("slapd")) as d:
        account = job_account()  # a real account of this machine, so that its jobs can run here
        d.add_user(account, uid_number=pwd.getpwnam(account).pw_uid, password=PASSWORD,
                   groups=("vision-lab", "staff"))
        yield d


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory, directory: Directory) -> Iterator[Cluster]:
    root = tmp_path_factory.mktemp("nanum-ldap")
    secret = root / "bind-password"
    secret.write_text(directory.admin_password + "\n")
    secret.chmod(0o600)
    c = Cluster(root, extra_args=[
        "--ldap-url", directory.url, "--ldap-base", directory.base, "--ldap-bind-dn", directory.admin_dn,
        "--ldap-bind-password-file", str(secret), "--ldap-group-lab", "cn=(.*)-lab,ou=groups",
        "--ldap-recheck", "0"])
    try:
        c.start()
    except RuntimeError as exc:
        pytest.fail(str(exc))
    try:
        yield c
    finally:
        c.stop()


def as_person(
    cluster: Cluster, *args: str, stdin: str = "", cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    """`nanum ARGS` as the person at their own shell: their saved credentials, no NANUM_TOKEN."""
    return subprocess.run([*nanum_command(), *args], env=cluster.env(), input=stdin, capture_output=True, text=True,
                          timeout=60, cwd=cwd)


def test_a_directory_user_logs_in_by_cli_and_runs_as_their_directory_uid(
    cluster: Cluster, directory: Directory, workdir: Path
) -> None:
    account = job_account()
    assert f"People log in with their directory account ({directory.url}): nanum login {cluster.url}" in \
        cluster.log_tail(100)
    wrong = as_person(cluster, "login", cluster.url, "--user", account, "--password-stdin", stdin="nope\n")
    assert (wrong.returncode, wrong.stderr) == (2, "nanum: error: wrong username or password\n")
    done = as_person(cluster, "login", cluster.url, "--user", account, "--password-stdin", stdin=PASSWORD + "\n")
    assert done.returncode == 0, done.stderr
    assert f"Logged in to {cluster.url} as {account}" in done.stdout and "the token expires" in done.stdout
    assert PASSWORD not in done.stdout + done.stderr
    me = json.loads(as_person(cluster, "token", "list", "--json").stdout)
    assert me[-1]["name"].startswith("login on ") and me[-1]["expires"]
    submitted = as_person(cluster, "submit", "--json", "--gpus", "0", "--", "sh", "-c", "id -u; id -un",
                          cwd=workdir)
    assert submitted.returncode == 0, submitted.stderr
    job = json.loads(submitted.stdout)
    assert job["lab"] == "vision"
    cluster.wait_state(job["id"], "completed")
    out = as_person(cluster, "logs", str(job["id"])).stdout.split()
    assert out == [str(pwd.getpwnam(account).pw_uid), account]


@pytest.mark.skipif(not Path(CHROMIUM).exists(), reason=f"needs Debian's chromium at {CHROMIUM}")
def test_the_web_form_logs_a_directory_user_in(cluster: Cluster) -> None:
    from playwright.sync_api import expect, sync_playwright

    account = job_account()
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--headless", "--no-sandbox", "--disable-gpu"])
        try:
            page = browser.new_page()
            page.goto(f"{cluster.url}/login?next=/labs")
            page.fill("#username", account)
            page.fill("#password", "wrong")
            page.click("form[data-login=password] button")
            expect(page.locator(".error")).to_have_text("wrong username or password")
            page.fill("#password", PASSWORD)
            page.click("form[data-login=password] button")
            page.wait_for_url(f"{cluster.url}/labs")
            expect(page.locator("body")).to_contain_text(account)
            expect(page.locator("body")).to_contain_text("vision")
        finally:
            browser.close()


def test_a_user_the_directory_disables_is_refused(cluster: Cluster, directory: Directory) -> None:
    directory.add_user("leaver", uid_number=61001, password="bye-pw", groups=("vision-lab",))
    env = {**cluster.env(), "XDG_CONFIG_HOME": str(cluster.root / "leaver-config")}
    login = subprocess.run([*nanum_command(), "login", cluster.url, "--user", "leaver", "--password-stdin"],
                           env=env, input="bye-pw\n", capture_output=True, text=True, timeout=60)
    assert login.returncode == 0, login.stderr
    directory.disable("leaver")
    ps = subprocess.run([*nanum_command(), "ps"], env=env, capture_output=True, text=True, timeout=60)
    assert ps.returncode == 2
    assert ps.stderr == ("nanum: error: user leaver is disabled: the directory account is expired; ask an admin if "
                         "that is a mistake\n")
    again = subprocess.run([*nanum_command(), "login", cluster.url, "--user", "leaver", "--password-stdin"],
                           env=env, input="bye-pw\n", capture_output=True, text=True, timeout=60)
    assert again.stderr == "nanum: error: the directory account leaver is expired; ask your administrator\n"
