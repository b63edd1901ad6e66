"""Job directories made ahead (`nanum.agent.jobsdir.Spares`): a start creates no file, a spare serves one job, a
job's own files are never another job's (its directory, exit file and record's files are the agent's, kept), and an
earlier agent's spares are never used."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

from nanum.agent.executor import Executor
from nanum.agent.jobsdir import JOB_FILES, KEPT_FILES, RECORD_FILES, REFILL_AFTER_S, SPARES, Spares
from tests.agent.conftest import NODE, make_launch

OTHER_UID = 54321


def spares(jobs_dir: Path) -> list[Path]:
    return sorted(p for p in jobs_dir.iterdir() if p.name.startswith(".spare-"))


def wait_for_spares(jobs_dir: Path, count: int = SPARES, timeout: float = 10.0) -> list[Path]:
    deadline = time.monotonic() + timeout
    while len(found := spares(jobs_dir)) < count and time.monotonic() < deadline:
        time.sleep(0.01)
    assert len(found) == count, f"{len(found)} spare job directories, not {count}"
    return found


def inodes(directory: Path) -> set[int]:
    return {entry.stat().st_ino for entry in directory.iterdir()}


def test_a_job_starts_and_ends_in_a_directory_and_files_made_ahead(executor: Executor) -> None:
    made = wait_for_spares(executor.jobs_dir)
    ahead = {ino for spare in made for ino in inodes(spare)} | {spare.stat().st_ino for spare in made}
    assert all(len(list(spare.iterdir())) == len(JOB_FILES) + len(RECORD_FILES) for spare in made)

    executor.start(allow_root=True, launch=make_launch(5, "sh", "-c", "echo hello"))
    status = executor.wait(5, 5)

    assert status is not None and status.exit_code == 0
    assert executor.read_log(5, 0, 1 << 20)[0] == "hello\n"
    job_dir = executor.jobs_dir / "5"
    # the directory, its log, exit and activity files and the record (written three times) were all made ahead
    assert job_dir.stat().st_ino in ahead
    assert {(job_dir / name).stat().st_ino for name in ("output.log", "exit", "activity", "job.json")} <= ahead
    assert not (job_dir / "job.json.tmp").exists()
    # the one taken is replaced, by a new directory: none serves two jobs
    again = wait_for_spares(executor.jobs_dir)
    assert job_dir.stat().st_ino not in {spare.stat().st_ino for spare in again}


def run_jobs(executor: Executor, first: int, count: int) -> list[Path]:
    launches = [make_launch(job_id, "true") for job_id in range(first, first + count)]
    executor.start_all(launches, allow_root=True)
    for launch in launches:
        status = executor.wait(launch.job_id, 5)
        assert status is not None and status.exit_code == 0
    return [executor.jobs_dir / str(launch.job_id) for launch in launches]


def test_a_forgotten_jobs_directory_and_agent_files_serve_later_jobs_but_its_own_files_never_do(
        executor: Executor) -> None:
    wait_for_spares(executor.jobs_dir)
    executor.start(allow_root=True, launch=make_launch(1, "sh", "-c", "echo secret; exit 3"))
    status = executor.wait(1, 5)
    assert status is not None and status.exit_code == 3
    first = executor.jobs_dir / "1"
    # What a process of job 1 that outlived it might hold open: its log and activity file. And what only the agent
    # and the job's waiter open: its directory, exit file and record.
    job_fds = [os.open(first / name, os.O_WRONLY | os.O_APPEND) for name in ("output.log", "activity")]
    kept_fds = [os.open(first / name, os.O_RDONLY) for name in KEPT_FILES]
    directory = first.stat().st_ino
    try:
        assert executor.forget(1)
        deadline = time.monotonic() + 10
        while first.exists() or any(p.name.startswith(".trash-") for p in executor.jobs_dir.iterdir()):
            assert time.monotonic() < deadline, "the forgotten job's directory was never cleared"
            time.sleep(0.01)
        # The spares made before job 1 was forgotten go first; the ones made after hold its directory and files.
        wait_for_spares(executor.jobs_dir)
        later = run_jobs(executor, 10, SPARES)
        wait_for_spares(executor.jobs_dir)
        later += run_jobs(executor, 20, SPARES)

        kept = {os.fstat(fd).st_ino for fd in kept_fds}
        reused = {(d / name).stat().st_ino for d in later for name in KEPT_FILES if (d / name).exists()} & kept
        assert reused == kept, "job 1's exit and record files were not kept for later jobs"
        assert all(os.fstat(fd).st_nlink == 1 for fd in kept_fds)
        assert directory in {d.stat().st_ino for d in later}, "job 1's directory was not kept for a later job"
        # every later job ended with its own status, not job 1's
        assert all(executor.status(int(d.name)).exit_code == 0 for d in later)  # type: ignore[union-attr]
        # Its log and activity file are in no later job: what a lingering process writes reaches no one else's.
        assert all(os.fstat(fd).st_nlink == 0 for fd in job_fds)
        os.write(job_fds[0], b"written after the job ended\n")
        assert all(executor.read_log(int(d.name), 0, 1 << 20)[0] == "" for d in later)
        assert all((d / "activity").stat().st_size == 0 for d in later)
    finally:
        for fd in (*job_fds, *kept_fds):
            os.close(fd)


def test_a_spare_holds_only_the_agents_own_empty_files(executor: Executor) -> None:
    for spare in wait_for_spares(executor.jobs_dir):
        for entry in spare.iterdir():
            info = entry.stat()
            assert (info.st_uid, info.st_size) == (os.geteuid(), 0)


def test_an_earlier_agents_spares_are_deleted_not_used(state_dir: Path) -> None:
    first = Executor(state_dir, NODE)
    left = wait_for_spares(first.jobs_dir)
    first.close()
    for spare in left:  # as if the earlier agent had run as another account
        for entry in spare.iterdir():
            os.chown(entry, OTHER_UID, OTHER_UID)

    second = Executor(state_dir, NODE)
    try:
        second.start(allow_root=True, launch=make_launch(6, "true"))
        assert second.wait(6, 5) is not None
        job_dir = second.jobs_dir / "6"
        assert {(job_dir / name).stat().st_uid for name in ("output.log", "exit", "activity")} == {os.geteuid()}
        assert not any(spare.exists() and OTHER_UID in {e.stat().st_uid for e in spare.iterdir()} for spare in left)
    finally:
        second.close()


def test_jobs_start_when_no_spare_is_ready(executor: Executor) -> None:
    wait_for_spares(executor.jobs_dir)
    launches = [make_launch(job_id, "true") for job_id in range(10, 10 + SPARES + 3)]
    statuses = executor.start_all(launches, allow_root=True)
    assert [s.state for s in statuses] == ["running"] * len(launches)
    for launch in launches:
        status = executor.wait(launch.job_id, 5)
        assert status is not None and status.exit_code == 0


def test_an_agent_stopping_right_after_a_start_stops_at_once(tmp_path: Path) -> None:
    jobs_dir = tmp_path / "jobs"
    jobs_dir.mkdir()
    made = Spares(jobs_dir, count=2)
    wait_for_spares(jobs_dir, 2)
    made.take(jobs_dir / "1")
    time.sleep(REFILL_AFTER_S / 4)  # its thread, woken, now waits out the starts before it makes another
    closing = threading.Thread(target=made.close, daemon=True)
    closing.start()
    closing.join(5)
    assert not closing.is_alive(), "the agent's spares thread never ended"
