"""`nanum ps` as squeue prints it: folded arrays, chosen fields, short state codes."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from nanum.cli.common import UsageProblem
from nanum.cli.psformat import default_rows, fields_from_format, fields_from_list, fold, headers, rows

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


def job(id: int, state: str = "pending", **extra: Any) -> dict[str, Any]:
    base = {"id": id, "name": "train", "user": "alice", "lab": "vision", "state": state, "gpus": 1, "nodes": 1,
            "allocation": [], "submit_time": "2026-12-01T11:59:00Z", "start_time": None, "end_time": None,
            "reason": "waiting", "exit_code": None, "array_id": None, "array_task": None, "priority": 0,
            "time_limit_s": 600}
    return {**base, **extra}


def array(n: int, running: int, limit: int | None = None) -> list[dict[str, Any]]:
    return [job(10 + i, "running" if i < running else "pending", array_id=10, array_task=i, array_limit=limit)
            for i in range(n)]


def test_an_array_folds_into_one_line_counting_its_tasks_by_state() -> None:
    shown = fold([job(1), *array(20, 4, limit=4), job(40, "running")])
    assert [rows([j], ["id"], NOW)[0][0] for j in shown] == ["1", "10_[0-19%4]", "40"]
    assert rows(shown[1:2], ["state", "st"], NOW) == [("4 running, 16 pending", "R:4 PD:16")]
    assert default_rows(shown, NOW)[1][4] == "4 running, 16 pending"


def test_format_codes_and_field_names_choose_columns() -> None:
    assert fields_from_format("%i %u %T %r") == ["id", "user", "state", "reason"]
    assert fields_from_format("%.10i %t") == ["id", "st"]
    assert fields_from_list("id,user,state,reason") == ["id", "user", "state", "reason"]
    assert headers(["id", "st"]) == ("ID", "ST")
    assert rows([job(3, "held"), job(4, "completed")], ["id", "st"], NOW) == [("3", "H"), ("4", "CD")]
    expanded = array(3, 1)
    assert [r[0] for r in rows(expanded, ["id"], NOW)] == ["10_0", "10_1", "10_2"]


def test_a_jobs_tier_is_a_field_with_squeues_qos_code() -> None:
    assert fields_from_format("%i %Q %q") == fields_from_list("id,priority,tier") == ["id", "priority", "tier"]
    assert headers(["priority", "tier"]) == ("PRIORITY", "TIER")
    assert rows([job(3, priority=5, tier=2), job(4)], ["id", "tier"], NOW) == [("3", "2"), ("4", "")]


@pytest.mark.parametrize("text", ["%z", "no codes"])
def test_an_unknown_format_code_lists_the_known_ones(text: str) -> None:
    with pytest.raises(UsageProblem, match="use these codes: %i"):
        fields_from_format(text)


def test_an_unknown_field_name_lists_the_known_ones() -> None:
    with pytest.raises(UsageProblem, match="unknown field 'colour'; choose from id,array"):
        fields_from_list("id,colour")
