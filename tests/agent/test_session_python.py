"""Shells and notebooks run the session Python as their user. An agent whose own Python other users cannot run (one
installed under /root) makes one they can, from the system's Python of the same version with the agent's packages;
where it cannot, such a job fails to start saying why and what to set, instead of ending at once with code 126."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from nanum.agent import sessions
from nanum.agent.executor import Executor
from tests.accounts import unix_account
from tests.agent.conftest import make_launch
from tests.e2e.cluster import remove, shared_dir

ACCOUNT = "nanum-session"
pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="runs a job as another user, which takes root")


@pytest.fixture
def shared() -> Iterator[Path]:
    """A directory every user may enter (pytest's own temporary directories are closed to them)."""
    path = shared_dir("nanum-session-")
    yield path
    remove(path)


@pytest.fixture
def closed_python(shared: Path) -> Path:
    """This Python, as an agent installed under /root sees it: a link in a directory others may not enter."""
    closed = shared / "closed"
    closed.mkdir(mode=0o700)
    link = closed / "python"
    link.symlink_to(sys.executable)
    return link


@pytest.fixture(autouse=True)
def _forget_made(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.delenv(sessions.SESSION_PYTHON, raising=False)
    yield
    sessions._made = None


def as_account(*argv: str) -> subprocess.CompletedProcess[str]:
    """`argv` run as another user; found by `env` once that user's (setpriv looks the program up as root)."""
    unix_account(ACCOUNT)
    return subprocess.run(["setpriv", "--reuid", ACCOUNT, "--regid", ACCOUNT, "--clear-groups", "--", "/usr/bin/env",
                           *argv], capture_output=True, text=True, cwd="/", timeout=60)


def test_a_python_others_cannot_enter_is_named(closed_python: Path) -> None:
    assert sessions.unrunnable(str(closed_python)) == f"{closed_python.parent} is closed to other users"
    assert sessions.unrunnable("/bin/sh") is None


def test_the_agent_makes_a_session_python_every_user_can_run(shared: Path, closed_python: Path) -> None:
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    if not Path(f"/usr/bin/python{version}").exists():
        pytest.skip(f"needs the system's Python {version} (/usr/bin/python{version})")
    sites = [d for d in sessions._site_dirs() if sessions.unrunnable(d) is None]
    if not sites:
        pytest.skip("this Python's packages are in a directory other users may not enter")
    state = shared / "state"
    state.mkdir()
    made = sessions.make_session_python(state, own=str(closed_python))
    assert made == str(state / "session-python" / "bin" / "python") == sessions.session_python()
    ran = as_account(made, "-c", "import nanum.agent.relay, sys; print(sys.version_info[:2])")
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.strip() == str(sys.version_info[:2])
    assert as_account(str(closed_python), "-c", "").returncode != 0  # what the job's user ran before: refused
    assert sessions.make_session_python(state, own=str(closed_python)) == made  # kept, not made again
    venv = state / "session-python"
    subprocess.run(["chown", "-R", ACCOUNT, str(venv)], check=True)  # as if another user had put it there
    sessions._made = None
    assert sessions.make_session_python(state, own=str(closed_python)) == made
    assert os.lstat(venv).st_uid == os.geteuid()  # made again: another user's is never run for everyone's shells
    assert sessions.session_python_problem() is None
    sessions._made = None
    closed_state = closed_python.parent / "state"  # one others cannot enter (a home under /root): made elsewhere
    elsewhere = sessions.make_session_python(closed_state, own=str(closed_python), elsewhere=shared / "lib")
    assert elsewhere is not None and elsewhere.startswith(f"{shared}/lib/session-python-")
    assert as_account(elsewhere, "-c", "import nanum.agent.relay").returncode == 0
    assert not closed_state.exists()


def test_a_shell_that_its_user_could_not_start_fails_to_start_saying_why(
        shared: Path, closed_python: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(sessions.SESSION_PYTHON, str(closed_python))  # as given, so not made anew
    unix_account(ACCOUNT)
    executor = Executor(shared / "state", "test-node")
    try:
        shell = make_launch(1, str(closed_python), "-m", "nanum.agent.relay", kind="shell", unix_user=ACCOUNT,
                            gpus=[])
        [status] = executor.start_all([shell])
    finally:
        executor.close()
    assert status.state == "failed_to_start"
    assert status.reason == (
        f"shells and notebooks cannot start on this node: they run {closed_python} as their user, and "
        f"{closed_python.parent} is closed to other users; set NANUM_SESSION_PYTHON in the agent's environment to "
        "a Python every user may run, with nanum installed (docs/interactive.md)")
