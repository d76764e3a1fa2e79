"""Which missing fire times an operator's pause held: the nominal seconds it covers, widened by
the jitter in force (a fire may start up to the jitter after its nominal time)."""

from __future__ import annotations

from array import array
from datetime import UTC, datetime, timedelta

from cronwarden.backfill.plan import _held_spans, _split_held
from cronwarden.store.pause_history import Pause

T0 = datetime(2030, 1, 1, 10, 0, 0, tzinfo=UTC)


def _s(seconds: float) -> int:
    return int((T0 + timedelta(seconds=seconds)).timestamp())


def _pause(start: float, end: float | None) -> Pause:
    resumed = None if end is None else T0 + timedelta(seconds=end)
    return Pause(T0 + timedelta(seconds=start), resumed, "migration")


def _held(pauses: list[Pause], jitter: timedelta | None, seconds: list[int]) -> list[int]:
    held: array[int] = array("q")
    kept = _split_held([_s(s) for s in seconds], _held_spans(pauses, jitter), held)
    assert sorted(kept + list(held)) == [_s(s) for s in seconds]
    return [s - _s(0) for s in held]


def test_a_pause_holds_the_seconds_from_its_start_through_the_second_it_was_lifted() -> None:
    pauses = [_pause(5.3, 11.7)]
    assert _held(pauses, None, [4, 5, 6, 10, 11, 12]) == [6, 10, 11]


def test_jitter_widens_a_pause_back_by_the_jitter() -> None:
    # A fire at 4 with up to 3 s of jitter may have been due to start inside the pause.
    assert _held([_pause(5.3, 11.7)], timedelta(seconds=3), [2, 3, 4, 12]) == [3, 4]


def test_a_pause_still_standing_holds_everything_after_its_start() -> None:
    assert _held([_pause(5.0, None)], None, [4, 5, 6, 10_000_000]) == [5, 6, 10_000_000]


def test_several_pauses_each_hold_their_own_seconds() -> None:
    pauses = [_pause(2, 4), _pause(10, 12)]
    assert _held(pauses, None, [1, 2, 4, 5, 9, 10, 12, 13]) == [2, 4, 10, 12]
