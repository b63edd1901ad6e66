"""Interactive work against a real `nanum up`: a JupyterLab notebook reached only through the server's proxy
(a kernel runs code over the proxied websocket; other users and anonymous callers are refused; JupyterLab
itself refuses requests without the job's token; the idle rules release it), `nanum shell` in a real terminal,
and `nanum run` streaming a job's output and exiting with its code."""

from __future__ import annotations

import json
import os
import pwd
import re
import shutil
import subprocess
import sys
import sysconfig
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import pexpect
import pytest
from websockets.exceptions import InvalidStatus
from websockets.sync.client import connect

from tests.e2e.cluster import Cluster, job_account, nanum_command, remove, shared_dir

pytestmark = pytest.mark.e2e

pytest.importorskip("jupyterlab", reason="needs JupyterLab (pip install -e '.[dev]')")


def session_python(root: Path) -> str:
    """An interpreter the jobs' account may run, with this environment's packages (nanum, JupyterLab): the
    test's own where that account can run it, else a venv of the system's Python of the same version that
    reads these packages (a Python installed under /root is closed to other users)."""
    account = job_account()
    probe = ["su", account, "-s", "/bin/sh", "-c", f"{sys.executable} -c ''"]
    if os.geteuid() != 0 or subprocess.run(probe, capture_output=True).returncode == 0:
        return sys.executable
    system = Path("/usr/bin/python3")
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    found = subprocess.run([system, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"], capture_output=True,
                           text=True) if system.exists() else None
    if found is None or found.stdout.strip() != version:
        pytest.skip(f"the jobs' account cannot run {sys.executable}, and there is no /usr/bin/python3 {version}")
    venv = root / "session-python"
    subprocess.run([system, "-m", "venv", "--without-pip", venv], check=True)
    (venv / "lib" / f"python{version}" / "site-packages" / "nanum-tests.pth").write_text(
        f"import site; site.addsitedir({sysconfig.get_paths()['purelib']!r})\n")
    (venv / "share").symlink_to(Path(sys.prefix) / "share")  # JupyterLab's themes and extensions
    return str(venv / "bin" / "python")


def python_environment(cluster: Cluster) -> str:
    """A Python environment `lab-env` (nanum environment add --python) with `jupyter lab` in its bin/: the
    session Python's venv, or a copy of the test's when that is the test's own."""
    python = Path(cluster.extra_env["NANUM_SESSION_PYTHON"])
    prefix = python.parent.parent
    if python == Path(sys.executable):
        pytest.skip("needs the venv made for the jobs' account")
    jupyter = prefix / "bin" / "jupyter"
    jupyter.write_text(f'#!/bin/sh\n[ "$1" = lab ] && shift\nexec {python} -m jupyterlab "$@"\n')
    jupyter.chmod(0o755)
    added = cluster.nanum("environment", "add", "lab-env", "--python", str(prefix))
    assert added.returncode == 0, added.stderr
    return str(prefix)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    shared = shared_dir("sessions-python-")
    env = {"NANUM_SAMPLE_INTERVAL": "0.5", "NANUM_SESSION_PYTHON": session_python(shared)}
    c = Cluster(tmp_path_factory.mktemp("nanum-sessions"), extra_env=env)
    try:
        c.start()
    except RuntimeError as exc:
        pytest.fail(str(exc))
    account = job_account()
    # JupyterLab reopens what a user last had open (its workspace, in their home): start from its launcher.
    shutil.rmtree(Path(pwd.getpwnam(account).pw_dir) / ".jupyter" / "lab" / "workspaces", ignore_errors=True)
    c.add_user("alice", account, "vision")
    c.add_user("bob", account, "nlp")
    try:
        yield c
    finally:
        c.stop()
        remove(shared)


@pytest.fixture(scope="module")
def workdir() -> Iterator[Path]:
    path = shared_dir("sessions-e2e-")
    yield path
    remove(path)


def start_notebook(cluster: Cluster, workdir: Path, *args: str) -> tuple[int, str]:
    """`nanum notebook ARGS` as alice: its job id and the address it printed."""
    result = cluster.nanum("notebook", "--gpus", "1", "--time", "1h", *args, user="alice", cwd=workdir, timeout=180)
    assert result.returncode == 0, result.stderr + cluster.log_tail()
    url = result.stdout.strip()
    match = re.fullmatch(rf"{re.escape(cluster.url)}/notebooks/(\d+)/lab", url)
    assert match, result.stdout
    return int(match.group(1)), url


def http(url: str, token: str | None = None, method: str = "GET", body: object = None) -> tuple[int, bytes, dict]:
    """(status, body, headers) without following redirects."""
    class NoRedirect(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *args: object) -> None:
            return None

    data = json.dumps(body).encode() if body is not None else None
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    request = urllib.request.Request(url, data=data, method=method, headers=headers)
    try:
        with urllib.request.build_opener(NoRedirect).open(request, timeout=20) as r:
            return r.status, r.read(), dict(r.headers)
    except urllib.error.HTTPError as err:
        return err.code, err.read(), dict(err.headers)


def execute(cluster: Cluster, job_id: int, kernel: str, code: str, token: str) -> str:
    """Run `code` on the kernel over the proxied channels websocket; what it printed."""
    ws_url = cluster.url.replace("http://", "ws://") + f"/notebooks/{job_id}/api/kernels/{kernel}/channels"
    msg_id = uuid.uuid4().hex
    request = {"header": {"msg_id": msg_id, "msg_type": "execute_request", "username": "alice", "session": msg_id,
                          "version": "5.3"},
               "parent_header": {}, "metadata": {}, "channel": "shell", "buffers": [],
               "content": {"code": code, "silent": False, "store_history": False, "user_expressions": {},
                           "allow_stdin": False}}
    printed = ""
    with connect(ws_url, additional_headers={"Authorization": f"Bearer {token}"}, open_timeout=20) as ws:
        ws.send(json.dumps(request))
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            message = json.loads(ws.recv(timeout=60))
            if message.get("parent_header", {}).get("msg_id") != msg_id:
                continue
            if message["msg_type"] == "stream":
                printed += message["content"]["text"]
            if message["msg_type"] == "status" and message["content"]["execution_state"] == "idle":
                return printed
    raise AssertionError(f"no reply from the kernel; printed {printed!r}")


def test_a_notebook_runs_code_through_the_proxy_for_its_owner_alone(cluster: Cluster, workdir: Path) -> None:
    job_id, url = start_notebook(cluster, workdir)
    alice, bob = cluster.tokens["alice"], cluster.tokens["bob"]
    base = f"{cluster.url}/notebooks/{job_id}"

    status, body, _ = http(url, alice)
    assert status == 200 and b"JupyterLab" in body
    status, body, _ = http(f"{base}/api/kernels", alice, "POST", {"name": "python3"})
    assert status == 201, body
    kernel = json.loads(body)["id"]
    assert execute(cluster, job_id, kernel, "print(6*7)", alice) == "42\n"
    big = {"type": "file", "format": "text", "content": "x" * (3 << 20)}  # a notebook's save can be large
    assert http(f"{base}/api/contents/big.txt", alice, "PUT", big)[0] == 201
    assert (workdir / "big.txt").stat().st_size == 3 << 20

    assert http(f"{base}/api/kernels", bob)[0] == 403  # another user
    assert http(f"{base}/api/kernels", cluster.admin_token)[0] == 403  # an admin too: it acts as its owner
    status, _, headers = http(url)  # nobody: to the login page, and back here after it
    assert status == 303 and headers["location"].startswith("/login?next=%2Fnotebooks%2F")
    with pytest.raises(Exception, match="403"):
        execute(cluster, job_id, kernel, "print(1)", bob)

    # JupyterLab itself answers nobody without the job's token, even on its own port.
    deadline = time.monotonic() + 20
    while not (direct := re.search(r"http://(127\.0\.0\.1:\d+)/notebooks/", log := http(
            f"{cluster.url}/api/v1/jobs/{job_id}/logs", alice)[1].decode())) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert direct, log
    assert http(f"http://{direct.group(1)}/notebooks/{job_id}/api/kernels")[0] == 403

    listed = cluster.nanum("notebook", "list", user="alice")
    assert re.search(rf"^\s*{job_id}\s+running\s+1\s+.*/notebooks/{job_id}/lab", listed.stdout, re.M), listed.stdout
    assert cluster.nanum("notebook", "stop", str(job_id), user="bob").returncode != 0
    stopped = cluster.nanum("notebook", "stop", str(job_id), user="alice")
    assert stopped.returncode == 0 and f"Stopped notebook {job_id}" in stopped.stdout
    cluster.wait_state(job_id, "cancelled")
    assert http(url, alice)[0] == 503


def test_an_idle_notebook_is_released_by_the_idle_rules(cluster: Cluster, workdir: Path) -> None:
    assert cluster.nanum("idle", "set", "--notebook-flag", "2s", "--notebook-release", "4s").returncode == 0
    try:
        job_id, _ = start_notebook(cluster, workdir, "-e", "NANUM_SIM_UTIL=0")  # its simulated GPU stays idle
        job = cluster.wait_state(job_id, "cancelled", "completed", "failed", timeout=60)
        assert job["reason"].startswith("released after being idle"), job
        assert job["preemptible"] is False
    finally:
        cluster.nanum("idle", "set", "--notebook-flag", "2h", "--notebook-release", "4h")


def test_nanum_shell_is_a_real_terminal_and_exits_with_the_shells_code(cluster: Cluster, workdir: Path) -> None:
    command = nanum_command()
    env = {**cluster.env(cluster.tokens["bob"]), "TERM": "xterm-test"}
    child = pexpect.spawn(command[0], [*command[1:], "shell", "--gpus", "2"], env=env,
                          cwd=str(workdir), encoding="utf-8", timeout=60, dimensions=(30, 100))
    try:
        child.expect(r"Shell (\d+) on ")
        job_id = int(child.match.group(1))
        child.expect_exact("$ ")  # the remote login shell's prompt
        child.sendline("stty size; echo gpus=$CUDA_VISIBLE_DEVICES term=$TERM")
        child.expect(r"30 100")
        child.expect(r"gpus=(\d),(\d) term=xterm-test\r\n")
        child.setwinsize(40, 120)  # the window changes: the remote terminal follows
        child.sendline("sleep 0.3; stty size")
        child.expect(r"40 120")
        ws = cluster.url.replace("http://", "ws://") + "/api/v1"
        for url, token in ((f"{ws}/jobs/{job_id}/shell", cluster.tokens["alice"]),  # not her shell
                           (f"{ws}/jobs/{job_id}/shell", cluster.admin_token),  # nor an admin's
                           (f"{ws}/agent/shells/{job_id}", "not-the-secret")):  # a relay must show the secret
            with pytest.raises(Exception, match="403"):
                connect(url, additional_headers={"Authorization": f"Bearer {token}"}, open_timeout=10).close()
        child.sendline("sleep 30")
        time.sleep(0.5)
        child.sendintr()  # Ctrl-C stops the remote command, not the shell
        child.sendline("echo still here; echo $CUDA_VISIBLE_DEVICES; exit 3")
        child.expect("still here")
        child.expect(pexpect.EOF)
    finally:
        child.close()
    assert child.exitstatus == 3, child.before
    job = cluster.wait_state(job_id, "failed", timeout=20)
    assert job["exit_code"] == 3 and job["kind"] == "shell"


def test_closing_the_terminal_ends_the_shell_and_frees_its_gpus(cluster: Cluster, workdir: Path) -> None:
    command = nanum_command()
    child = pexpect.spawn(command[0], [*command[1:], "shell", "--gpus", "1"], env=cluster.env(cluster.tokens["bob"]),
                          cwd=str(workdir), encoding="utf-8", timeout=60)
    child.expect(r"Shell (\d+) on ")
    job_id = int(child.match.group(1))
    child.expect_exact("$ ")
    child.sendline("nohup sleep 900 >/dev/null 2>&1 & echo 'sleep'ing; sleep 600")
    child.expect_exact("sleeping")  # the shell waits on `sleep 600`, in its own process group, as a terminal's job
    child.close(force=True)  # the terminal goes away: SIGHUP, then SIGKILL to `nanum shell`
    job = cluster.wait_state(job_id, "failed", "completed", timeout=60)  # seconds alone; more on a loaded machine
    assert job["exit_code"] == 129  # the shell was hung up (SIGHUP), as a closed local terminal does
    assert all(gpu["job_id"] != job_id for node in cluster.api("GET", "/nodes") for gpu in node["gpus"])
    left = subprocess.run(["pgrep", "-u", job_account(), "-f", "sleep (600|900)"], capture_output=True, text=True)
    assert left.stdout == "", "the closed shell's processes outlived it"


def test_nanum_run_streams_the_output_and_exits_with_the_commands_code(cluster: Cluster, workdir: Path) -> None:
    script = "echo first; sleep 1; echo second on $CUDA_VISIBLE_DEVICES; exit 7"
    result = cluster.nanum("run", "--gpus", "1", "--", "sh", "-c", script, user="alice", cwd=workdir)
    assert result.returncode == 7, result.stderr
    assert re.fullmatch(r"first\nsecond on \d\n", result.stdout), result.stdout
    ok = cluster.nanum("run", "--gpus", "0", "--", "true", user="alice", cwd=workdir)
    assert ok.returncode == 0 and ok.stdout == ""


def test_run_shell_and_notebook_take_submits_options(cluster: Cluster, workdir: Path) -> None:
    """What `nanum submit` takes for where and on what a job runs, `nanum run`, `shell` and `notebook` take too,
    read the same way; `nanum run SCRIPT` reads the script's #NANUM lines, as `nanum submit SCRIPT` does."""
    (workdir / "sub").mkdir()
    (workdir / "sub").chmod(0o777)
    result = cluster.nanum("run", "-D", "sub", "-c", "1", "--mem", "512M", "-J", "where", "--", "sh", "-c", "pwd",
                           user="alice", cwd=workdir)
    assert result.returncode == 0, result.stderr
    assert result.stdout == f"{workdir / 'sub'}\n"
    job = cluster.job(int(re.search(r"Submitted job (\d+)", result.stderr).group(1)))  # type: ignore[union-attr]
    assert (job["name"], job["cpus"], job["memory_mb"], job["workdir"]) == ("where", 1, 512, str(workdir / "sub"))

    script = workdir / "two.sh"  # not executable: run through its #! line, as `nanum submit` runs it
    script.write_text("#!/bin/sh\n#NANUM --gpus 2 --name from-header\necho on $CUDA_VISIBLE_DEVICES\n")
    result = cluster.nanum("run", str(script), user="alice", cwd=workdir)
    assert result.returncode == 0, result.stderr
    assert re.fullmatch(r"on \d,\d\n", result.stdout), result.stdout
    job = cluster.job(int(re.search(r"Submitted job (\d+)", result.stderr).group(1)))  # type: ignore[union-attr]
    assert (job["name"], job["gpus"]) == ("from-header", 2)

    (workdir / "array.sh").write_text("#!/bin/sh\n#SBATCH --array=0-3\necho task\n")
    refused = cluster.nanum("run", str(workdir / "array.sh"), user="alice", cwd=workdir)
    assert refused.returncode == 2 and "asks for an array (0-3); submit it with `nanum submit`" in refused.stderr

    before = len(cluster.api("GET", "/jobs", query="all=true", token=cluster.tokens["alice"]))
    for command, words, said in (
        ("shell", ["--constraint", "net"], "--constraint: cannot read 'net'"),
        ("notebook", ["--constraint", "net=ib"], "needs node label net=ib; no node has it"),
        ("shell", ["--gpu-mem", "4000G"], "needs GPUs with at least 4096000 MiB each"),
        ("run", ["--gpu-model", "H100,B200", "--", "true"], "needs GPU model B200 or H100"),
    ):
        refused = cluster.nanum(command, *words, user="alice", cwd=workdir)
        assert refused.returncode == 2 and said in refused.stderr, (command, words, refused.stderr)
        assert "Traceback" not in refused.stderr
    assert len(cluster.api("GET", "/jobs", query="all=true", token=cluster.tokens["alice"])) == before


CHROMIUM = "/usr/bin/chromium"
SHOTS = Path(os.environ.get("NANUM_SCREENSHOTS", Path(__file__).parent / "screenshots"))


def test_the_owner_opens_the_notebook_in_a_browser_and_runs_a_cell(cluster: Cluster, workdir: Path) -> None:
    if not Path(CHROMIUM).exists():
        pytest.skip(f"needs Debian's chromium at {CHROMIUM} (apt-get install chromium)")
    from playwright.sync_api import expect, sync_playwright

    job_id, url = start_notebook(cluster, workdir)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--headless", "--no-sandbox", "--disable-gpu"])
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 760})
            page.set_default_timeout(30_000)
            page.goto(url)  # not logged in: the login page, then back to the notebook
            expect(page).to_have_url(re.compile(r"/login\?next=%2Fnotebooks%2F"))
            page.fill("#token", cluster.tokens["alice"])
            page.click("button[type=submit]")
            expect(page).to_have_url(re.compile(rf"/notebooks/{job_id}/lab"))
            page.locator(".jp-LauncherCard[data-category='Notebook']").first.click()
            expect(page.locator(".jp-StatusBar-TextItem", has_text="| Idle")).to_be_visible()  # the kernel is up
            cell = page.locator(".jp-Notebook .jp-Cell .cm-content").first
            cell.click()
            page.keyboard.type("import os; print(6*7, os.environ['CUDA_VISIBLE_DEVICES'])")
            page.keyboard.press("Shift+Enter")
            expect(page.locator(".jp-OutputArea-output").first).to_have_text(re.compile(r"^42 \d\s*$"))
            SHOTS.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(SHOTS / "notebook.png"))
            page.goto(f"{url}?reset")  # the next notebook opens on its launcher, not on this one's notebook
            expect(page.locator(".jp-LauncherCard").first).to_be_visible()
        finally:
            browser.close()
    cluster.nanum("notebook", "stop", str(job_id), user="alice")


def test_notebooks_shells_and_runs_take_an_environment(cluster: Cluster, workdir: Path) -> None:
    prefix = python_environment(cluster)
    result = cluster.nanum("run", "-E", "lab-env", "--gpus", "0", "--", "sh", "-c", "echo $VIRTUAL_ENV",
                           user="alice", cwd=workdir)
    assert result.returncode == 0 and result.stdout == f"{prefix}\n", result.stderr

    job_id, _ = start_notebook(cluster, workdir, "-E", "lab-env")  # JupyterLab from the environment
    base = f"{cluster.url}/notebooks/{job_id}"
    status, body, _ = http(f"{base}/api/kernels", cluster.tokens["alice"], "POST", {"name": "python3"})
    assert status == 201, body
    printed = execute(cluster, job_id, json.loads(body)["id"], "import sys; print(sys.prefix)", cluster.tokens["alice"])
    assert printed == f"{prefix}\n"
    assert cluster.job(job_id)["environment"] == "lab-env"
    cluster.nanum("notebook", "stop", str(job_id), user="alice")

    command = nanum_command()
    child = pexpect.spawn(command[0], [*command[1:], "shell", "-E", "lab-env", "--gpus", "0"],
                          env=cluster.env(cluster.tokens["alice"]), cwd=str(workdir), encoding="utf-8", timeout=60)
    try:
        child.expect_exact("$ ")
        child.sendline("echo in=$VIRTUAL_ENV; exit")
        child.expect(f"in={prefix}\r\n")
        child.expect(pexpect.EOF)
    finally:
        child.close()
    assert child.exitstatus == 0


def test_nanum_shell_gives_up_when_the_shell_never_starts(cluster: Cluster, workdir: Path) -> None:
    setup = "echo 'module cuda/12.4 not found' >&2; exit 5"
    assert cluster.nanum("environment", "add", "broken", "--setup", setup).returncode == 0
    result = cluster.nanum("shell", "-E", "broken", "--gpus", "0", user="alice", cwd=workdir, timeout=60)
    assert result.returncode == 5, result.stderr
    assert re.search(r"^shell \d+ ended: exited with code 5; its last output:\nmodule cuda/12.4 not found$",
                     result.stderr, re.M), result.stderr


def test_a_notebook_submitted_from_the_dashboard_opens_in_a_new_tab(cluster: Cluster, workdir: Path) -> None:
    if not Path(CHROMIUM).exists():
        pytest.skip(f"needs Debian's chromium at {CHROMIUM} (apt-get install chromium)")
    from playwright.sync_api import expect, sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--headless", "--no-sandbox", "--disable-gpu"])
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 760})
            page.set_default_timeout(30_000)
            page.goto(cluster.url + "/submit")
            page.fill("#token", cluster.tokens["alice"])
            page.click("button[type=submit]")
            expect(page).to_have_url(cluster.url + "/submit")
            page.check("input[name=kind][value=notebook]")
            page.fill("#time", "1h")
            page.fill("#workdir", str(workdir))
            page.click("form.submit button[type=submit]")
            expect(page).to_have_url(re.compile(r"/jobs/\d+$"))
            job_id = int(page.url.rsplit("/", 1)[1])
            link = page.locator("[data-notebook]")
            expect(link).to_be_visible()  # once it runs, without a reload
            expect(link).to_have_attribute("target", "_blank")
            with page.expect_popup() as opened:
                link.click()
            tab = opened.value
            expect(tab).to_have_url(re.compile(rf"/notebooks/{job_id}/lab"))
            # Opened at once, the tab may first say JupyterLab is starting; it loads JupyterLab by itself.
            expect(tab.get_by_role("menuitem", name="Kernel")).to_be_visible(timeout=120_000)  # JupyterLab's menu
        finally:
            browser.close()
    assert cluster.job(job_id)["preemptible"] is False  # picking Notebook ticked Never preempt
    assert cluster.nanum("notebook", "stop", str(job_id), user="alice").returncode == 0


def test_a_shell_submitted_from_the_dashboard_is_a_terminal_in_the_browser(cluster: Cluster, workdir: Path) -> None:
    if not Path(CHROMIUM).exists():
        pytest.skip(f"needs Debian's chromium at {CHROMIUM} (apt-get install chromium)")
    from playwright.sync_api import expect, sync_playwright

    from nanum.server.web import xterm

    if not xterm.available():
        pytest.skip("needs xterm.js for the web terminal (python -m nanum.server.web.xterm; make does it)")
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--headless", "--no-sandbox", "--disable-gpu"])
        try:
            page = browser.new_page(viewport={"width": 1100, "height": 640})
            page.set_default_timeout(30_000)
            page.goto(cluster.url + "/submit")
            page.fill("#token", cluster.tokens["alice"])
            page.click("button[type=submit]")
            page.check("input[name=kind][value=shell]")
            page.fill("#workdir", str(workdir))
            page.click("form.submit button[type=submit]")
            expect(page).to_have_url(re.compile(r"/jobs/\d+/terminal$"))
            job_id = int(page.url.rsplit("/", 2)[1])
            expect(page.locator("[data-terminal-status]")).to_have_text("connected", timeout=60_000)
            rows = page.locator(".xterm-rows")
            expect(rows).to_contain_text("$")  # the login shell's prompt
            page.locator(".xterm").click()
            page.keyboard.type("echo gpus=$CUDA_VISIBLE_DEVICES term=$TERM; cd /no/such/dir\n")
            expect(rows).to_contain_text(re.compile(r"gpus=\d term=xterm-256color"))
            SHOTS.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(SHOTS / "terminal.png"))
            page.keyboard.type("exit 3\n")
            expect(page.locator("[data-terminal-status]")).to_have_text("the shell exited with code 3")
            # Another user neither sees the terminal page nor joins the shell.
            other = browser.new_page()
            other.goto(cluster.url + f"/jobs/{job_id}/terminal")
            other.fill("#token", cluster.tokens["bob"])
            other.click("button[type=submit]")
            expect(other.locator("main")).to_contain_text("another user's")
        finally:
            browser.close()
    job = cluster.wait_state(job_id, "failed", timeout=30)
    assert job["exit_code"] == 3 and job["kind"] == "shell" and job["preemptible"] is False


def test_a_shell_websocket_from_another_site_is_refused_even_with_the_owners_cookie(
    cluster: Cluster, workdir: Path
) -> None:
    """A page of another site can make the browser open a websocket to this server with the owner's cookie
    (where SameSite does not stop it); the server takes the cookie only from its own pages."""
    import httpx

    with httpx.Client(base_url=cluster.url, timeout=10) as web:
        nonce = re.search(r'name="nonce" value="([^"]+)"', web.get("/login").text)
        assert nonce is not None
        web.post("/login", data={"token": cluster.tokens["alice"], "nonce": nonce.group(1)})
        cookie = "; ".join(f"{k}={v}" for k, v in web.cookies.items())
    body = {"kind": "shell", "command": ["shell"], "gpus": 0, "workdir": str(workdir)}
    job_id = cluster.api("POST", "/jobs", body, token=cluster.tokens["alice"])["id"]
    cluster.wait_state(job_id, "running", timeout=60)
    ws_url = cluster.url.replace("http://", "ws://") + f"/api/v1/jobs/{job_id}/shell"
    with pytest.raises(InvalidStatus) as refused:
        connect(ws_url, additional_headers={"Cookie": cookie, "Origin": "https://evil.example"}, open_timeout=10)
    assert refused.value.response.status_code == 403
    huge = cluster.url.replace("http://", "ws://") + f"/api/v1/jobs/{2**64}/shell"  # past any job id: refused, no 500
    with pytest.raises(InvalidStatus) as refused:
        connect(huge, additional_headers={"Authorization": f"Bearer {cluster.tokens['alice']}"}, open_timeout=10)
    assert refused.value.response.status_code == 403
    with connect(ws_url, additional_headers={"Cookie": cookie, "Origin": cluster.url}, open_timeout=10) as ws:
        ws.send(b"exit 4\r")
        while not isinstance(message := ws.recv(timeout=30), str):
            pass
    assert json.loads(message) == {"exit": 4}  # the dashboard's own page is let in
