"""Which definition judges which part of a window."""

from __future__ import annotations

from datetime import UTC, datetime

from cronwarden.backfill.spec_history import Applied, Segment, segments
from cronwarden.backfill.window import Window
from cronwarden.schedules.mapping import definition_json
from cronwarden.schedules.model import ScheduleDefinition


def at(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


def applied(when: str, digest: str) -> Applied:
    return Applied(at(when), digest, {})


def test_the_window_is_cut_at_each_apply_inside_it_and_the_applied_second_stays_with_the_old() -> (
    None
):
    before, first, second = (
        applied("2029-12-31T23:00:00", "a"),
        applied("2030-01-01T06:00:00.250000", "b"),
        applied("2030-01-01T12:00:00", "c"),
    )
    window = Window(at("2030-01-01T00:00:00"), at("2030-01-01T23:59:59"))
    assert segments([before, first, second], window) == [
        Segment(Window(at("2030-01-01T00:00:00"), at("2030-01-01T06:00:00")), before),
        Segment(Window(at("2030-01-01T06:00:01"), at("2030-01-01T12:00:00")), first),
        Segment(Window(at("2030-01-01T12:00:01"), at("2030-01-01T23:59:59")), second),
    ]


def test_before_any_recorded_apply_the_live_spec_judges_and_applies_after_the_window_do_not() -> (
    None
):
    later = applied("2030-01-01T12:00:00", "b")
    window = Window(at("2030-01-01T00:00:00"), at("2030-01-01T06:00:00"))
    assert segments([later], window) == [Segment(window, None)]
    assert segments([], window) == [Segment(window, None)]
    inside = applied("2030-01-01T03:00:00", "a")
    assert segments([inside, later], window) == [
        Segment(Window(at("2030-01-01T00:00:00"), at("2030-01-01T03:00:00")), None),
        Segment(Window(at("2030-01-01T03:00:01"), at("2030-01-01T06:00:00")), inside),
    ]


def test_a_recorded_definition_rebuilds_even_after_it_stopped_firing() -> None:
    defn = ScheduleDefinition.model_validate(
        {
            "id": "s",
            "job": "report",
            "cron": ["0 9 * * *", "*/30 0 12 * * sat *"],
            "end_at": "2030-01-01T00:00:00Z",
            "exclude": ["2029-12-25"],
            "jitter": "30s",
        },
        context={"now": at("2029-01-01T00:00:00")},
    )
    record = Applied(at("2029-01-01T00:00:00"), "d", definition_json(defn, task_queue="q"))
    assert record.rebuilt() == defn
    assert record.task_queue == "q"
