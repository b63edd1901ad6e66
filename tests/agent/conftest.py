"""Fixtures for the agent tests: an executor over a temporary state directory and a launch builder."""

from __future__ import annotations

import contextlib
import os
import pwd
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from nanum.agent.executor import Executor
from nanum.agent.launch import launcher
from nanum.protocol import JobLaunch

NODE = "test-node"


def make_launch(job_id: int, *command: str, **fields: Any) -> JobLaunch:
    values: dict[str, Any] = {
        "job_id": job_id,
        "name": f"job{job_id}",
        "command": list(command),
        "workdir": "/tmp",
        "gpus": [0],
        "unix_user": pwd.getpwuid(os.geteuid()).pw_name,
        "checkpoint_dir": "",
        "grace_s": 5.0,
    }
    values.update(fields)
    return JobLaunch(**values)


@pytest.fixture
def state_dir(tmp_path: Path) -> Path:
    return tmp_path / "state"


@pytest.fixture
def executor(state_dir: Path) -> Iterator[Executor]:
    ex = Executor(state_dir, NODE)
    yield ex
    for job_id, state in ex.held().items():
        if state == "running":
            ex.stop(job_id, 0.0)
            ex.wait(job_id, 5)
    ex.close()


@pytest.fixture(autouse=True, scope="session")
def _reap_left_children() -> Iterator[None]:
    """Job processes that a test's executors left behind (a test that drops an executor while its job runs, as an
    agent restart does) are stopped once the tests are done, rather than left running."""
    yield
    for pid in launcher().waiters():
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL)
        launcher().returncode(pid)
    launcher().close()
