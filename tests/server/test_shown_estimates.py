"""Which pending jobs' reasons and estimated starts a tick writes back: a changed reason code at once, a reworded
reason now and then, and an estimate once it moved by 5 % of the wait still ahead (at least a second), so a busy
queue whose estimates all shift a little at every tick is not rewritten row by row each time."""

from __future__ import annotations

from nanum.server.scheduler import REASON_REFRESH_S, _changed

NOW = 1_000_000.0


def shown(code: str = "resources", start: float | None = None,
          message: str = "waiting") -> tuple[str, str, float | None]:
    return (message, code, start)


def test_an_estimate_hours_away_is_rewritten_only_when_it_moved_by_a_twentieth_of_the_wait() -> None:
    two_hours = NOW + 7200
    assert not _changed(shown(start=two_hours), shown(start=two_hours + 60), 0.0, NOW)
    assert _changed(shown(start=two_hours), shown(start=two_hours + 400), 0.0, NOW)
    assert _changed(shown(start=two_hours), shown(start=two_hours - 400), 0.0, NOW)


def test_an_estimate_seconds_away_is_rewritten_to_the_second() -> None:
    soon = NOW + 10
    assert _changed(shown(start=soon), shown(start=soon + 1.5), 0.0, NOW)
    assert not _changed(shown(start=soon), shown(start=soon + 0.5), 0.0, NOW)


def test_a_new_reason_code_or_an_estimate_appearing_is_written_at_once() -> None:
    assert _changed(shown("resources"), shown("quota"), 0.0, NOW)
    assert _changed(shown(start=None), shown(start=NOW + 7200), 0.0, NOW)
    assert not _changed(shown(message="a"), shown(message="b"), REASON_REFRESH_S - 1, NOW)
    assert _changed(shown(message="a"), shown(message="b"), REASON_REFRESH_S, NOW)
