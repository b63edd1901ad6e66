"""The allocations checker accepts sound runs and names each kind of impossible schedule."""

from __future__ import annotations

from pathlib import Path

import pytest

from nanum.sim.check import check_run

NODES = "node,gpus,model,owner\nn0,4,GPU,\nn1,4,GPU,\n"
JOBS_HEAD = ("job_id,user,lab,num_gpus,submit_time,start_time,end_time,queue_delay,jct,preemptions,duration,"
             "lost_seconds,nodes,status\n")
GOOD_JOBS = JOBS_HEAD + "a,u,l,2,0,0,100,0,100,0,100,0,1,completed\nb,u,l,2,5,10,60,5,55,0,50,0,1,completed\n"
GOOD_ALLOCS = "job_id,node,gpus,start,end\na,n0,0 1,0,100\nb,n0,2 3,10,60\n"


def run_dir(tmp_path: Path, allocs: str = GOOD_ALLOCS, jobs: str = GOOD_JOBS) -> Path:
    (tmp_path / "nodes.csv").write_text(NODES)
    (tmp_path / "allocations.csv").write_text(allocs)
    (tmp_path / "jobs.csv").write_text(jobs)
    return tmp_path


def test_sound_run_passes(tmp_path: Path) -> None:
    assert check_run(run_dir(tmp_path)) == []


@pytest.mark.parametrize(
    "allocs, jobs, expected",
    [
        pytest.param("job_id,node,gpus,start,end\na,n0,0 1,0,100\nb,n0,1 2,10,60\n", GOOD_JOBS,
                     "GPU 1 of n0 held by job a (0.0–100.0) and job b (10.0–60.0) at once", id="gpu-twice"),
        pytest.param("job_id,node,gpus,start,end\na,n0,0 1,0,100\nb,n0,3 4,10,60\n", GOOD_JOBS,
                     "job b held GPU 4 of n0, which has only 4 GPUs", id="over-capacity"),
        pytest.param("job_id,node,gpus,start,end\na,n0,0 1,0,100\nb,n9,0 1,10,60\n", GOOD_JOBS,
                     "job b ran on node n9, which the cluster does not have", id="unknown-node"),
        pytest.param("job_id,node,gpus,start,end\na,n0,0 1,0,100\nb,n0,2 3,10,70\n",
                     GOOD_JOBS.replace("b,u,l,2,5,10,60,5,55", "b,u,l,2,5,10,70,5,65"),
                     "job b held GPUs for 60.000 s, expected its run time plus lost work = 50.000 s", id="too-long"),
        pytest.param("job_id,node,gpus,start,end\na,n0,0 1,0,100\nb,n0,2 3,2,52\n",
                     GOOD_JOBS.replace("b,u,l,2,5,10,60,5,55", "b,u,l,2,5,2,52,0,47"),
                     "job b started at 2.0, before it was submitted at 5.0", id="early"),
        pytest.param("job_id,node,gpus,start,end\na,n0,0 1,0,100\nb,n0,2 3,10,60\nb,n1,0,10,60\n", GOOD_JOBS,
                     "job b's run from 10.0 holds different GPU counts or ends on its nodes", id="ragged-gang"),
    ],
)
def test_violations_are_named(tmp_path: Path, allocs: str, jobs: str, expected: str) -> None:
    assert expected in check_run(run_dir(tmp_path, allocs, jobs))


def test_missing_files_are_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="output directory of `nanum sim`"):
        check_run(tmp_path)
