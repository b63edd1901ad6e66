"""The running jobs' GPU-seconds not yet charged, as a tick adds them to each lab's and user's usage
(`nanum.server.snapshot._uncharged`): every run counts for its lab and its user, from its last charge (or its
start), and only this month's part counts toward the monthly budgets."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nanum.core import Job, Running
from nanum.server.services.lifecycle import month_start
from nanum.server.snapshot import UnchargedSums, _uncharged
from tests.core.builders import job, running

NOW = 1_780_000_000.0  # some day in June 2026
FIRST = month_start(NOW)

RUNS = st.lists(st.tuples(st.sampled_from(["vision", "nlp", "audio"]), st.sampled_from(["ana", "bo", "cy"]),
                          st.integers(0, 8), st.integers(1, 3),
                          st.floats(FIRST - 86_400 * 3, NOW + 60),  # started before this month, or even "later"
                          st.none() | st.floats(FIRST - 86_400, NOW)), max_size=30)


@settings(max_examples=200, deadline=None)
@given(runs=RUNS)
def test_each_running_job_counts_for_its_lab_and_its_user_from_its_last_charge(
        runs: list[tuple[str, str, int, int, float, float | None]]) -> None:
    jobs = tuple(running(job(i, gpus=g, lab=lab, user=user, nodes=nodes), {"n0": ()}, start=start)
                 for i, (lab, user, g, nodes, start, _) in enumerate(runs))
    rows = {i: SimpleNamespace(id=i, start_time=start, charged_until=charged)
            for i, (_, _, _, _, start, charged) in enumerate(runs)}
    total, month = _uncharged(jobs, rows, NOW)
    for kind in ("lab", "user"):
        for name in {r[0] if kind == "lab" else r[1] for r in runs}:
            mine = [(g * nodes, charged or start) for lab, user, g, nodes, start, charged in runs
                    if (lab if kind == "lab" else user) == name]
            assert total[(kind, name)] == pytest.approx(sum(n * max(NOW - since, 0.0) for n, since in mine))
            assert month[(kind, name)] == pytest.approx(
                sum(n * max(NOW - max(since, FIRST), 0.0) for n, since in mine))
    assert {name for _, name in total} <= {r[0] for r in runs} | {r[1] for r in runs}


def test_a_run_without_its_row_is_an_error_not_a_wrong_sum() -> None:
    one = (running(job(1), {"n0": (0,)}, start=NOW - 60),)
    with pytest.raises(KeyError):
        _uncharged(one, {2: SimpleNamespace(id=2, start_time=NOW - 60, charged_until=None)}, NOW)


STEPS = st.lists(st.tuples(st.floats(0, 86_400 * 20),  # how far `now` moves: across a month's end at times
                           st.dictionaries(st.integers(0, 12), st.none() | st.tuples(
                               st.sampled_from(["vision", "nlp"]), st.sampled_from(["ana", "bo"]),
                               st.integers(0, 8), st.integers(1, 2),
                               st.floats(-86_400 * 40, 600),  # its start, from `now`: before, or even "later"
                               st.none() | st.floats(-86_400 * 30, 0)), max_size=6)), min_size=1, max_size=12)


@settings(max_examples=150, deadline=None)
@given(steps=STEPS)
def test_the_sums_kept_from_tick_to_tick_are_what_summing_every_run_gives(
        steps: list[tuple[float, dict[int, tuple[str, str, int, int, float, float | None] | None]]]) -> None:
    """Each step moves `now` on and starts, changes (a new charge) or ends some runs: the rows written since the
    last tick. What `UnchargedSums` keeps equals `_uncharged` over every run, lab by lab and user by user."""
    sums, now = UnchargedSums(), NOW
    jobs: dict[int, tuple[object, tuple[object, ...], Job]] = {}
    rows: dict[int, SimpleNamespace] = {}
    runs: dict[int, Running] = {}
    for i, (step, changes) in enumerate(steps):
        now += step
        for job_id, change in changes.items():
            if change is None:
                rows.pop(job_id, None), runs.pop(job_id, None), jobs.pop(job_id, None)
                continue
            lab, user, g, nodes, start, charged = change
            core = job(job_id, gpus=g, lab=lab, user=user, nodes=nodes)
            runs[job_id] = running(core, {"n0": ()}, start=now + start)
            rows[job_id] = SimpleNamespace(id=job_id, start_time=now + start,
                                           charged_until=None if charged is None else now + charged)
            jobs[job_id] = (rows[job_id], (), core)
        kept = sums.update(rows, jobs, None if i == 0 else list(changes), now)
        fresh = _uncharged(tuple(runs.values()), rows, now)
        for got, want in zip(kept, fresh, strict=True):
            for key in got.keys() | want.keys():
                assert got.get(key, 0.0) == pytest.approx(want.get(key, 0.0), rel=1e-9, abs=1e-3), key
