"""Jobs run as their owner's Unix account when the agent is root, and never as root unless allowed."""

from __future__ import annotations

import grp
import os
import pwd
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from nanum.agent.accounts import Account, Refused, job_account
from nanum.agent.executor import Executor
from tests.accounts import unix_account
from tests.agent.conftest import NODE, make_launch

USER = "nanumtest"
GROUP = "nanumtestgrp"

needs_root = pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("useradd"), reason="needs root and useradd")


@pytest.fixture(scope="module")
def test_user() -> pwd.struct_passwd:
    return unix_account(USER, groups=(GROUP,))


def log_text(ex: Executor, job_id: int) -> str:
    return ex.read_log(job_id, 0, 1 << 20)[0]


@pytest.fixture
def switching_executor(state_dir: Path) -> Iterator[Executor]:
    """A root agent's executor, which runs jobs as their users."""
    ex = Executor(state_dir, NODE)
    yield ex
    ex.close()


@needs_root
def test_root_agent_runs_jobs_as_their_owner(switching_executor: Executor, test_user: pwd.struct_passwd) -> None:
    executor = switching_executor
    shared = Path(tempfile.mkdtemp(prefix="nanum-ckpt-"))
    shared.chmod(0o755)
    ckpt = shared / "job1"
    script = 'echo "$(id -u) $(id -g) $(id -G) $HOME $USER"; touch "$NANUM_CHECKPOINT_DIR/ok"; exit 6'
    executor.start(make_launch(1, "sh", "-c", script, unix_user=USER, checkpoint_dir=str(ckpt)))
    status = executor.wait(1, 5)
    assert status is not None and status.exit_code == 6
    uid, gid, *rest = log_text(executor, 1).split()
    *groups, home, user = rest
    assert (int(uid), int(gid), home, user) == (test_user.pw_uid, test_user.pw_gid, test_user.pw_dir, USER)
    assert set(map(int, groups)) == set(os.getgrouplist(USER, test_user.pw_gid))
    assert (executor.jobs_dir / "1" / "output.log").stat().st_uid == test_user.pw_uid
    assert ckpt.stat().st_uid == test_user.pw_uid and (ckpt / "ok").exists()
    shutil.rmtree(shared)


@needs_root
def test_root_agent_reports_a_missing_account(executor: Executor) -> None:
    status = executor.start(make_launch(2, "true", unix_user="nosuchuser"))
    assert status.state == "failed_to_start"
    assert status.reason == f"user 'nosuchuser' has no Unix account on node {NODE}"


@needs_root
def test_root_jobs_are_refused_unless_allowed(executor: Executor) -> None:
    refused = executor.start(make_launch(3, "true", unix_user="root"))
    assert refused.state == "failed_to_start"
    assert (refused.reason or "").startswith("jobs may not run as root on this node; ")
    executor.start(make_launch(4, "sh", "-c", "id -u", unix_user="root"), allow_root=True)
    assert executor.wait(4, 5) is not None
    assert log_text(executor, 4) == "0\n"


ALICE = Account("alice", 1000, 1000, (1000,), "/home/alice", "/bin/sh")
ROOT = Account("root", 0, 0, (0,), "/root", "/bin/sh")


def test_normal_agent_runs_only_its_own_users_jobs() -> None:
    assert job_account("alice", node=NODE, allow_root=False, agent=ALICE) is ALICE
    assert job_account("", node=NODE, allow_root=False, agent=ALICE) is ALICE
    with pytest.raises(Refused, match=r"^the job runs as Unix user 'bob' but the agent on this node runs as 'alice' "):
        job_account("bob", node=NODE, allow_root=False, agent=ALICE)


@needs_root
def test_a_group_given_to_a_user_reaches_their_jobs_once_the_account_kept_is_old(
        monkeypatch: pytest.MonkeyPatch) -> None:
    user, group = "nanumregroup", f"nanumgrp{os.getpid()}"
    account = unix_account(user)
    monkeypatch.setattr("nanum.agent.accounts.KEEP_S", 0.5)
    kept = job_account(user, node=NODE, allow_root=False, agent=ROOT)
    subprocess.run(["groupadd", "-f", group], check=True)
    try:
        subprocess.run(["usermod", "-aG", group, user], check=True)
        gid = grp.getgrnam(group).gr_gid
        assert job_account(user, node=NODE, allow_root=False, agent=ROOT) == kept  # kept: not looked up again
        time.sleep(0.6)
        assert gid in job_account(user, node=NODE, allow_root=False, agent=ROOT).groups
        assert account.pw_gid in kept.groups
    finally:
        subprocess.run(["gpasswd", "-d", user, group], capture_output=True)
        subprocess.run(["groupdel", group], capture_output=True)


@needs_root
def test_an_account_created_after_a_refusal_is_found_at_once() -> None:
    user = f"nanumlate{os.getpid() % 100000}"
    with pytest.raises(Refused, match="has no Unix account on node"):
        job_account(user, node=NODE, allow_root=False, agent=ROOT)
    try:
        created = unix_account(user)
        assert job_account(user, node=NODE, allow_root=False, agent=ROOT).uid == created.pw_uid
    finally:
        subprocess.run(["userdel", user], capture_output=True)
