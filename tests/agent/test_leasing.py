"""The lease the guard reads (STATE/lease) after a reply renews it: written before the reply's jobs start where
the old one runs out soon, else once they have started; never later than the lease the agent holds."""

from __future__ import annotations

import contextlib
from pathlib import Path

import pytest

from nanum.agent import fence
from nanum.agent.leasing import WRITE_AHEAD_S, LeaseKeeper


def on_file(state_dir: Path) -> float:
    lease = fence.Lease.load(state_dir)
    assert lease is not None
    return lease.expires


def keeper(state_dir: Path, left_s: float) -> LeaseKeeper:
    keep = LeaseKeeper(state_dir)
    keep.lease = fence.Lease(expires=fence.boottime() + left_s, agent=1, boot="b")
    keep.lease.save(state_dir)
    return keep


def test_a_lease_with_time_left_is_written_once_the_replys_jobs_have_started(tmp_path: Path) -> None:
    keep = keeper(tmp_path, 3 * WRITE_AHEAD_S)
    before = on_file(tmp_path)
    now = fence.boottime()
    keep.renew(now, 30.0)
    assert on_file(tmp_path) == before < keep.lease.expires  # the guard's copy can only run out sooner
    keep.flush()
    assert on_file(tmp_path) == keep.lease.expires == now + 30.0


def test_a_lease_about_to_run_out_is_written_before_the_replys_jobs_start(tmp_path: Path) -> None:
    keep = keeper(tmp_path, WRITE_AHEAD_S / 4)
    now = fence.boottime()
    keep.renew(now, 30.0)
    assert on_file(tmp_path) == now + 30.0
    keep.flush()  # nothing left to write
    assert on_file(tmp_path) == now + 30.0


def test_a_full_disk_is_said_and_the_lease_written_once_there_is_room(
    small_disk: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A job filled the node's disk: the agent (which had died of the lease's `No space left on device`) carries
    on, says it cannot write its lease, and writes it as soon as it can; the guard meanwhile sees the lease on
    file run out sooner, never later, than the agent's."""
    keep = keeper(small_disk, 3 * WRITE_AHEAD_S)
    before = on_file(small_disk)
    filler = small_disk / "output.log"
    with contextlib.suppress(OSError), filler.open("wb", buffering=0) as f:
        while True:
            f.write(b"x" * 65536)
    keep.renew(fence.boottime(), 30.0)
    keep.flush()
    keep.flush()
    assert on_file(small_disk) == before < keep.lease.expires
    said = [r.getMessage() for r in caplog.records if "cannot write its lease" in r.getMessage()]
    assert len(said) == 1 and "No space left on device" in said[0], said
    filler.unlink()
    keep.flush()
    assert on_file(small_disk) == keep.lease.expires
