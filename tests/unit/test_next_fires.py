"""When the worker's cache of next fire times asks Temporal again (activities/next_fires.py)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from cronwarden.activities.next_fires import refresh_due

T0 = datetime(2026, 1, 1, tzinfo=UTC)
GRACE = timedelta(minutes=15)


def every(step: timedelta, n: int = 10) -> tuple[datetime, ...]:
    return tuple(T0 + step * i for i in range(1, n + 1))


def test_a_frequent_schedule_looks_up_again_only_when_the_last_cached_fire_was_taken() -> None:
    times = every(timedelta(minutes=1))
    assert [refresh_due(times, ahead, accepted=True, grace=GRACE) for ahead in (10, 2, 1, 0)] == [
        False,
        False,
        True,
        True,
    ]


def test_a_schedule_rarer_than_its_grace_keeps_one_cached_fire_in_reserve() -> None:
    # A look-up failing when the last fire was taken would leave the row at this fire's time
    # and page a day early: look up while one valid time remains.
    times = every(timedelta(days=1))
    assert not refresh_due(times, 3, accepted=True, grace=GRACE)
    assert refresh_due(times, 2, accepted=True, grace=GRACE)


def test_times_the_row_refused_are_looked_up_again_at_once() -> None:
    assert refresh_due(every(timedelta(minutes=1)), 10, accepted=False, grace=GRACE)


def test_no_cached_time_means_a_look_up() -> None:
    assert refresh_due((), 0, accepted=True, grace=GRACE)
