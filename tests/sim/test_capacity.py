"""Capacity verdicts on generated histories whose answers are known: a cluster too small is short and the addition
it suggests meets the target in a replay; an idle one is over-supplied; a right-sized one adequate."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from nanum.sim import TraceJob, parse_cluster, write_trace
from nanum.sim import capacity as cap
from tests.sim.test_cli import nanum

POLICY = "fifo+binpack+backfill"
TARGET = cap.parse_target("p95 wait < 1h")


def steady(jobs: int, every_s: float, run_s: float, gpus: int = 1) -> list[TraceJob]:
    """A job of `gpus` GPUs every `every_s` seconds, each running `run_s`: `gpus * run_s / every_s` GPUs busy."""
    return [TraceJob(str(i), i * every_s, run_s, gpus, lab="lab") for i in range(jobs)]


def verdict_of(trace: list[TraceJob], cluster: str) -> tuple[cap.Verdict, list[cap.Outcome]]:
    spec = parse_cluster(cluster)
    outcomes = cap.search(spec, cap.DEFAULT_SCALES, [], lambda o: cap.replay(trace, o, POLICY, TARGET))
    return cap.verdict(outcomes), outcomes


def test_a_cluster_too_small_is_short_and_the_suggested_addition_meets_the_target() -> None:
    # Every 10 minutes a 2-GPU job of an hour: exactly 6 run at once, 12 GPUs. On 8 the queue grows without end;
    # on 12 nobody waits: the answer is 4 GPUs, one node of 4.
    trace = steady(200, 600.0, 3600.0, gpus=2)
    found, outcomes = verdict_of(trace, "2x4")
    assert found.text == "short: add about 4 GPUs (≈ 1 node of 4)"
    grown = cap.Option("grown", parse_cluster(f"{2 + found.gpus // 4}x4"))
    assert cap.replay(trace, grown, POLICY, TARGET).meets
    assert not next(o for o in outcomes if o.option.label == "x1").meets


def test_the_search_for_a_larger_cluster_stops_at_the_largest_the_simulator_takes() -> None:
    """A large cluster that no option helps is doubled only while the result is one the simulator can replay."""
    tried: list[int] = []

    def never_enough(option: cap.Option) -> cap.Outcome:
        tried.append(sum(g.count for g in option.spec.groups))
        return cap.Outcome(option, option.spec.total_gpus, 1, 1, 0.0, 0.0, 0.0, 0.0, meets=False)

    outcomes = cap.search(parse_cluster("6000x8"), (1.0, 1.5), [], never_enough)
    assert tried == [6000, 9000, 18000]  # x1, x1.5, x3; x6 would be 36,000 nodes: over the limit, not tried
    assert cap.verdict(outcomes).text.startswith("short: even the largest option tried (x3, 144,000 GPUs)")


def test_an_idle_cluster_is_over_supplied() -> None:
    trace = steady(50, 3600.0, 600.0)  # one GPU busy a sixth of the time on 64 GPUs
    found, outcomes = verdict_of(trace, "16x4")
    assert found.kind == "over-supplied"
    assert found.gpus >= 28  # half the cluster (x0.5) serves this as well as all of it
    assert found.text == f"over-supplied: about {found.gpus} GPUs idle most of the time"
    assert all(o.utilisation < 0.02 for o in outcomes)


def test_a_right_sized_cluster_is_adequate() -> None:
    trace = steady(200, 900.0, 3600.0)  # 4 GPUs busy on average on 1 node of 8: one node fewer is none
    found, _ = verdict_of(trace, "1x8")
    assert found.kind == "adequate" and found.text == "adequate"


def test_report_capacity_prints_each_option_and_one_verdict(tmp_path: Path) -> None:
    trace = tmp_path / "history.csv.gz"
    write_trace(steady(200, 600.0, 3600.0, gpus=2), trace)
    done = nanum("report", "capacity", "--trace", str(trace), "--cluster", "2x4", "--policy", POLICY,
                 "--add", "4xA100", "--add", "8xH100", "-q")
    assert done.exit_code == 0, done.output
    lines = done.output.splitlines()
    assert lines[1].split() == ["OPTION", "GPUS", "AVG", "WAIT", "P95", "WAIT", "UTILISATION", "IDLE", "GPU-H", "P95",
                                "WAIT", "<", "1H"]
    assert any(line.startswith("+4xA100+8xH100 ") for line in lines)
    assert lines[-1].startswith("verdict: short: add about ")
    as_json = json.loads(nanum("report", "capacity", "--trace", str(trace), "--cluster", "2x4", "--policy", POLICY,
                               "--json", "-q").output)
    assert as_json["verdict"] == "short" and as_json["options"][0]["option"] == "x0.5"


@pytest.mark.parametrize(("args", "message"), [
    (["--target", "fast please"], "target 'fast please' is not like 'p95 wait < 1h'"),
    (["--add", "H100"], "--add 'H100' is not like 8xH100"),
    (["--scale", "1,-2"], "--scale '1,-2' needs positive factors"),
    (["--scale", "1_0"], "--scale '1_0' is not a list of numbers"),  # Python's float reads it as 10
    (["--scale", "1e9"], "cluster 1x4 x1e+09 has 1,000,000,000 nodes; a simulated cluster has at most 20,000"),
    (["--add", "99999999x8xH100"], "has 100,000,000 nodes; a simulated cluster has at most 20,000"),
    (["--add", "1x99999xH100"], "has nodes of 99,999 GPUs; a simulated node has at most 1,024"),
])
def test_report_capacity_refuses_bad_input_in_one_line(tmp_path: Path, args: list[str], message: str) -> None:
    trace = tmp_path / "t.csv"
    write_trace(steady(3, 60.0, 60.0), trace)
    done = nanum("report", "capacity", "--trace", str(trace), "--cluster", "1x4", *args)
    assert done.exit_code == 2
    assert message in done.output and len(done.output.strip().splitlines()) == 1
