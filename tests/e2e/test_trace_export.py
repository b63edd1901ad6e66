"""`nanum trace export` on the history a real `nanum up` produced, replayed by `nanum sim` under the server's
policy: the same jobs start in the same order."""

from __future__ import annotations

import csv
import json
import time
from pathlib import Path

from tests.e2e.cluster import Cluster


def _live_starts(cluster: Cluster, ids: list[int]) -> list[str]:
    jobs = [cluster.wait_state(i, "completed", timeout=60) for i in ids]
    return [str(j["id"]) for j in sorted(jobs, key=lambda j: (j["start_time"], j["id"]))]


def test_export_then_sim_starts_jobs_in_the_recorded_order(cluster: Cluster, workdir: Path, tmp_path: Path) -> None:
    # A 4-GPU job holds the whole node while jobs of several sizes queue behind it. Ends are a second apart or more
    # and no job fits in a gap left by another, so the order of starts is the policy's, not the clock's jitter.
    ids = [cluster.submit("alice", "--gpus", "4", "--", "sleep", "3", cwd=workdir)]
    time.sleep(1.0)
    for user, gpus, secs in (("bob", 2, 1), ("carol", 2, 3), ("dave", 4, 1), ("alice", 3, 1), ("bob", 4, 1)):
        ids.append(cluster.submit(user, "--gpus", str(gpus), "--", "sleep", str(secs), cwd=workdir))
    live = _live_starts(cluster, ids)

    out = tmp_path / "history.csv.gz"
    exported = cluster.nanum("trace", "export", "-o", str(out))
    assert exported.returncode == 0, exported.stderr
    cluster_file = tmp_path / "history.toml"
    assert "[[nodes]]" in cluster_file.read_text()
    policy = exported.stdout.split("--policy ")[1].split()[0]

    run = tmp_path / "run"
    replay = cluster.nanum("sim", "--trace", str(out), "--cluster", str(cluster_file), "--policy", policy,
                           "--out", str(run), "--no-plots", "--quiet", "--json")
    assert replay.returncode == 0, replay.stderr
    assert json.loads(replay.stdout)["finished"] >= len(ids)
    with (run / "jobs.csv").open() as f:
        rows = [r for r in csv.DictReader(f) if r["job_id"] in {str(i) for i in ids}]
    simulated = [r["job_id"] for r in sorted(rows, key=lambda r: (float(r["start_time"]), int(r["job_id"])))]
    assert simulated == live


def test_reports_read_the_servers_history(cluster: Cluster, workdir: Path) -> None:
    ids = [cluster.submit("alice", "--gpus", "4", "--", "sleep", "2", cwd=workdir),
           cluster.submit("bob", "--gpus", "4", "--", "sleep", "1", cwd=workdir)]
    for i in ids:
        cluster.wait_state(i, "completed", timeout=60)
    capacity = cluster.nanum("report", "capacity", "--since", "1d", "--scale", "1,2", "-q", "--json")
    assert capacity.returncode == 0, capacity.stderr
    found = json.loads(capacity.stdout)
    assert found["gpus"] == 4 and found["jobs"] >= 2 and found["verdict"] in ("adequate", "over-supplied")
    predictions = cluster.nanum("report", "predictions", "--json")
    assert predictions.returncode == 0, predictions.stderr
    limit = json.loads(predictions.stdout)["estimators"][1]
    assert limit["estimator"] == "time limit"
    forecast = cluster.nanum("report", "forecast", "--weeks", "2", "--json")
    assert forecast.returncode == 0, forecast.stderr
    assert len(json.loads(forecast.stdout)["forecasts"][0]["weekly_gpu_hours"]) == 2
