"""The executor runs real processes: environment, exit codes, stopping whole process groups, time limits."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from pathlib import Path

from nanum.agent import fence, procs
from nanum.agent.executor import Executor
from nanum.agent.jobsdir import RECYCLED, SPARES
from nanum.agent.launch import launcher
from tests.agent.conftest import NODE, make_launch


def log_text(ex: Executor, job_id: int) -> str:
    return ex.read_log(job_id, 0, 1 << 20)[0]


def wait_for_file(path: Path, timeout: float = 5.0) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists() and (text := path.read_text()):
            return text
        time.sleep(0.01)
    raise AssertionError(f"{path} never appeared")


def gone(pid: int, timeout: float = 2.0) -> bool:
    """Whether `pid` is dead within `timeout` (a SIGKILL to a group lands on each member in turn)."""
    deadline = time.monotonic() + timeout
    while procs.is_alive(pid, None) and time.monotonic() < deadline:
        time.sleep(0.01)
    return not procs.is_alive(pid, None)


def test_job_sees_its_gpus_and_id(executor: Executor) -> None:
    script = 'echo "$CUDA_VISIBLE_DEVICES|$NANUM_JOB_ID|$CUDA_DEVICE_ORDER|$FOO|$PWD"; echo err >&2'
    executor.start(allow_root=True, launch=make_launch(7, "sh", "-c", script, gpus=[1, 3], env={"FOO": "bar"}))
    status = executor.wait(7, 5)
    assert status is not None and status.state == "exited" and status.exit_code == 0 and status.signal is None
    assert log_text(executor, 7) == "1,3|7|PCI_BUS_ID|bar|/tmp\nerr\n"
    assert status.log_size == len("1,3|7|PCI_BUS_ID|bar|/tmp\nerr\n")


def test_exit_code_is_recorded(executor: Executor) -> None:
    executor.start(allow_root=True, launch=make_launch(1, "sh", "-c", "exit 3"))
    status = executor.wait(1, 5)
    assert status is not None and status.exit_code == 3 and status.ended_at and status.started_at


def test_job_gets_no_stdin_and_no_waiter_descriptor(executor: Executor) -> None:
    executor.start(allow_root=True, launch=make_launch(1, "sh", "-c", "cat; ls -l /proc/$$/fd"))
    assert executor.wait(1, 5) is not None
    listing = log_text(executor, 1)
    assert "/dev/null" in listing and "output.log" in listing
    assert "/exit" not in listing


def test_gang_jobs_get_rendezvous_variables(executor: Executor) -> None:
    launch = make_launch(
        2,
        "sh",
        "-c",
        'echo "$MASTER_ADDR $MASTER_PORT $NNODES $NODE_RANK $NPROC_PER_NODE $WORLD_SIZE"',
        master_addr="10.0.0.1",
        master_port=29400,
        nnodes=2,
        node_rank=1,
        nproc_per_node=4,
    )
    executor.start(launch, allow_root=True)
    executor.wait(2, 5)
    assert log_text(executor, 2) == "10.0.0.1 29400 2 1 4 8\n"


def test_checkpoint_dir_is_created(executor: Executor, tmp_path: Path) -> None:
    ckpt = tmp_path / "ckpt" / "job3"
    executor.start(
        allow_root=True,
        launch=make_launch(3, "sh", "-c", 'test -d "$NANUM_CHECKPOINT_DIR" && echo ok', checkpoint_dir=str(ckpt)),
    )
    executor.wait(3, 5)
    assert log_text(executor, 3) == "ok\n"


def test_missing_workdir_fails_to_start_naming_it(executor: Executor) -> None:
    status = executor.start(allow_root=True, launch=make_launch(4, "true", workdir="/no/such/dir"))
    assert status.state == "failed_to_start"
    assert status.reason == f"working directory /no/such/dir does not exist on node {NODE}"


def test_a_home_relative_workdir_is_the_owners_home(executor: Executor) -> None:
    import pwd

    executor.start(allow_root=True, launch=make_launch(8, "sh", "-c", 'echo "$PWD"', workdir="~"))
    executor.wait(8, 5)
    assert log_text(executor, 8) == pwd.getpwuid(os.getuid()).pw_dir + "\n"


def test_stop_terms_then_kills_the_whole_group(executor: Executor, tmp_path: Path) -> None:
    pidfile = tmp_path / "child.pid"
    stubborn = (
        "import os, signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
        f"open({str(pidfile)!r}, 'w').write(str(os.getpid())); time.sleep(60)"
    )
    script = f"trap '' TERM; python3 -c \"{stubborn}\" & wait"
    executor.start(allow_root=True, launch=make_launch(5, "sh", "-c", script))
    child = int(wait_for_file(pidfile))
    started = time.monotonic()
    executor.stop(5, grace_s=0.3)
    status = executor.wait(5, 5)
    assert status is not None and status.signal == 9 and status.exit_code == 137
    assert 0.3 <= time.monotonic() - started < 2.0
    assert gone(child)
    assert (executor.jobs_dir / "5" / "preempt").exists()


def test_sigterm_ends_a_job_and_the_waiter_records_it(executor: Executor) -> None:
    executor.start(allow_root=True, launch=make_launch(6, "sleep", "60"))
    time.sleep(0.1)
    executor.stop(6, grace_s=10)
    status = executor.wait(6, 5)
    assert status is not None and status.exit_code == 143 and status.signal == 15
    assert (executor.jobs_dir / "6" / "exit").read_text().strip() == "143"


def test_a_job_stopped_the_moment_it_starts_gets_sigterm_not_sigkill(executor: Executor) -> None:
    # A SIGTERM that reaches the waiter before it has started the command must still stop the command.
    for job_id in range(100, 140):
        executor.start(allow_root=True, launch=make_launch(job_id, "sleep", "60"))
        executor.stop(job_id, grace_s=3)
    for job_id in range(100, 140):
        status = executor.wait(job_id, 10)
        assert status is not None and (status.exit_code, status.signal) == (143, 15), job_id


def test_a_job_can_still_be_interrupted(executor: Executor) -> None:
    probe = "import signal; print(signal.getsignal(signal.SIGINT) is signal.default_int_handler)"
    executor.start(allow_root=True, launch=make_launch(9, "python3", "-c", probe))
    status = executor.wait(9, 10)
    assert status is not None and status.exit_code == 0
    assert log_text(executor, 9) == "True\n"


def test_job_may_catch_sigterm_and_exit_cleanly(executor: Executor) -> None:
    script = (
        'trap "echo checkpoint; test -e \\"$NANUM_PREEMPT_FILE\\" && echo preempted; exit 0" TERM; '
        "echo ready; sleep 60 & wait"
    )
    executor.start(allow_root=True, launch=make_launch(8, "sh", "-c", script))
    deadline = time.monotonic() + 10
    while log_text(executor, 8) != "ready\n" and time.monotonic() < deadline:  # its trap is set
        time.sleep(0.02)
    executor.stop(8, grace_s=10)
    status = executor.wait(8, 5)
    assert status is not None and status.exit_code == 0
    assert log_text(executor, 8) == "ready\ncheckpoint\npreempted\n"


def test_time_limit_times_out(executor: Executor) -> None:
    executor.start(allow_root=True, launch=make_launch(9, "sleep", "60", time_limit_s=0.3, grace_s=1))
    status = executor.wait(9, 5)
    assert status is not None and status.timed_out and status.exit_code == 143
    assert status.reason == "time limit of 0.3s reached"


def test_a_job_that_writes_more_output_than_it_may_is_stopped_and_its_first_bytes_kept(executor: Executor) -> None:
    """A runaway print loop (`yes`) writes hundreds of megabytes a second into the node's state directory: past
    `max_output_bytes` the job is stopped, however it exits, and only that much of its log is reported and read."""
    script = 'trap "echo bye; exit 0" TERM; printf "é%.0s" $(seq 50); yes'  # exits 0 when told to stop
    executor.start(allow_root=True, launch=make_launch(5, "bash", "-c", script, max_output_bytes=1 << 20))
    status = executor.wait(5, 10)
    assert status is not None and status.exit_code == 0 and status.stopped
    assert status.reason == ("its output passed 1 MiB, the most a job may write (the server's --max-output): it was "
                             "stopped, and its first 1 MiB kept; write large output to a file of your own")
    assert status.log_size == 1 << 20
    text, consumed = executor.read_log(5, 0, 4 << 20)
    assert consumed == 1 << 20 and text.startswith("é" * 50 + "y\ny\n")
    tail, more = executor.read_log(5, (1 << 20) - 10, 4 << 20)
    assert more == 10 and text.endswith(tail)


def test_processes_left_behind_are_killed_when_the_job_ends(executor: Executor, tmp_path: Path) -> None:
    pidfile = tmp_path / "bg.pid"
    executor.start(allow_root=True, launch=make_launch(10, "sh", "-c", f"sleep 60 & echo $! > {pidfile}; exit 0"))
    executor.wait(10, 5)
    assert gone(int(wait_for_file(pidfile)))


def test_restarted_executor_readopts_a_running_job(state_dir: Path) -> None:
    first = Executor(state_dir, NODE)
    first.start(allow_root=True, launch=make_launch(11, "sh", "-c", "sleep 0.5; exit 5"))
    pid = first.status(11).pid  # type: ignore[union-attr]
    first.close()
    second = Executor(state_dir, NODE)
    try:
        running = second.status(11)
        assert running is not None and running.state == "running" and running.pid == pid
        status = second.wait(11, 5)
        assert status is not None and status.exit_code == 5
    finally:
        second.close()


def test_restarted_executor_reads_exit_codes_of_jobs_that_ended_meanwhile(state_dir: Path) -> None:
    first = Executor(state_dir, NODE)
    first.start(allow_root=True, launch=make_launch(12, "sh", "-c", "sleep 0.2; exit 4"))
    first.close()
    wait_for_file(state_dir / "jobs" / "12" / "exit")
    second = Executor(state_dir, NODE)
    try:
        status = second.status(12)
        assert status is not None and status.state == "exited" and status.exit_code == 4
    finally:
        second.close()


def test_restarted_executor_can_stop_an_adopted_job(state_dir: Path) -> None:
    first = Executor(state_dir, NODE)
    first.start(allow_root=True, launch=make_launch(13, "sleep", "60"))
    first.close()
    second = Executor(state_dir, NODE)
    try:
        second.stop(13, grace_s=5)
        status = second.wait(13, 5)
        assert status is not None and status.exit_code == 143
    finally:
        second.close()


def test_dead_pid_with_another_start_time_is_not_adopted(state_dir: Path) -> None:
    first = Executor(state_dir, NODE)
    first.start(allow_root=True, launch=make_launch(14, "sleep", "60"))
    first.close()
    record = state_dir / "jobs" / "14" / "job.json"
    text = record.read_text()
    import json

    data = json.loads(text)
    real_pid = data["pid"]
    data["pid"] = os.getpid()  # alive, but not the job (different start time)
    record.write_text(json.dumps(data))
    second = Executor(state_dir, NODE)
    try:
        status = second.status(14)
        assert status is not None and status.state == "exited" and status.exit_code is None
        assert "exit status is unknown" in (status.reason or "")
    finally:
        second.close()
        os.killpg(real_pid, 9)
        launcher().returncode(real_pid)  # neither executor adopted it


def test_forget_removes_an_ended_job(executor: Executor) -> None:
    executor.start(allow_root=True, launch=make_launch(15, "true"))
    executor.wait(15, 5)
    assert executor.forget(15)
    assert executor.held() == {}
    assert not (executor.jobs_dir / "15").exists()


def test_forgotten_jobs_files_are_deleted_but_never_what_a_link_among_them_points_to(
        executor: Executor, tmp_path: Path) -> None:
    target = tmp_path / "theirs"
    target.write_text("keep")
    for job_id, extra in ((17, None), (18, "directory")):
        executor.start(allow_root=True, launch=make_launch(job_id, "true"))
        executor.wait(job_id, 5)
        job_dir = executor.jobs_dir / str(job_id)
        (job_dir / "link").symlink_to(target)
        (job_dir / "job.json").unlink()  # a record file that is a link is deleted, never kept for a later job's
        (job_dir / "job.json").symlink_to(target)
        if extra:  # not what the agent leaves there: deleted all the same
            (job_dir / extra).mkdir()
            (job_dir / extra / "file").write_text("x")
        assert executor.forget(job_id)
    deadline = time.monotonic() + 5
    while jobs_and_trash(executor) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert jobs_and_trash(executor) == []
    for job_id in range(20, 20 + 2 * SPARES):  # through the spares made since, with kept record files
        executor.start(allow_root=True, launch=make_launch(job_id, "true"))
        assert executor.wait(job_id, 5) is not None
    assert target.read_text() == "keep"


def jobs_and_trash(executor: Executor) -> list[str]:
    """What the jobs directory holds beside the directories made ahead for the next jobs."""
    return [p.name for p in executor.jobs_dir.iterdir() if not p.name.startswith((".spare-", ".making-", RECYCLED))]


def test_starting_a_held_job_again_does_nothing(executor: Executor) -> None:
    first = executor.start(allow_root=True, launch=make_launch(16, "sleep", "60"))
    again = executor.start(allow_root=True, launch=make_launch(16, "sleep", "60"))
    assert again.pid == first.pid


# An agent killed while it starts a job: this child process starts one and dies at the moment `die` picks, without
# cleaning up, as SIGKILL would leave it.
_DIES = """
import os, sys
from pathlib import Path
import nanum.agent.executor
from nanum.agent.executor import Executor
from nanum.agent.jobrecord import JobRecord
from tests.agent.conftest import NODE, make_launch
{die}
Executor(Path(sys.argv[1]), NODE).start(allow_root=True, launch=make_launch(int(sys.argv[2]), *sys.argv[3:]))
"""
#: after the spawn, before the job's pid is recorded
AFTER_SPAWN = ('save = JobRecord.save\n'
               'JobRecord.save = lambda self: os._exit(9) if self.state == "running" else save(self)')
#: after the job is recorded as starting, before its process is spawned
BEFORE_SPAWN = "nanum.agent.executor.spawn = lambda *args, **kwargs: os._exit(9)"


def _start_and_die(state_dir: Path, job_id: int, *command: str, die: str = AFTER_SPAWN) -> None:
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": f"{root}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    died = subprocess.run([sys.executable, "-c", _DIES.format(die=die), str(state_dir), str(job_id), *command],
                          cwd=root, env=env, capture_output=True, text=True, timeout=30)
    assert died.returncode == 9, died.stderr


def test_a_job_whose_agent_died_before_recording_its_pid_is_adopted_not_started_again(
        state_dir: Path, tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    _start_and_die(state_dir, 21, "sh", "-c", f"echo run >> {runs}; sleep 0.5; exit 5")
    wait_for_file(runs)
    again = Executor(state_dir, NODE)
    try:
        running = again.status(21)
        assert running is not None and running.state == "running" and running.pid is not None
        again.start(allow_root=True, launch=make_launch(21, "sh", "-c", f"echo run >> {runs}"))  # the server's list
        status = again.wait(21, 5)
        assert status is not None and status.exit_code == 5
    finally:
        again.close()
    assert runs.read_text() == "run\n"


def test_a_job_that_ended_before_its_agent_came_back_is_read_from_its_exit_file(
        state_dir: Path, tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    _start_and_die(state_dir, 22, "sh", "-c", f"echo run >> {runs}; exit 4")
    wait_for_file(state_dir / "jobs" / "22" / "exit")
    again = Executor(state_dir, NODE)
    try:
        status = again.status(22)
        assert status is not None and (status.state, status.exit_code) == ("exited", 4)
    finally:
        again.close()
    assert runs.read_text() == "run\n"


def test_the_guard_stops_a_job_whose_agent_died_before_recording_its_pid(state_dir: Path, tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    _start_and_die(state_dir, 23, "sh", "-c", f"echo run >> {runs}; exec sleep 60")
    wait_for_file(runs)
    pid = procs.holding(state_dir / "jobs" / "23" / "exit")
    assert pid is not None
    now = fence.boottime()
    assert fence.fence_jobs(state_dir / "jobs", now - 10, now, set()) == 1  # the lease ran out long ago
    assert gone(pid, timeout=5)


def test_a_job_whose_agent_died_before_spawning_it_starts_once_when_asked_again(
        state_dir: Path, tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    _start_and_die(state_dir, 24, "sh", "-c", f"echo run >> {runs}", die=BEFORE_SPAWN)
    again = Executor(state_dir, NODE)
    try:
        assert again.status(24) is None  # never ran: not reported, so the server's list starts it again
        again.start(allow_root=True, launch=make_launch(24, "sh", "-c", f"echo run >> {runs}"))
        status = again.wait(24, 5)
        assert status is not None and status.exit_code == 0
    finally:
        again.close()
    assert runs.read_text() == "run\n"


def test_a_full_disk_stops_no_watching(small_disk: Path) -> None:
    """A job fills the node's disk: another job's time limit still stops it, and both ends are reported. (The
    record of a stop could not be written, which had ended the thread that watches every job.)"""
    ex = Executor(small_disk / "state", NODE)
    try:
        ex.start(allow_root=True, launch=make_launch(1, "sleep", "60", time_limit_s=1.0, grace_s=1))
        ex.start(allow_root=True, launch=make_launch(2, "sh", "-c", "head -c 4000000 /dev/zero; echo done"))
        filled = ex.wait(2, 10)
        assert filled is not None and filled.state == "exited"
        stopped = ex.wait(1, 10)
        assert stopped is not None and stopped.timed_out and stopped.reason == "time limit of 1s reached"
    finally:
        for job_id in (1, 2):
            ex.stop(job_id, 0.0)
            ex.wait(job_id, 5)
        ex.close()


def test_a_job_that_cannot_start_for_the_nodes_fault_says_so(small_disk: Path) -> None:
    """A full disk is the node's fault, not the job's: the server then runs the job elsewhere and drains the node.
    A job refused for what it asked (an account the node does not have) is its own."""
    ex = Executor(small_disk / "state", NODE)
    try:
        refused = ex.start(allow_root=True, launch=make_launch(1, "true", unix_user="no-such-user-here"))
        assert refused.state == "failed_to_start" and not refused.node_fault
        with contextlib.suppress(OSError), (small_disk / "filler").open("wb", buffering=0) as f:
            while True:
                f.write(b"x" * 65536)
        full = ex.start(allow_root=True, launch=make_launch(2, "true"))
        assert full.state == "failed_to_start" and full.node_fault, full
        assert full.reason == "the agent could not start the job: No space left on device"
    finally:
        ex.close()
