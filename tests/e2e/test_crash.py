"""The crash harness (`benchmarks/crash.py`) in short form: 8 seeds of a small workload while the server and
agents are SIGKILLed and frozen at random moments; no job may be lost, run twice at once, or share a GPU."""

from __future__ import annotations

import importlib.util
import shutil
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(420)]

SEEDS = range(1, 9)


def _harness() -> object:
    path = Path(__file__).resolve().parents[2] / "benchmarks" / "crash.py"
    spec = importlib.util.spec_from_file_location("nanum_crash_harness", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


@pytest.mark.skipif(shutil.which("flock") is None, reason="the harness's jobs lock with util-linux flock")
def test_random_kills_lose_no_job_and_never_run_one_twice_at_once(tmp_path: Path) -> None:
    crash = _harness()
    work = crash.Workload(  # type: ignore[attr-defined]
        jobs=10, agents=2, gpus_per_agent=2, min_s=0.05, max_s=0.3, every_min_s=0.2, every_max_s=0.8, drain_s=60,
        lease_s=1.0, grace_s=0.3,
    )
    results = [crash.run_seed(seed, work, tmp_path / str(seed), log=False) for seed in SEEDS]  # type: ignore[attr-defined]
    violations = [f"seed {r.seed}: {v}" for r in results for v in r.violations]
    assert not violations, "\n".join(violations[:20])
    # A kill every 0.2-0.8 s: a few per seed, so the run surely crashed things (0.3-1.5 s gave 7-9 in all)
    assert sum(r.kills + r.freezes for r in results) >= len(SEEDS)
    assert sum(r.jobs_checked for r in results) == 10 * len(SEEDS)
