"""The Helios Philly setup against the peer: nanum's FIFO and oracle SJF reproduce the Helios simulator.

The setup (issue 3): Philly jobs submitted 2017-10-01 00:00 to 2017-11-30 23:59 in the 11 VCs the Helios
artifact simulates (68,503 jobs), each VC a lab on its own nodes, 4 GPUs per node (1,408 GPUs). The Helios
simulator gives FIFO avg JCT 16,563 s, avg queueing 5,083 s; oracle SJF 13,026 s / 1,546 s.
"""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from nanum.core import Policy
from nanum.sim import Filter, ImportOptions, SimOptions, import_trace, parse_cluster, simulate
from nanum.sim.importers import parse_time
from nanum.sim.metrics import summarize
from tests.sim.traces import shared_traces

ROOT = Path(__file__).resolve().parents[2]
SHARED = shared_traces()
pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not SHARED.exists(), reason=f"shared traces not found at {SHARED} (set NANUM_TRACES)")]


@pytest.fixture(scope="module")
def helios_window() -> list:
    with (SHARED / "summaries" / "helios_qssf_philly_vc_nodes.csv").open() as f:
        vcs = frozenset(row["vc"] for row in csv.DictReader(f))
    keep = Filter(since=parse_time("2017-10-01T00:00:00"), until=parse_time("2017-11-30T23:59:00"), labs=vcs)
    jobs, report = import_trace("philly-pollux", SHARED / "philly-pollux" / "philly.csv.gz", ImportOptions(), keep)
    assert len(jobs) == 68_503 and not report.problems
    return jobs


@pytest.mark.parametrize(
    "policy, predictor, peer_jct, peer_queue",
    [
        pytest.param("fifo+nobackfill", "history", 16_563, 5_083, id="fifo"),
        pytest.param("shortest+nobackfill", "oracle", 13_026, 1_546, id="oracle-sjf"),
    ],
)
def test_reproduces_the_helios_simulator(helios_window: list, policy: str, predictor: str, peer_jct: float,
                                         peer_queue: float) -> None:
    spec = parse_cluster(str(ROOT / "examples" / "philly-partitioned.toml"))
    result = simulate(helios_window, spec, Policy.parse(policy, lend=False), SimOptions(predictor=predictor))
    summary = summarize(result)
    assert summary["finished"] == 68_503
    assert summary["jct"]["avg"] == pytest.approx(peer_jct, rel=0.02)
    assert summary["queue_delay"]["avg"] == pytest.approx(peer_queue, rel=0.02)
