"""Cluster specs: NxG[:MODEL], TOML node groups and labs, and the errors a user sees for bad ones."""

from __future__ import annotations

from pathlib import Path

import pytest

from nanum.sim import ClusterError, parse_cluster
from nanum.sim.cluster import cluster_from_dict, to_toml

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def test_short_spec() -> None:
    spec = parse_cluster("16x8:A100")
    nodes = spec.build_nodes()
    assert len(nodes) == 16 and nodes[0].name == "node0-000" and nodes[0].gpu_model == "A100"
    assert spec.total_gpus == 128 and spec.lend


def test_toml_groups_owners_and_default_guarantees(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text('name = "x"\nlend = true\n[[nodes]]\nlab = "a"\ncount = 2\ngpus = 4\nislands = 2\n'
                    '[[nodes]]\ncount = 1\ngpus = 8\nmodel = "H100"\n[labs.b]\nmax_gpus = 6\nweight = 2\n')
    spec = parse_cluster(str(path))
    nodes = spec.build_nodes()
    assert [(n.name, n.owner, len(n.gpus)) for n in nodes] == [("a-000", "a", 4), ("a-001", "a", 4),
                                                                ("node1-000", None, 8)]
    assert [g.island for g in nodes[0].gpus] == [0, 0, 1, 1]
    labs = spec.labs_for(["c"])
    assert (labs["a"].guaranteed_gpus, labs["b"].guaranteed_gpus, labs["c"].guaranteed_gpus) == (8, 0, 0)
    assert labs["b"].limits.max_gpus == 6 and labs["b"].weight == 2.0
    partitioned = cluster_from_dict({"lend": False, "nodes": [{"count": 1, "gpus": 4, "lab": "a"}]})
    assert partitioned.labs_for(["a"])["a"].guaranteed_gpus is None


@pytest.mark.parametrize(
    "text, message",
    [
        pytest.param("8by4", "neither NxG", id="junk"),
        pytest.param("0x4", "at least one node", id="zero"),
        pytest.param("99999999x8", "99,999,999 nodes; a simulated cluster has at most 20,000", id="huge"),
        pytest.param("８x4", "neither NxG", id="full-width"),
    ],
)
def test_bad_short_specs(text: str, message: str) -> None:
    with pytest.raises(ClusterError, match=message):
        parse_cluster(text)


@pytest.mark.parametrize(
    "data, message",
    [
        pytest.param({}, "at least one \\[\\[nodes\\]\\]", id="no-nodes"),
        pytest.param({"nodes": [{"count": 1}]}, "needs count and gpus", id="no-gpus"),
        pytest.param({"nodes": [{"count": 1, "gpus": 4, "gpu": 1}]}, "unknown key", id="typo"),
        pytest.param({"nodes": [{"count": -1, "gpus": 4}]}, "count must be", id="negative"),
        pytest.param({"lend": "yes", "nodes": [{"count": 1, "gpus": 4}]}, "lend must be", id="lend"),
        pytest.param({"nodes": [{"count": 1, "gpus": 4}], "labs": {"a": {"weight": 0}}}, "weight", id="weight"),
        pytest.param({"nodes": [{"count": 15_000, "gpus": 8}, {"count": 15_000, "gpus": 8}]}, "30,000 nodes",
                     id="huge"),
    ],
)
def test_bad_cluster_files(data: dict[str, object], message: str) -> None:
    with pytest.raises(ClusterError, match=message):
        cluster_from_dict(data)


def test_to_toml_round_trips(tmp_path: Path) -> None:
    spec = parse_cluster(str(EXAMPLES / "philly-pooled.toml"))
    path = tmp_path / "again.toml"
    path.write_text(to_toml(spec, "copy"))
    again = parse_cluster(str(path))
    assert again.groups == spec.groups and again.lend == spec.lend


@pytest.mark.parametrize("name", sorted(p.name for p in EXAMPLES.glob("*.toml")))
def test_examples_parse(name: str) -> None:
    spec = parse_cluster(str(EXAMPLES / name))
    assert spec.build_nodes()


def test_philly_examples_match_the_helios_setup() -> None:
    for name, lend in (("philly-partitioned.toml", False), ("philly-pooled.toml", True)):
        spec = parse_cluster(str(EXAMPLES / name))
        assert (spec.total_gpus, len(spec.build_nodes()), len(spec.owned_gpus()), spec.lend) == (1408, 352, 11, lend)
