"""Jobs are started by the agent's launcher: what a job starts with, a command that cannot run, a launcher that dies."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from pathlib import Path

from nanum.agent import launcher as launcher_module
from nanum.agent import procs
from nanum.agent.executor import Executor
from nanum.agent.launch import launcher
from nanum.agent.launcher import _Spares
from tests.agent.conftest import make_launch
from tests.agent.test_executor import log_text, wait_for_file
from tests.processes import live_children

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


def spares_of(launcher_pid: int, timeout: float = 5.0) -> set[int]:
    """The launcher's spare waiters, once all of them are forked (a few ms after its last start)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        spares = {pid for pid, name in live_children(launcher_pid).items() if name == "nanum-spare"}
        if len(spares) == _Spares.COUNT:
            return spares
        time.sleep(0.01)
    raise AssertionError(f"launcher {launcher_pid} has not {_Spares.COUNT} spare waiters")


def gone(pid: int, timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            return True
        if state == "Z":
            return True
        time.sleep(0.01)
    return False


def test_a_job_starts_in_a_spare_waiter_forked_ahead(executor: Executor) -> None:
    spares = spares_of(launcher().pid or 0)
    status = executor.start(allow_root=True, launch=make_launch(13, "sh", "-c", "echo $$ $PPID"))
    assert status.pid in spares  # a spare became the job's waiter: it leads the job's session
    ended = executor.wait(13, 5)
    assert ended is not None and ended.exit_code == 0
    assert log_text(executor, 13).split()[1] == str(status.pid)


def test_the_jobs_of_one_round_start_each_once_in_spare_waiters(executor: Executor, tmp_path: Path) -> None:
    # A node's GPUs freed at once start as many jobs in one round: each is asked of the launcher before the
    # answer for the one before is read, and each finds a spare.
    spares = spares_of(launcher().pid or 0)
    ids = range(30, 30 + _Spares.COUNT)
    statuses = executor.start_all([make_launch(i, "sh", "-c", "echo $PPID") for i in ids], allow_root=True)
    assert [s.job_id for s in statuses] == list(ids)
    assert {s.pid for s in statuses} == spares
    for status in statuses:
        ended = executor.wait(status.job_id, 5)
        assert ended is not None and ended.exit_code == 0
        assert log_text(executor, status.job_id) == f"{status.pid}\n"  # each job's own waiter, told to its job


def test_a_job_of_a_round_that_cannot_start_fails_alone(executor: Executor, tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    good = [make_launch(i, "sh", "-c", f"echo {i} >> {runs}") for i in (40, 42)]
    bad = make_launch(41, "true", workdir=str(tmp_path / "missing"))
    statuses = executor.start_all([good[0], bad, good[1]], allow_root=True)
    assert [s.state for s in statuses] == ["running", "failed_to_start", "running"]
    assert "working directory" in (statuses[1].reason or "")
    for i in (40, 42):
        ended = executor.wait(i, 5)
        assert ended is not None and ended.exit_code == 0
    assert sorted(runs.read_text().split()) == ["40", "42"]


def test_a_launcher_that_dies_with_a_round_of_starts_unanswered_starts_each_once(
        executor: Executor, tmp_path: Path) -> None:
    # Every start of the round is sent before the launcher reads any: it dies with them all unanswered. Each is
    # made again on a new launcher, once.
    runs = tmp_path / "runs"
    stopped = launcher().pid
    assert stopped is not None
    os.kill(stopped, signal.SIGSTOP)
    ids = range(50, 53)
    try:
        starting = threading.Thread(target=executor.start_all, kwargs={"allow_root": True, "launches": [
            make_launch(i, "sh", "-c", f"echo {i} >> {runs}") for i in ids]})
        starting.start()
        time.sleep(0.3)  # the requests are sent; the executor waits for the first answer
    finally:
        os.kill(stopped, signal.SIGKILL)
    starting.join(10)
    for i in ids:
        status = executor.wait(i, 10)
        assert status is not None and status.state == "exited" and status.exit_code == 0, status
    assert sorted(runs.read_text().split()) == [str(i) for i in ids]
    assert launcher().pid not in (None, stopped)


def test_spare_waiters_killed_before_their_job_leave_the_job_to_a_new_one(
        executor: Executor, tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    spares = spares_of(launcher().pid or 0)
    for spare in spares:
        os.kill(spare, signal.SIGKILL)
    assert all(gone(spare) for spare in spares)
    status = executor.start(allow_root=True, launch=make_launch(14, "sh", "-c", f"echo run >> {runs}"))
    assert status.pid not in spares
    status = executor.wait(14, 10)
    assert status is not None and status.state == "exited" and status.exit_code == 0, status
    assert runs.read_text() == "run\n"


def test_a_launcher_that_dies_after_passing_a_start_to_its_spare_starts_it_once(
        executor: Executor, tmp_path: Path) -> None:
    # The start is queued to a spare, which has not read it when its launcher dies: the agent finds nobody
    # holding the job's exit file and starts it on a new launcher, so the spare, once it reads it, must not.
    runs = tmp_path / "runs"
    stopped = launcher().pid
    assert stopped is not None
    spares = spares_of(stopped)
    for spare in spares:
        os.kill(spare, signal.SIGSTOP)
    try:
        starting = threading.Thread(target=executor.start, kwargs={
            "allow_root": True, "launch": make_launch(15, "sh", "-c", f"echo run >> {runs}; sleep 0.5")})
        starting.start()
        time.sleep(0.3)  # the request is passed to a spare; the launcher waits for it to take it
        os.kill(stopped, signal.SIGKILL)
        starting.join(10)
        status = executor.wait(15, 10)
        assert status is not None and status.state == "exited" and status.exit_code == 0, status
    finally:
        for spare in spares:
            os.kill(spare, signal.SIGCONT)
    assert all(gone(spare) for spare in spares)  # the one that read the start saw its launcher gone, and ended
    time.sleep(0.2)
    assert runs.read_text() == "run\n"


def test_the_spare_waiters_end_with_their_launcher() -> None:
    running = launcher()
    running.start()
    spares = spares_of(running.pid or 0)
    running.close()
    assert all(gone(spare) for spare in spares)


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


def waiter_status(tmp_path: Path, argv: list[str], stop: str) -> tuple[str, int]:
    """Run a job's waiter (`_run_job`, as the launcher runs it) in a process of its own, its group sent SIGTERM
    `stop`: "before" its setup, "while-starting" (after the waiter's last look, before the command exists) or
    "after-start" (the moment the command exists). Its exit file's text and the waiter's own exit status."""
    log, exit_file = tmp_path / "log", tmp_path / "exit"
    request = {"title": "test", "cgroup_files": [], "user": None, "cwd": str(tmp_path), "argv": argv,
               "env": {"PATH": os.defpath}}
    pid = os.fork()
    if pid == 0:
        code = 99
        try:
            log_fd = os.open(log, os.O_WRONLY | os.O_CREAT, 0o600)
            exit_fd = os.open(exit_file, os.O_WRONLY | os.O_CREAT, 0o600)
            launcher_module._lead_session(())
            spawn = launcher_module._spawn

            def spawn_and_stop(argv: list[str], env: dict[str, str]) -> int:
                if stop == "while-starting":
                    os.killpg(0, signal.SIGTERM)
                child = spawn(argv, env)
                if stop == "after-start":
                    os.killpg(0, signal.SIGTERM)
                return child

            launcher_module._spawn = spawn_and_stop
            if stop == "before":
                os.killpg(0, signal.SIGTERM)
            code = launcher_module._run_job(request, log_fd, exit_fd)
        finally:
            os._exit(code)
    deadline = time.monotonic() + 10
    while (ended := os.waitpid(pid, os.WNOHANG))[0] == 0 and time.monotonic() < deadline:
        time.sleep(0.01)
    if ended[0] == 0:
        os.killpg(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        return "still running after 10 s", -1
    return exit_file.read_text(), os.waitstatus_to_exitcode(ended[1])


def test_a_job_stopped_while_its_command_starts_is_stopped_and_its_waiter_says_how_it_ended(tmp_path: Path) -> None:
    # The waiter must outlive a stop that comes the moment its command exists (else the job ends, its GPUs are
    # handed on, while the command runs on), and pass on one the command missed (else it runs until its SIGKILL).
    assert waiter_status(tmp_path, ["sleep", "30"], "after-start") == ("143\n", 0)
    assert waiter_status(tmp_path, ["sleep", "30"], "while-starting") == ("143\n", 0)


def test_a_job_stopped_before_its_command_starts_never_runs_it(tmp_path: Path) -> None:
    ran = tmp_path / "ran"
    assert waiter_status(tmp_path, ["touch", str(ran)], "before") == ("143\n", 0)
    assert not ran.exists()
