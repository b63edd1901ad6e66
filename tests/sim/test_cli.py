"""`nanum trace import` and `nanum sim` as a user runs them: files written, one table, one-line errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

GOLDEN = Path(__file__).parent / "golden"


def nanum(*args: str) -> Result:
    import importlib

    from nanum.cli import COMMAND_MODULES
    from nanum.cli.app import app

    for name in COMMAND_MODULES:
        importlib.import_module(f"nanum.cli.{name}")
    return CliRunner().invoke(app, list(args), env={"COLUMNS": None})  # tables as piped: never cut to fit


def test_import_then_simulate_then_check(tmp_path: Path) -> None:
    raw = tmp_path / "itp.csv"
    raw.write_text("job_id,submission_time,duration,num_gpu\na,0,100,2\nb,0,50,4\nc,10,20,2\nd,20,200,x\n")
    trace = tmp_path / "trace.csv.gz"
    done = nanum("trace", "import", "--format", "microsoft-itp", str(raw), "-o", str(trace), "--lab", "itp")
    assert done.exit_code == 0, done.output
    assert "4 rows, 3 imported, 1 skipped" in done.output
    assert "skipped 1: num_gpus is not a number ('x') (lines 5)" in done.output
    out = tmp_path / "run"
    done = nanum("sim", "--trace", str(trace), "--cluster", "1x4", "--policy", "fifo+backfill", "--out", str(out))
    assert done.exit_code == 0, done.output
    assert "fifo+backfill" in done.output and "avg JCT" in done.output
    for name in ("jobs.csv", "allocations.csv", "nodes.csv", "summary.json", "jct_cdf.png", "utilisation.png",
                 "queue_length.png"):
        assert (out / name).stat().st_size > 0, name
    summary = json.loads((out / "summary.json").read_text())
    assert summary["finished"] == 3 and summary["cluster"] == "1x4" and summary["predictor"]["name"] == "history"
    done = nanum("sim", "check", str(out))
    assert done.exit_code == 0 and "sound" in done.output


def test_compare_prints_one_table_and_json(tmp_path: Path) -> None:
    out = tmp_path / "cmp"
    args = ("sim", "-t", str(GOLDEN / "backfill.csv"), "-c", "1x4", "--out", str(out), "--no-plots",
            "--predictor", "none")
    done = nanum(*args, "--compare", "fifo+nobackfill,fifo+backfill,shortest")
    assert done.exit_code == 0, done.output
    assert done.output.count("avg JCT") == 1
    assert {p.name for p in out.iterdir()} == {"fifo+nobackfill", "fifo+backfill", "shortest"}
    done = nanum(*args, "--compare", "fifo+nobackfill,shortest", "--json")
    rows = json.loads(done.output)
    assert [(r["policy_text"], r["jct"]["avg"]) for r in rows] == [("fifo+nobackfill", 185.0), ("shortest", 127.5)]


@pytest.mark.parametrize(
    "args, message",
    [
        pytest.param(("sim", "--cluster", "1x4"), "missing --trace, --out", id="missing"),
        pytest.param(("sim", "-t", "nope.csv", "-c", "1x4", "-p", "fifo", "-o", "x"), "nope.csv does not exist",
                     id="no-trace"),
        pytest.param(("sim", "-t", str(GOLDEN / "backfill.csv"), "-c", "4", "-p", "fifo", "-o", "x"),
                     "neither NxG", id="bad-cluster"),
        pytest.param(("sim", "-t", str(GOLDEN / "backfill.csv"), "-c", "1x4", "-p", "lifo", "-o", "x"),
                     "unknown queue order 'lifo'", id="bad-policy"),
        pytest.param(("trace", "import", "-f", "yarn", str(GOLDEN / "backfill.csv"), "-o", "x.csv"),
                     "unknown trace format 'yarn'", id="bad-format"),
    ],
)
def test_errors_are_one_line(args: tuple[str, ...], message: str) -> None:
    done = nanum(*args)
    assert done.exit_code == 2  # a bad input, as for every other command
    assert done.output.startswith("nanum: error: ") and message in done.output
    assert "Traceback" not in done.output and len(done.output.strip().splitlines()) == 1


def test_check_reports_a_broken_run(tmp_path: Path) -> None:
    out = tmp_path / "run"
    nanum("sim", "-t", str(GOLDEN / "backfill.csv"), "-c", "1x4", "-p", "fifo", "-o", str(out), "--no-plots")
    allocs = (out / "allocations.csv").read_text().splitlines()
    allocs[1] = allocs[1].replace(",0,100", ",0,90")  # job A now ran 10 s short
    (out / "allocations.csv").write_text("\n".join(allocs) + "\n")
    done = nanum("sim", "check", str(out))
    assert done.exit_code == 1
    assert "nanum: error: " in done.output
    assert "job A held GPUs for 90.000 s" in done.output


def test_without_policy_runs_the_default(tmp_path: Path) -> None:
    """The README says `nanum sim` replays with nanum's default policy when none is named."""
    from nanum.cli.sim import DEFAULT_POLICY
    from nanum.core.policy import DEFAULT_POLICY as CORE_DEFAULT

    assert DEFAULT_POLICY == CORE_DEFAULT
    out = tmp_path / "run"
    done = nanum("sim", "-t", str(GOLDEN / "backfill.csv"), "-c", "1x4", "-o", str(out), "--no-plots", "--json")
    assert done.exit_code == 0, done.output
    assert json.loads(done.output)["policy_text"] == CORE_DEFAULT
