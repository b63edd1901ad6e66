"""A job's record (`nanum.agent.jobrecord.JobRecord`): what an agent restarted after any save reads back."""

from __future__ import annotations

from pathlib import Path

import pytest

from nanum.agent.jobrecord import JobRecord
from nanum.agent.jobsdir import BLANK, RECORD
from tests.agent.conftest import make_launch


@pytest.mark.parametrize("ahead", [True, False], ids=["in a directory made ahead", "in a new directory"])
def test_a_record_saved_shorter_than_before_reads_back_as_saved(tmp_path: Path, ahead: bool) -> None:
    job_dir = tmp_path / "7"
    job_dir.mkdir()
    if ahead:  # a spare's record files: an earlier job's, emptied
        for name in (RECORD, BLANK):
            (job_dir / name).write_bytes(b"")
    record = JobRecord(launch=make_launch(7, "true"), dir=job_dir, ahead=ahead)
    record.reason = "a long reason " * 200
    record.save()
    record.save()  # the blank now holds the long record
    record.state, record.reason, record.exit_code = "exited", None, 0
    record.save()

    loaded = JobRecord.load(job_dir)
    assert loaded is not None
    assert (loaded.state, loaded.reason, loaded.exit_code) == ("exited", None, 0)
    assert not (job_dir / "job.json.tmp").exists()
