"""Nothing a job's owner controls reaches a process of the agent that still runs as root, and one bad launch
fails alone: the environment (LD_PRELOAD), the working directory, the checkpoint directory, stray bytes."""

from __future__ import annotations

import json
import os
import pwd
import shutil
import stat
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from nanum.agent import procs
from nanum.agent.executor import Executor
from nanum.agent.monitor import JobView, last_activity
from tests.accounts import unix_account
from tests.agent.conftest import NODE, make_launch
from tests.agent.fakeserver import FakeServer
from tests.agent.test_agent_loop import make_agent, running

ALICE, BOB = "nanumalice", "nanumbob"
DENIED = "Permission denied"

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or not shutil.which("useradd") or not shutil.which("gcc"), reason="needs root, useradd and gcc"
)

PRELOAD_C = r"""
#include <fcntl.h>
#include <stdio.h>
#include <unistd.h>
__attribute__((constructor)) static void note_uid(void) {
    int fd = open("%s", O_WRONLY | O_APPEND);
    if (fd >= 0) { dprintf(fd, "%%d\n", (int)geteuid()); close(fd); }
}
"""


@pytest.fixture(scope="module")
def alice() -> pwd.struct_passwd:
    return unix_account(ALICE)


@pytest.fixture(scope="module")
def bob() -> pwd.struct_passwd:
    return unix_account(BOB)


@pytest.fixture
def shared() -> Iterator[Path]:
    """A directory every user can reach (pytest's own temporary directories are closed to them)."""
    path = Path(tempfile.mkdtemp(prefix="nanum-launch-"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def as_root(state_dir: Path) -> Iterator[Executor]:
    """A root agent's executor, which runs jobs as their users."""
    ex = Executor(state_dir, NODE)
    yield ex
    for job_id, state in ex.held().items():
        if state == "running":
            ex.stop(job_id, 0.0)
            ex.wait(job_id, 5)
    ex.close()


def log_text(ex: Executor, job_id: int) -> str:
    return ex.read_log(job_id, 0, 1 << 20)[0]


def wait_for(predicate: object, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():  # type: ignore[operator]
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


# --- 1. the job's environment is applied only as its user -------------------------------------------------------


def test_ld_preload_in_a_jobs_environment_never_runs_as_root(
    as_root: Executor, alice: pwd.struct_passwd, shared: Path
) -> None:
    uids = shared / "uids"
    uids.touch()
    uids.chmod(0o666)
    (shared / "note.c").write_text(PRELOAD_C % uids)
    library = shared / "note.so"
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(library), str(shared / "note.c")], check=True)
    launch = make_launch(1, "sh", "-c", 'echo "$LD_PRELOAD"', unix_user=ALICE, env={"LD_PRELOAD": str(library)})
    as_root.start(launch)
    status = as_root.wait(1, 5)
    assert status is not None and status.exit_code == 0, log_text(as_root, 1)
    assert log_text(as_root, 1) == f"{library}\n"  # the user's own choice, for the user's own processes
    written = [int(line) for line in uids.read_text().split()]
    assert written and set(written) == {alice.pw_uid}, f"processes that loaded the library ran as uids {written}"


def test_the_environment_arrives_verbatim_and_on_no_command_line(
    as_root: Executor, alice: pwd.struct_passwd, shared: Path
) -> None:
    secret = "sk-3f9a'\"$HOME `id` \\ $(id)\nsecond line"
    env = {"API_KEY": secret, "EMPTY": "", "PATH": "/usr/bin:/bin"}
    started = shared / "started"
    script = f"printenv API_KEY; printenv EMPTY; echo $PATH; touch {started}; exec sleep 30"
    shared.chmod(0o777)
    as_root.start(make_launch(1, "sh", "-c", script, unix_user=ALICE, env=env))
    wait_for(started.exists)
    assert log_text(as_root, 1) == f"{secret}\n\n/usr/bin:/bin\n"
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            assert b"sk-3f9a" not in cmdline.read_bytes(), f"the job's environment is readable in {cmdline}"
        except OSError:
            continue
    as_root.stop(1, 0.0)


def test_a_switched_job_holds_no_descriptor_but_its_output(as_root: Executor, alice: pwd.struct_passwd) -> None:
    as_root.start(make_launch(1, "sh", "-c", "ls -l /proc/$$/fd", unix_user=ALICE, env={"A": "1"}))
    assert as_root.wait(1, 5) is not None
    listing = log_text(as_root, 1)
    links = [line.split("->")[-1].strip() for line in listing.splitlines() if "->" in line]
    assert len(links) == 3 and links[0] == "/dev/null", listing  # no exit file, no setup script
    assert links[1].endswith("/output.log") and links[2] == links[1], listing


def test_a_job_cannot_read_its_waiters_memory_where_other_jobs_requests_passed(
    as_root: Executor, alice: pwd.struct_passwd, bob: pwd.struct_passwd, shared: Path
) -> None:
    # The waiter is forked from the launcher, which has carried every job's environment: bob's secret passed
    # through it just before alice's job, whose waiter runs as alice.
    as_root.start(make_launch(1, "true", unix_user=BOB, env={"BOBS_SECRET": "bob-s3cret-token"}))
    as_root.wait(1, 5)
    probe = (
        'for f in mem environ; do head -c 1 /proc/$PPID/$f >/dev/null 2>&1 && echo "$f readable" || echo "$f refused"; '
        'done; grep -c bob-s3cret-token /proc/$PPID/mem 2>/dev/null || true'
    )
    as_root.start(make_launch(2, "sh", "-c", probe, unix_user=ALICE))
    status = as_root.wait(2, 5)
    assert status is not None and status.exit_code == 0
    assert log_text(as_root, 2) == "mem refused\nenviron refused\n", log_text(as_root, 2)


# --- 2. the working directory is entered as the job's user -------------------------------------------------------


@pytest.fixture
def bobs_project(bob: pwd.struct_passwd, shared: Path) -> Path:
    home = shared / "bob"
    (home / "proj").mkdir(parents=True)
    (home / "proj" / "secret.txt").write_text("bob's\n")
    for path in (home, home / "proj", home / "proj" / "secret.txt"):
        os.chown(path, bob.pw_uid, bob.pw_gid)
    home.chmod(0o700)
    return home / "proj"


def test_a_directory_the_user_may_not_enter_fails_the_job_as_the_kernel_refuses_it(
    as_root: Executor, alice: pwd.struct_passwd, bobs_project: Path
) -> None:
    as_root.start(make_launch(1, "sh", "-c", "ls; cat secret.txt", unix_user=ALICE, workdir=str(bobs_project)))
    status = as_root.wait(1, 5)
    assert status is not None and status.state == "failed_to_start"
    assert status.reason == f"cannot enter working directory {bobs_project} as {ALICE}: Permission denied"
    assert "secret" not in log_text(as_root, 1)
    # What does not exist behind bob's closed door looks the same to alice as what does.
    missing = bobs_project.parent / "no-such-dir"
    as_root.start(make_launch(2, "true", unix_user=ALICE, workdir=str(missing)))
    status = as_root.wait(2, 5)
    assert status is not None and status.reason == f"cannot enter working directory {missing} as {ALICE}: {DENIED}"
    as_root.start(make_launch(3, "true", unix_user=ALICE, workdir="/root"))
    status = as_root.wait(3, 5)
    assert status is not None and status.reason == f"cannot enter working directory /root as {ALICE}: {DENIED}"


def test_a_missing_directory_is_named_and_an_open_one_is_entered(
    as_root: Executor, alice: pwd.struct_passwd, shared: Path
) -> None:
    as_root.start(make_launch(1, "true", unix_user=ALICE, workdir=str(shared / "gone")))
    status = as_root.wait(1, 5)
    assert status is not None and status.state == "failed_to_start"
    assert status.reason == f"cannot enter working directory {shared / 'gone'} as {ALICE}: No such file or directory"
    as_root.start(make_launch(2, "sh", "-c", 'pwd; echo "$PWD"', unix_user=ALICE, workdir=str(shared)))
    status = as_root.wait(2, 5)
    assert status is not None and status.exit_code == 0
    assert log_text(as_root, 2) == f"{shared}\n{shared}\n"


def test_the_server_hears_why_a_job_could_not_enter_its_directory(
    state_dir: Path, alice: pwd.struct_passwd, bobs_project: Path
) -> None:
    server = FakeServer()
    try:
        with running(make_agent(server.url, state_dir)):
            server.submit(make_launch(1, "true", unix_user=ALICE, workdir=str(bobs_project)))
            _, status = server.wait_state(1, "failed_to_start")
    finally:
        server.close()
    assert status.reason == f"cannot enter working directory {bobs_project} as {ALICE}: Permission denied"


# --- 3. one bad launch fails alone -------------------------------------------------------------------------------


BAD_FIELDS = {
    "command": {"command": ["echo", "a\0b"]},
    "env value": {"env": {"X": "a\0b"}},
    "env name": {"env": {"X\0Y": "1"}},
    "empty env name": {"env": {"": "1"}},
    "name": {"name": "job\0"},
    "unix user": {"unix_user": "ali\0ce"},
    "workdir": {"workdir": "/tmp\0"},
    "checkpoint dir": {"checkpoint_dir": "/tmp/ckpt\0"},
}


@pytest.mark.parametrize("fields", BAD_FIELDS.values(), ids=BAD_FIELDS.keys())
def test_a_launch_field_no_system_call_takes_fails_that_job_alone(
    as_root: Executor, alice: pwd.struct_passwd, fields: dict[str, object]
) -> None:
    values: dict[str, object] = {"unix_user": ALICE, "command": ["true"]}
    values.update(fields)
    command = values.pop("command")
    assert isinstance(command, list)
    status = as_root.start(make_launch(1, *command, **values))
    assert status.state == "failed_to_start"
    assert status.reason and status.reason.startswith("the job's ") and "\0" not in status.reason
    as_root.start(make_launch(2, "sh", "-c", "echo fine", unix_user=ALICE))
    assert as_root.wait(2, 5) is not None and log_text(as_root, 2) == "fine\n"


def test_an_unexpected_error_after_the_spawn_fails_the_job_and_leaves_nothing_running(
    as_root: Executor, alice: pwd.struct_passwd, shared: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    shared.chmod(0o777)
    marker = shared / "ran-on"

    def broken(pid: int) -> int:
        raise RuntimeError("cannot read the process table")

    monkeypatch.setattr(procs, "start_ticks", broken)
    status = as_root.start(make_launch(1, "sh", "-c", f"sleep 0.3; touch {marker}", unix_user=ALICE))
    assert status.state == "failed_to_start"
    assert status.reason == "the agent could not start the job: cannot read the process table"
    monkeypatch.undo()
    time.sleep(0.5)
    assert not marker.exists()
    as_root.start(make_launch(2, "sh", "-c", "echo fine", unix_user=ALICE))
    assert as_root.wait(2, 5) is not None and log_text(as_root, 2) == "fine\n"


def test_an_agent_with_a_bad_job_keeps_serving_the_others(state_dir: Path, alice: pwd.struct_passwd) -> None:
    server = FakeServer()
    try:
        with running(make_agent(server.url, state_dir)):
            server.submit(make_launch(1, "echo", "a\0b", unix_user=ALICE))
            server.submit(make_launch(2, "sleep", "60", unix_user=ALICE))
            server.submit(make_launch(3, "true", unix_user="no-such-user-here"))
            _, bad = server.wait_state(1, "failed_to_start")
            _, unknown = server.wait_state(3, "failed_to_start")
            server.wait_state(2, "running")
            server.cancel(2)
            _, good = server.wait_state(2, "exited")
    finally:
        server.close()
    assert bad.reason == "the job's command contains a null byte, which cannot be passed to a program; remove it"
    assert unknown.reason == f"user 'no-such-user-here' has no Unix account on node {NODE}"
    assert good.signal == 15


# --- 4. the checkpoint directory is the job user's alone ---------------------------------------------------------


def test_the_checkpoint_directory_is_created_owner_only_for_the_jobs_user(
    as_root: Executor, alice: pwd.struct_passwd, shared: Path
) -> None:
    ckpt = shared / "checkpoints" / "1"
    as_root.start(make_launch(1, "sh", "-c", 'touch "$NANUM_CHECKPOINT_DIR/state"', unix_user=ALICE,
                              checkpoint_dir=str(ckpt)))
    status = as_root.wait(1, 5)
    assert status is not None and status.exit_code == 0, log_text(as_root, 1)
    info = ckpt.lstat()
    assert (info.st_uid, info.st_gid, stat.S_IMODE(info.st_mode)) == (alice.pw_uid, alice.pw_gid, 0o700)
    assert stat.S_IMODE(ckpt.parent.stat().st_mode) == 0o711 and ckpt.parent.stat().st_uid == 0
    assert (ckpt / "state").stat().st_uid == alice.pw_uid
    # A requeued job finds its directory as it left it.
    as_root.forget(1)
    as_root.start(make_launch(1, "sh", "-c", 'ls "$NANUM_CHECKPOINT_DIR"', unix_user=ALICE, checkpoint_dir=str(ckpt)))
    assert as_root.wait(1, 5) is not None and log_text(as_root, 1) == "state\n"


def test_a_link_planted_at_the_checkpoint_path_is_never_followed(
    as_root: Executor, alice: pwd.struct_passwd, bob: pwd.struct_passwd, shared: Path
) -> None:
    root = shared / "checkpoints"
    root.mkdir()
    root.chmod(0o1777)  # a shared, sticky checkpoint root where users can create entries
    loot = shared / "bobs-loot"
    loot.mkdir(mode=0o777)
    os.chown(loot, bob.pw_uid, bob.pw_gid)
    os.symlink(loot, root / "1")
    os.lchown(root / "1", bob.pw_uid, bob.pw_gid)
    os.symlink(shared / "made-by-root", root / "2")
    os.lchown(root / "2", bob.pw_uid, bob.pw_gid)
    script = 'echo saved > "$NANUM_CHECKPOINT_DIR/weights"'
    for job_id in (1, 2):
        status = as_root.start(make_launch(job_id, "sh", "-c", script, unix_user=ALICE,
                                           checkpoint_dir=str(root / str(job_id))))
        assert status.state == "failed_to_start"
        assert status.reason == (f"checkpoint directory {root / str(job_id)} is a symbolic link or a file, "
                                 "not a directory; remove it")
    assert list(loot.iterdir()) == [] and loot.stat().st_uid == bob.pw_uid
    assert (root / "1").lstat().st_uid == bob.pw_uid
    assert not (shared / "made-by-root").exists()


def test_a_checkpoint_directory_of_another_user_is_refused(
    as_root: Executor, alice: pwd.struct_passwd, bob: pwd.struct_passwd, shared: Path
) -> None:
    ckpt = shared / "checkpoints" / "1"
    ckpt.mkdir(parents=True, mode=0o777)
    os.chown(ckpt, bob.pw_uid, bob.pw_gid)
    status = as_root.start(make_launch(1, "true", unix_user=ALICE, checkpoint_dir=str(ckpt)))
    assert status.state == "failed_to_start"
    assert status.reason == (f"checkpoint directory {ckpt} already exists and belongs to another user "
                             f"(uid {bob.pw_uid}); an admin should remove it")
    assert ckpt.stat().st_uid == bob.pw_uid


# --- the job's environment as the monitor reads it ---------------------------------------------------------------


def test_a_notebooks_jupyter_url_never_makes_the_agent_read_a_local_file(tmp_path: Path) -> None:
    status = tmp_path / "private" / "api" / "status"
    status.parent.mkdir(parents=True)
    status.write_text(json.dumps({"last_activity": "2024-05-01T10:00:00Z"}))
    status.chmod(0o600)

    class Jupyter(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path == "/moved/api/status":
                self.send_response(302)
                self.send_header("Location", f"file://{status}")
                self.end_headers()
                return
            body = json.dumps({"last_activity": "2024-06-01T10:00:00Z"}).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Jupyter)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    base = f"http://127.0.0.1:{httpd.server_address[1]}"
    try:
        def seen(url: str) -> float | None:
            return last_activity(JobView(1, None, (), env={"NANUM_JUPYTER_URL": url}))

        assert seen(base) == datetime(2024, 6, 1, 10, tzinfo=UTC).timestamp()
        assert seen(f"file://{status.parent.parent}") is None
        assert seen(f"{base}/moved") is None
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(5)
