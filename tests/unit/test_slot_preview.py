"""The pure parts of `schedules preview`: the window it reads, the schedule it picks, the rule's
slots it compares Temporal's list with, and what it prints. Temporal's own list is given here as
the instants a server would answer (the real server: tests/integration/test_schedule_preview.py).

New York, 2027: 03-14 02:00 EST (07:00Z) jumps to 03:00 EDT; 11-07 02:00 EDT (06:00Z) falls back
to 01:00 EST. The instants below are worked out from those offsets."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from cronwarden.errors import InvalidInput
from cronwarden.schedules.model import ScheduleDefinition
from cronwarden.schedules.slot_preview import (
    MAX_SLOTS,
    RuleMismatch,
    annotate,
    inclusive_window,
    preview_json,
    preview_lines,
    preview_window,
    rule_of,
    select,
)
from cronwarden.schedules.zones import compile_window_around

NOW = datetime(2026, 12, 3, 12, tzinfo=UTC)


def utc(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def defn(schedule_id: str = "ny", **fields: Any) -> ScheduleDefinition:
    base: dict[str, Any] = {"id": schedule_id, "job": "probe", "cron": "30 2 * * *"}
    base.update(fields)
    return ScheduleDefinition.model_validate(base, context={"now": NOW})


NY = {"timezone": "America/New_York"}
SPRING = (utc("2027-03-13T05:00:00Z"), utc("2027-03-15T04:00:00Z"))
"""13 and 14 March 2027 in New York, local midnight to local midnight."""


# --- the window ---------------------------------------------------------------------------------


def test_the_window_takes_a_zone_or_z_and_reads_it_as_utc() -> None:
    start, end = preview_window("2027-03-14T00:00:00-05:00", "2027-03-15T00:00:00Z", now=NOW)
    assert (start, end) == (utc("2027-03-14T05:00:00Z"), utc("2027-03-15T00:00:00Z"))
    assert start.tzinfo is UTC


@pytest.mark.parametrize(
    ("start", "end", "said"),
    [
        ("2027-03-14T00:00:00", "2027-03-15T00:00:00Z", "--from '2027-03-14T00:00:00' has no time"),
        ("2027-03-14T00:00:00Z", "2027-03-15", "--to '2027-03-15' has no time zone"),
        ("2027-03-14T00:00:00Z", "tomorrow", "--to 'tomorrow' is not a time"),
        ("2027-03-14T00:00:00Z", "2027-03-14T00:00:00Z", "is not after --from"),
        ("2027-03-14T01:00:00+01:00", "2027-03-14T00:00:00Z", "is not after --from"),
        ("2100-12-29T00:00:00Z", "2100-12-30T00:00:01Z", "must lie between 2000-01-02T00"),
        ("2000-01-01T23:59:59Z", "2000-01-03T00:00:00Z", "the years 2000 to 2100"),
    ],
)
def test_a_bad_window_is_invalid_input(start: str, end: str, said: str) -> None:
    with pytest.raises(InvalidInput, match=said):
        preview_window(start, end, now=NOW)


def test_the_widest_window_is_compiled_and_listed_inside_temporal_s_years() -> None:
    start, end = preview_window("2000-01-02T00:00:00Z", "2100-12-30T00:00:00Z", now=NOW)
    assert compile_window_around(start, end) == (
        datetime(2000, 1, 1, tzinfo=UTC),
        datetime(2101, 1, 1, tzinfo=UTC),
    )


def test_the_window_in_whole_seconds_includes_from_and_excludes_to() -> None:
    window = inclusive_window(utc("2027-03-14T05:00:00Z"), utc("2027-03-15T04:00:00Z"))
    assert (window.start, window.end) == (utc("2027-03-14T05:00:00Z"), utc("2027-03-15T03:59:59Z"))
    # A fraction: the first whole second at or after --from, the last one before --to.
    half = timedelta(milliseconds=500)
    window = inclusive_window(
        utc("2027-03-14T05:00:00Z") + half, utc("2027-03-15T04:00:00Z") + half
    )
    assert (window.start, window.end) == (utc("2027-03-14T05:00:01Z"), utc("2027-03-15T04:00:00Z"))


# --- the schedule -------------------------------------------------------------------------------


def test_select_takes_all_or_the_one_asked_for_and_names_the_file_s_ids_otherwise() -> None:
    both = [defn("a"), defn("b")]
    assert select(both, None) == both
    assert select(both, "b") == [both[1]]
    with pytest.raises(InvalidInput, match=r"no schedule 'c' \(it lists: a, b\)"):
        select(both, "c")


# --- the rule beside Temporal's list ------------------------------------------------------------


def test_rule_of_gives_the_gap_s_end_with_a_note_and_none_without_a_zone_or_a_cron() -> None:
    slots = rule_of(defn(**NY), *SPRING)
    assert slots is not None
    # 13 March 02:30 EST; 14 March 02:30 does not exist: 03:00 EDT.
    assert [s.utc for s in slots] == [utc("2027-03-13T07:30:00Z"), utc("2027-03-14T07:00:00Z")]
    assert slots[0].note is None and slots[1].note is not None
    assert rule_of(defn(), *SPRING) is None
    assert rule_of(defn(cron=None, every="1h"), *SPRING) is None


def test_a_zoned_interval_counts_real_time_and_excludes_by_the_wall_clock() -> None:
    """7 November is 25 hours long in New York; 01:00-01:59 happens twice, at 05:xxZ (EDT)
    and 06:xxZ (EST): an exclusion of the hour 1 takes both."""
    start, end = utc("2027-11-07T04:00:00Z"), utc("2027-11-08T05:00:00Z")
    hourly = defn(cron=None, every="1h", exclude=[{"hour": "1"}], **NY)
    slots = rule_of(hourly, start, end)
    assert slots is not None
    every_hour = [start + timedelta(hours=k) for k in range(25)]
    kept = [
        t for t in every_hour if t not in (utc("2027-11-07T05:00:00Z"), utc("2027-11-07T06:00:00Z"))
    ]
    assert [s.utc for s in slots] == kept
    assert all(s.note is None for s in slots)
    with pytest.raises(RuleMismatch, match="Temporal fires 2027-11-07T06:00:00Z"):
        annotate(hourly, [*kept, utc("2027-11-07T06:00:00Z")], slots)
    # The limit counts what the exclusions leave (an interval without any is a UTC schedule).
    every_second = defn(cron=None, every="1s", exclude=["2099-01-01"], **NY)
    with pytest.raises(InvalidInput, match="more than 10,000 slots"):
        rule_of(every_second, start, start + timedelta(seconds=MAX_SLOTS + 1))
    assert (
        len(rule_of(every_second, start, start + timedelta(seconds=MAX_SLOTS)) or []) == MAX_SLOTS
    )


def test_rule_of_keeps_start_at_and_end_at_both_inclusive() -> None:
    window = (utc("2027-03-12T05:00:00Z"), utc("2027-03-16T04:00:00Z"))
    bounded = defn(start_at="2027-03-13T07:30:00Z", end_at="2027-03-14T07:00:00Z", **NY)
    slots = rule_of(bounded, *window)
    assert slots is not None
    assert [s.utc for s in slots] == [utc("2027-03-13T07:30:00Z"), utc("2027-03-14T07:00:00Z")]
    later = defn(start_at="2027-03-13T07:30:01Z", end_at="2027-03-14T06:59:59Z", **NY)
    assert rule_of(later, *window) == []


def test_more_than_the_limit_of_slots_is_invalid_input() -> None:
    every_minute = defn(cron="* * * * *", **NY)
    start = utc("2027-01-01T00:00:00Z")
    end = start + timedelta(minutes=MAX_SLOTS)
    assert rule_of(every_minute, start, end) is not None  # exactly the limit
    with pytest.raises(InvalidInput, match=r"ny: more than 10,000 slots"):
        rule_of(every_minute, start, end + timedelta(minutes=1))


def test_temporal_s_slots_are_annotated_with_the_rule_s_local_time_and_note() -> None:
    schedule = defn(**NY)
    fires = [utc("2027-03-13T07:30:00Z"), utc("2027-03-14T07:00:00Z")]
    preview = annotate(schedule, fires, rule_of(schedule, *SPRING))
    assert preview.timezone == "America/New_York"
    assert [(s.local, s.logical_key) for s in preview.slots] == [
        ("2027-03-13T02:30:00-05:00 EST", "ny@2027-03-13T07:30:00Z"),
        ("2027-03-14T03:00:00-04:00 EDT", "ny@2027-03-14T07:00:00Z"),
    ]
    assert preview.slots[0].note is None
    assert "02:30 does not exist on 2027-03-14" in (preview.slots[1].note or "")


def test_a_slot_temporal_drops_or_adds_is_a_mismatch_naming_the_instant() -> None:
    schedule = defn(**NY)
    rule = rule_of(schedule, *SPRING)
    # What Temporal alone does with a zone: the gap's 02:30 is not fired at all.
    with pytest.raises(RuleMismatch) as dropped:
        annotate(schedule, [utc("2027-03-13T07:30:00Z")], rule)
    assert "the rule fires 2027-03-14T07:00:00Z, which Temporal does not" in str(dropped.value)
    assert "Temporal fires" not in str(dropped.value)
    with pytest.raises(RuleMismatch) as added:
        annotate(
            schedule,
            [utc("2027-03-13T07:30:00Z"), utc("2027-03-14T07:00:00Z"), utc("2027-03-14T07:30:00Z")],
            rule,
        )
    assert "Temporal fires 2027-03-14T07:30:00Z, which the rule does not" in str(added.value)


def test_the_second_reading_of_a_repeated_fixed_hour_is_a_mismatch() -> None:
    """01:30 on 7 November happens at 05:30Z (EDT) and 06:30Z (EST); a fixed hour fires once."""
    schedule = defn(cron="30 1 * * *", **NY)
    window = (utc("2027-11-07T04:00:00Z"), utc("2027-11-08T05:00:00Z"))
    rule = rule_of(schedule, *window)
    assert rule is not None and [s.utc for s in rule] == [utc("2027-11-07T05:30:00Z")]
    both = [utc("2027-11-07T05:30:00Z"), utc("2027-11-07T06:30:00Z")]
    with pytest.raises(RuleMismatch, match="Temporal fires 2027-11-07T06:30:00Z"):
        annotate(schedule, both, rule)


def test_a_utc_schedule_is_temporal_s_list_with_its_utc_text_as_local() -> None:
    fires = [utc("2027-03-14T02:30:00Z")]
    preview = annotate(defn(), fires, None)
    assert preview_json([preview]) == {
        "schedules": [
            {
                "id": "ny",
                "timezone": "UTC",
                "slots": [
                    {
                        "utc": "2027-03-14T02:30:00Z",
                        "local": "2027-03-14T02:30:00Z",
                        "logical_key": "ny@2027-03-14T02:30:00Z",
                        "note": None,
                    }
                ],
            }
        ]
    }


# --- the text -----------------------------------------------------------------------------------


def test_the_text_is_a_heading_per_schedule_and_a_line_per_slot() -> None:
    zoned = defn(**NY)
    day = (utc("2027-03-14T05:00:00Z"), utc("2027-03-15T04:00:00Z"))
    previews = [
        annotate(zoned, [utc("2027-03-14T07:00:00Z")], rule_of(zoned, *day)),
        annotate(defn("plain"), [], None),
    ]
    lines = preview_lines(previews, *day)
    assert lines[0] == (
        "ny (America/New_York): 1 slot from 2027-03-14T05:00:00Z to 2027-03-15T04:00:00Z"
    )
    assert lines[1].startswith(
        "  2027-03-14T07:00:00Z  2027-03-14T03:00:00-04:00 EDT  ny@2027-03-14T07:00:00Z  (02:30"
    )
    assert lines[2] == "plain (UTC): 0 slots from 2027-03-14T05:00:00Z to 2027-03-15T04:00:00Z"
    assert len(lines) == 3
