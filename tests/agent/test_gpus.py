"""GPU discovery: simulated specs, and a clean fallback where NVML finds no driver (as on this machine)."""

from __future__ import annotations

import logging

import pytest

from nanum.agent import gpus
from nanum.agent.gpus import SpecError, discover, parse_spec, simulated_gpus


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        pytest.param("4", (4, "SIM", 16384), id="count"),
        pytest.param("4xA100", (4, "A100", 81920), id="a100"),
        pytest.param("8xH100", (8, "H100", 81559), id="h100"),
        pytest.param(" 2 X h200 ", (2, "h200", 143771), id="spaces-and-case"),
        pytest.param("2xA100:40G", (2, "A100", 40960), id="memory"),
        pytest.param("3xFOO", (3, "FOO", 24576), id="unknown-model"),
    ],
)
def test_specs_parse(spec: str, expected: tuple[int, str, int]) -> None:
    assert parse_spec(spec) == expected


@pytest.mark.parametrize("spec", ["", "four", "4x", "x4", "-1", "4xA100:lots", "999"])
def test_bad_specs_say_what_is_accepted(spec: str) -> None:
    with pytest.raises(SpecError, match="GPU spec") as err:
        parse_spec(spec)
    assert str(err.value).count("\n") == 0


def test_simulated_gpus_have_distinct_indices_and_stable_uuids() -> None:
    first, again, other = (
        simulated_gpus("8xH100", "n1"),
        simulated_gpus("8xH100", "n1"),
        simulated_gpus("8", "n2"),
    )
    assert [g.index for g in first] == list(range(8))
    assert len({g.uuid for g in first}) == 8 and all(g.uuid.startswith("GPU-") for g in first)
    assert [g.uuid for g in first] == [g.uuid for g in again]
    assert not {g.uuid for g in first} & {g.uuid for g in other}


def test_without_a_driver_nvml_finds_nothing_and_the_node_simulates_four(
    caplog: pytest.LogCaptureFixture,
) -> None:
    if gpus.discover_nvml():
        pytest.skip("this machine has NVIDIA GPUs")
    with caplog.at_level(logging.WARNING, logger="nanum.agent"):
        found, simulated = discover(None, "n1")
    assert simulated and len(found) == 4 and found[0].model == "SIM"
    assert caplog.messages == ["no NVIDIA GPU found; simulating 4 GPUs"]


def test_an_explicit_spec_is_used_as_is() -> None:
    found, simulated = discover("2xA100", "n1")
    assert simulated and [g.model for g in found] == ["A100", "A100"]
