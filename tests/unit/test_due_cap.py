"""The cap on a backfill window: the last nominal fire time that is due by Temporal's clock and
the schedule's own progress, whatever the clock of the host running the command says."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from cronwarden.backfill.window import Window, due_cap

NEXT = datetime(2026, 11, 30, 4, 0, 30, tzinfo=UTC)
LATER = NEXT + timedelta(minutes=10, microseconds=250_000)
WINDOW = Window(datetime(2026, 11, 30, 3, 0, tzinfo=UTC), datetime(2026, 11, 30, 5, 0, tzinfo=UTC))


def test_the_cap_is_the_second_before_the_next_action_time() -> None:
    # Temporal's clock later than the next action time: a scheduler behind has not taken it.
    cap = due_cap(LATER, [NEXT + timedelta(seconds=10), NEXT], None, paused=False)
    assert cap.end == NEXT - timedelta(seconds=1)
    assert cap.next_action_time == NEXT
    assert WINDOW.capped_to(cap) == Window(WINDOW.start, NEXT - timedelta(seconds=1))


def test_the_cap_is_temporals_clock_when_that_comes_first() -> None:
    now = NEXT - timedelta(seconds=1, microseconds=400_000)
    cap = due_cap(now, [NEXT], None, paused=False)
    assert cap.end == now.replace(microsecond=0)


def test_with_jitter_nothing_within_the_jitter_before_the_next_action_is_due() -> None:
    # A jittered action time is its nominal time plus up to the jitter: the nominal time of the
    # next action may lie up to the jitter before it.
    jittered = NEXT + timedelta(milliseconds=571)
    cap = due_cap(LATER, [jittered], timedelta(seconds=10), paused=False)
    assert cap.end == NEXT - timedelta(seconds=10)
    assert cap.as_json() == {
        "end": "2026-11-30T04:00:20Z",
        "temporal_now": "2026-11-30T04:10:30Z",
        "next_action_time": "2026-11-30T04:00:30Z",
        "jitter_seconds": 10,
    }


def test_a_paused_schedule_or_one_with_no_action_left_is_capped_by_temporals_clock_only() -> None:
    # A paused schedule's next action times stay where the pause found them.
    for cap in (due_cap(LATER, [NEXT], None, paused=True), due_cap(LATER, [], None, paused=False)):
        assert cap.end == LATER.replace(microsecond=0)
        assert cap.next_action_time is None


def test_an_end_before_the_cap_is_kept() -> None:
    early = Window(WINDOW.start, NEXT - timedelta(minutes=5))
    assert early.capped_to(due_cap(LATER, [NEXT], None, paused=False)) == early
