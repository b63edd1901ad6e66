"""The lease the guard reads (STATE/lease) after a reply renews it: written before the reply's jobs start where
the old one runs out soon, else once they have started; never later than the lease the agent holds."""

from __future__ import annotations

from pathlib import Path

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
