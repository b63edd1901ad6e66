"""`JobTally`'s bookkeeping: moving a job between states and waits keeps every count exact, whatever its id."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from nanum.server.jobtally import JobTally

BOUNDS = (10.0, 60.0, 300.0)


@settings(deadline=None)
@given(st.lists(st.tuples(st.sampled_from([1, 2, 3, 2**40, 2**62]),
                          st.sampled_from(["pending", "running", "completed"]),
                          st.sampled_from([1, 2]), st.one_of(st.none(), st.floats(0.0, 1000.0))), max_size=40))
def test_the_tally_is_what_the_jobs_last_written_say(writes: list[tuple[int, str, int, float | None]]) -> None:
    tally = JobTally(BOUNDS)
    last: dict[int, tuple[str, int, float | None]] = {}
    for job_id, state, lab, wait in writes:
        tally._count(job_id, state, lab, wait)
        last[job_id] = (state, lab, wait)
    states, pending, waits = tally.snapshot()
    expected_states: dict[str, int] = {}
    for state, _, _ in last.values():
        expected_states[state] = expected_states.get(state, 0) + 1
    assert states == expected_states
    waiting = [lab for state, lab, _ in last.values() if state == "pending"]
    assert pending == {lab: waiting.count(lab) for lab in set(waiting)}
    for lab in (1, 2):
        started = [round(w * 1_000_000) for _, b, w in last.values() if b == lab and w is not None]
        if not started:
            assert lab not in waits
            continue
        assert waits[lab].count == len(started) and waits[lab].micros == sum(started)
        assert waits[lab].cumulative() == [sum(1 for w in started if w <= bound * 1_000_000) for bound in BOUNDS]
    assert len(tally._state) < 1 << 21  # ids far beyond the jobs counted do not grow the arrays
