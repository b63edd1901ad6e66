"""What preemption needs from the executor: a job's checkpoint mark reported in its status, the preempt file
before SIGTERM, and the grace its launch carries (its lab's) when the server stops it."""

from __future__ import annotations

import os
import time
from pathlib import Path

from nanum.agent.executor import Executor
from tests.agent.conftest import make_launch
from tests.agent.test_executor import wait_for_file


def test_a_touched_checkpoint_mark_is_reported_with_its_time(executor: Executor, tmp_path: Path) -> None:
    ckpt = tmp_path / "ckpt"
    script = ('while [ ! -e go ]; do sleep 0.02; done; touch "$NANUM_CHECKPOINT_DIR/.checkpoint"; '
              "echo saved > marked; sleep 30")
    executor.start(allow_root=True, launch=make_launch(3, "sh", "-c", script, workdir=str(tmp_path),
                                                        checkpoint_dir=str(ckpt)))
    before = executor.status(3)
    assert before is not None and before.checkpoint_at is None
    (tmp_path / "go").touch()
    wait_for_file(tmp_path / "marked")
    status = executor.status(3)
    assert status is not None and status.checkpoint_at == os.stat(ckpt / ".checkpoint").st_mtime
    assert abs(status.checkpoint_at - time.time()) < 5


def test_a_stop_without_a_grace_uses_the_launchs_and_the_preempt_file_comes_first(
        executor: Executor, tmp_path: Path) -> None:
    script = ('trap \'[ -e "$NANUM_PREEMPT_FILE" ] && echo file-first > seen\' TERM; '
              "while :; do sleep 0.05; done")
    executor.start(allow_root=True, launch=make_launch(4, "sh", "-c", script, workdir=str(tmp_path), grace_s=0.5))
    time.sleep(0.2)
    began = time.monotonic()
    executor.stop(4)
    status = executor.wait(4, 5)
    took = time.monotonic() - began
    assert status is not None and status.signal == 9
    assert 0.4 <= took < 2.0, f"killed after {took:.2f} s; the launch's grace is 0.5 s"
    assert (tmp_path / "seen").read_text() == "file-first\n"
