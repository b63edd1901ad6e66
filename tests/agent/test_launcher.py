"""Jobs are started by the agent's launcher: what a job starts with, a command that cannot run, a launcher that dies."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from pathlib import Path

from nanum.agent import procs
from nanum.agent.executor import Executor
from nanum.agent.launch import launcher
from tests.agent.conftest import make_launch
from tests.agent.test_executor import log_text, wait_for_file

#: Signals 32 and 33, which glibc keeps for itself below SIGRTMIN (its `posix_spawn` leaves them ignored).
GLIBC_INTERNAL = (1 << 31) | (1 << 32)


def test_a_job_starts_with_no_signal_ignored_or_blocked(executor: Executor) -> None:
    # The agent's Python ignores SIGPIPE, a shell ignores SIGINT and SIGQUIT in background commands, and the waiter
    # blocks SIGTERM: none of it may reach the job (`yes | head` must end, Ctrl-C must stop a notebook's kernel).
    executor.start(allow_root=True, launch=make_launch(1, "grep", "-E", "^Sig(Ign|Blk)", "/proc/self/status"))
    status = executor.wait(1, 5)
    assert status is not None and status.exit_code == 0
    blocked, ignored = (int(word, 16) for word in log_text(executor, 1).split()[1::2])
    assert blocked == 0
    assert ignored & ~GLIBC_INTERNAL == 0, f"signals ignored: {ignored:#x}"  # no signal a program can use


def test_a_command_that_cannot_be_run_ends_the_job_with_127_and_its_log_says_why(executor: Executor) -> None:
    executor.start(allow_root=True, launch=make_launch(2, "no-such-program-here", "--flag"))
    status = executor.wait(2, 5)
    assert status is not None and status.state == "exited" and status.exit_code == 127
    assert log_text(executor, 2) == "nanum: cannot run 'no-such-program-here': No such file or directory\n"


def test_an_empty_program_name_ends_the_job_with_127_and_its_log_says_why(executor: Executor) -> None:
    executor.start(allow_root=True, launch=make_launch(12, "", "arg"))
    status = executor.wait(12, 5)
    assert status is not None and status.exit_code == 127
    assert log_text(executor, 12) == "nanum: cannot run '': no program named\n"


def test_a_script_without_an_interpreter_line_runs_with_sh(executor: Executor, tmp_path: Path) -> None:
    script = tmp_path / "plain"
    script.write_text('echo "plain script: $1"\n')
    script.chmod(0o755)
    executor.start(allow_root=True, launch=make_launch(3, str(script), "ok"))
    status = executor.wait(3, 5)
    assert status is not None and status.exit_code == 0
    assert log_text(executor, 3) == "plain script: ok\n"


def test_the_job_runs_in_its_working_directory_with_pwd_set(executor: Executor, tmp_path: Path) -> None:
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    executor.start(allow_root=True, launch=make_launch(4, "sh", "-c", 'echo "$PWD"; /bin/pwd',
                                                       workdir=str(tmp_path / "link")))
    status = executor.wait(4, 5)
    assert status is not None and status.exit_code == 0
    assert log_text(executor, 4) == f"{tmp_path / 'real'}\n{tmp_path / 'real'}\n"


def test_a_launcher_that_dies_loses_no_job_and_the_next_job_starts(executor: Executor, tmp_path: Path) -> None:
    ready = tmp_path / "ready"
    executor.start(allow_root=True, launch=make_launch(5, "sh", "-c", f"echo up > {ready}; sleep 0.5; exit 7"))
    wait_for_file(ready)
    dead = launcher().pid
    assert dead is not None
    os.kill(dead, signal.SIGKILL)
    status = executor.wait(5, 10)  # the waiter outlives its launcher and records the status
    assert status is not None and status.state == "exited" and status.exit_code == 7

    executor.start(allow_root=True, launch=make_launch(6, "sh", "-c", "echo again"))
    status = executor.wait(6, 10)
    assert status is not None and status.exit_code == 0 and log_text(executor, 6) == "again\n"
    assert launcher().pid not in (None, dead)


def test_a_job_killed_with_its_waiter_is_reported_killed(executor: Executor, tmp_path: Path) -> None:
    # The waiter writes no status when it dies with its job (the OOM killer, a SIGKILL to the group from outside):
    # the launcher's report of the waiter's own end says how it ended.
    ready = tmp_path / "ready"
    status = executor.start(allow_root=True, launch=make_launch(8, "sh", "-c", f"echo up > {ready}; sleep 60"))
    wait_for_file(ready)
    assert status.pid is not None
    os.killpg(status.pid, signal.SIGKILL)
    ended = executor.wait(8, 5)
    assert ended is not None and ended.state == "exited" and (ended.exit_code, ended.signal) == (137, 9)



def test_a_launcher_that_dies_before_reading_a_start_starts_it_on_a_new_launcher_once(
        executor: Executor, tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    stopped = launcher().pid
    assert stopped is not None
    os.kill(stopped, signal.SIGSTOP)  # it will never read the request
    try:
        starting = threading.Thread(target=executor.start, kwargs={
            "allow_root": True, "launch": make_launch(9, "sh", "-c", f"echo run >> {runs}")})
        starting.start()
        time.sleep(0.3)  # the request is sent; the executor waits for the answer
    finally:
        os.kill(stopped, signal.SIGKILL)
    starting.join(10)
    status = executor.wait(9, 10)
    assert status is not None and status.state == "exited" and status.exit_code == 0, status
    assert runs.read_text() == "run\n"
    assert launcher().pid not in (None, stopped)


def test_the_process_holding_a_file_is_found_but_never_the_one_asking(tmp_path: Path) -> None:
    # How a start is never made twice when the launcher died between forking the job's waiter and answering:
    # the waiter holds the job's exit file from birth.
    held = tmp_path / "exit"
    with held.open("w") as mine:  # this process holds it too
        assert procs.opened_by_other(held, os.getpid()) is None
        other = subprocess.Popen(["sleep", "30"], stdout=mine)
        try:
            assert procs.opened_by_other(held, os.getpid()) == other.pid
        finally:
            other.kill()
            other.wait()
        assert procs.opened_by_other(held, os.getpid()) is None
