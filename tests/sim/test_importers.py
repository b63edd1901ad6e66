"""Importers: each raw format becomes the normalised trace; bad rows are reported with line numbers and reasons."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from nanum.sim import Filter, ImportOptions, TraceError, import_trace, read_trace, write_trace
from nanum.sim.importers import parse_time
from tests.sim.traces import shared_traces

SHARED = shared_traces()
needs_shared = pytest.mark.skipif(not SHARED.exists(), reason=f"shared traces not found at {SHARED} (set NANUM_TRACES)")


def write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def test_philly_rows_become_jobs_and_bad_rows_are_reported(tmp_path: Path) -> None:
    raw = write(tmp_path / "philly.csv", (
        "timestamp,duration,num_gpus,gpu_time,cluster\n"
        "2017-10-01 00:00:10,60.0,1,60.0,vc1\n"
        "2017-10-01 00:00:05,120.0,8,960.0,vc2\n"
        "not a date,5,1,5,vc1\n"
        "2017-10-01 00:01:00,-3,1,-3,vc1\n"
        "2017-10-01 00:02:00,30,0,0,vc1\n"
    ))
    jobs, report = import_trace("philly-pollux", raw, ImportOptions())
    assert [(j.job_id, j.lab, j.num_gpus, j.duration) for j in jobs] == [("2", "vc2", 8, 120.0), ("1", "vc1", 1, 60.0)]
    assert jobs[0].submit_time == parse_time("2017-10-01T00:00:05")
    assert [(p.line, p.why) for p in report.problems] == [
        (4, "'not a date' is neither seconds nor a date like 2017-10-01T00:00:00"),
        (5, "duration is not positive ('-3')"),
        (6, "requests no GPU (CPU-only job)"),
    ]
    assert report.rows == 5 and report.kept == 2
    assert report.summary_lines()[0].endswith("5 rows, 2 imported, 3 skipped")


def test_filters_are_counted_not_silent(tmp_path: Path) -> None:
    raw = write(tmp_path / "itp.csv", "job_id,submission_time,duration,num_gpu\na,0,10,1\nb,100,10,2\nc,200,10,4\n")
    jobs, report = import_trace("microsoft-itp", raw, ImportOptions(lab="itp"), Filter(since=50, until=150))
    assert [(j.job_id, j.lab) for j in jobs] == [("b", "itp")]
    assert report.notes == {"submitted before --since (filtered)": 1, "submitted after --until (filtered)": 1}


def test_tiresias_and_chronus_users_become_labs(tmp_path: Path) -> None:
    raw = write(tmp_path / "t.csv", "job_id,user,num_gpu,submit_time,duration\n1,vc_a,2,0,60\n2,vc_b,0,5,60\n")
    jobs, report = import_trace("tiresias", raw, ImportOptions())
    assert [(j.job_id, j.user, j.lab) for j in jobs] == [("1", "vc_a", "vc_a")]
    assert report.problems[0].line == 3


def test_alibaba_pods_with_node_list(tmp_path: Path) -> None:
    nodes = write(tmp_path / "nodes.csv", "sn,cpu_milli,memory_mib,gpu,model\nn1,64000,262144,2,T4\n"
                                          "n2,96000,786432,8,V100M32\nn3,32000,1000,0,\n")
    pods = write(tmp_path / "pods.csv", (
        "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,"
        "scheduled_time\n"
        "p1,1000,100,1,500,,LS,Succeeded,10,110,20\n"
        "p2,1000,100,8,1000,V100M32,BE,Running,0,500,5\n"
        "p3,1000,100,1,1000,,BE,Pending,30,40,\n"
        "p4,1000,100,0,0,,BE,Succeeded,0,10,0\n"
        "p5,1000,100,4,1000,A100,BE,Succeeded,0,10,0\n"
        "p6,1000,100,1,1000,T4|V100M32,BE,Failed,0,10,0\n"
    ))
    jobs, report = import_trace("alibaba-openb", pods, ImportOptions(nodes=nodes))
    got = {j.job_id: (j.submit_time, j.duration, j.num_gpus, j.gpu_type, j.status) for j in jobs}
    assert got == {"p1": (10, 90, 1, "", "completed"), "p2": (0, 495, 8, "V100M32", "running"),
                   "p6": (0, 10, 1, "", "failed")}
    assert dict(report.reasons()) == {
        "never scheduled in the trace (no scheduled_time): no run time": 1,
        "requests no GPU (CPU-only job)": 1,
        "asks for GPU model A100, which no node of the node list has": 1,
    }
    assert set(report.notes) == {"pods asking for a fraction of a GPU, given one whole GPU",
                                 "pods still running at the end of the trace (run time cut there)",
                                 "pods allowing several GPU models, imported as any model"}


def test_gavel_needs_throughputs_and_converts_steps(tmp_path: Path) -> None:
    traces = tmp_path / "seed0"
    traces.mkdir()
    with gzip.open(traces / "vc1.trace.gz", "wt") as f:
        f.write("ResNet-18 (batch size 64)\tcmd\t-n\t1\t1000\t5.000000\t1\n")
        f.write("LM (batch size 80)\tcmd\t-n\t1\t1000\t6.000000\t4\n")
        f.write("broken line\n")
    with pytest.raises(TraceError, match="--throughputs"):
        import_trace("gavel", traces, ImportOptions())
    rates = write(tmp_path / "rates.json", json.dumps({"v100": {"ResNet-18 (batch size 64)": {"null": 10.0},
                                                                "('LM (batch size 80)', 4)": {"null": 3.0}}}))
    jobs, report = import_trace("gavel", traces, ImportOptions(throughputs=rates))
    assert [(j.lab, j.submit_time, j.duration, j.num_gpus) for j in jobs] == [("vc1", 5, 100, 1), ("vc1", 6, 334, 4)]
    assert [(p.line, p.why) for p in report.problems] == [(3, "vc1.trace.gz: expected 7 tab-separated fields, found 1")]


def test_wrong_format_is_one_clear_error(tmp_path: Path) -> None:
    raw = write(tmp_path / "x.csv", "a,b\n1,2\n")
    with pytest.raises(TraceError, match="lacks column"):
        import_trace("philly-pollux", raw, ImportOptions())
    with pytest.raises(TraceError, match="unknown trace format"):
        import_trace("yarn", raw, ImportOptions())


def test_normalised_trace_round_trips(tmp_path: Path) -> None:
    raw = write(tmp_path / "t.csv", "job_id,submit_time,duration,num_gpus,lab,time_limit\n1,0,5,1,a,10\n2,3,7.5,2,,\n")
    jobs, _ = import_trace("nanum", raw, ImportOptions())
    write_trace(jobs, tmp_path / "out.csv.gz")
    again, report = read_trace(tmp_path / "out.csv.gz")
    assert again == jobs and not report.problems
    assert again[0].time_limit == 10 and again[1].time_limit is None


def test_reading_reports_bad_and_duplicate_rows(tmp_path: Path) -> None:
    raw = write(tmp_path / "t.csv", "job_id,submit_time,duration,num_gpus\n1,0,5,1\n1,1,5,1\n2,x,5,1\n3,0,5,1.5\n"
                "4,0,nan,1\n5,0,5,1_0\n")
    jobs, report = read_trace(raw)
    assert [j.job_id for j in jobs] == ["1"]
    assert [(p.line, p.why) for p in report.problems] == [
        (3, "duplicate job_id"), (4, "submit_time is not a number ('x')"),
        (5, "num_gpus is not a whole number ('1.5')"), (6, "duration is not finite ('nan')"),
        (7, "num_gpus is not a number ('1_0')")]  # Python's float reads it as 10


@needs_shared
@pytest.mark.parametrize(
    "fmt, raw, rows",
    [
        pytest.param("microsoft-itp", "microsoft-itp-elasticflow/raw/cluster10.csv.gz", 260, id="itp-raw"),
        pytest.param("microsoft-itp", "microsoft-itp-elasticflow/elasticflow/195job.csv.gz", 195, id="elasticflow"),
        pytest.param("tiresias", "tiresias-samples/60_job.csv", 60, id="tiresias"),
        pytest.param("tiresias", "chronus-philly/trace_job_Philly_SLO.csv.gz", 30940, id="chronus"),
    ],
)
def test_shared_traces_import(fmt: str, raw: str, rows: int) -> None:
    jobs, report = import_trace(fmt, SHARED / raw, ImportOptions())
    assert report.rows == rows
    assert len(jobs) + len(report.problems) == rows  # every row is either imported or reported


@needs_shared
def test_shared_alibaba_default_pod_list() -> None:
    base = SHARED / "alibaba-gpu-v2023-openb"
    jobs, report = import_trace("alibaba-openb", base / "openb_pod_list_default.csv.gz",
                                ImportOptions(nodes=base / "openb_node_list_gpu_node.csv.gz"))
    assert report.rows == 8152 and len(jobs) + len(report.problems) == 8152
    assert report.reasons()["requests no GPU (CPU-only job)"] == 1088


def test_nanum_traces_points_the_trace_tests_elsewhere(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NANUM_TRACES", str(tmp_path))
    assert shared_traces() == tmp_path
    monkeypatch.delenv("NANUM_TRACES")
    assert shared_traces().parts[-2:] == ("shared", "traces")
