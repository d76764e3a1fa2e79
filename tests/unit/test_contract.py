from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

from cronwarden.activities.contract import (
    format_fire_time,
    logical_key,
    nominal_fire_time,
    parse_fire_time,
)


def test_the_logical_key_is_the_schedule_and_the_utc_fire_time_to_the_second() -> None:
    fire = datetime(2026, 3, 29, 1, 30, 0, 999_999, tzinfo=UTC)
    assert logical_key("nightly", fire) == "nightly@2026-03-29T01:30:00Z"


def test_a_fire_time_in_another_zone_names_the_same_key_as_its_utc_instant() -> None:
    paris = timezone(timedelta(hours=2))
    assert logical_key("s", datetime(2026, 6, 1, 4, 0, tzinfo=paris)) == "s@2026-06-01T02:00:00Z"


def test_a_naive_fire_time_is_refused_rather_than_guessed() -> None:
    with pytest.raises(ValueError, match="no time zone"):
        format_fire_time(datetime(2026, 1, 1))
    with pytest.raises(ValueError, match="no time zone"):
        parse_fire_time("2026-01-01T00:00:00")


def test_parsing_accepts_z_and_offsets_and_drops_sub_seconds() -> None:
    assert parse_fire_time("2026-01-01T00:00:00Z") == datetime(2026, 1, 1, tzinfo=UTC)
    assert parse_fire_time("2026-01-01T01:00:00.5+01:00") == datetime(2026, 1, 1, tzinfo=UTC)


def test_the_nominal_time_comes_from_the_workflow_id_even_if_the_attribute_is_jittered() -> None:
    nominal = datetime(2026, 11, 30, 4, 0, 10, tzinfo=UTC)
    jittered = nominal + timedelta(seconds=7, milliseconds=250)
    assert (
        nominal_fire_time(
            schedule_id="nightly",
            workflow_id="nightly-2026-11-30T04:00:10Z",
            scheduled_start=jittered,
        )
        == nominal
    )


def test_without_a_schedule_suffix_the_attribute_names_the_slot() -> None:
    scheduled = datetime(2026, 11, 30, 4, 0, 10, 500000, tzinfo=UTC)
    assert nominal_fire_time(
        schedule_id="nightly", workflow_id="other-id", scheduled_start=scheduled
    ) == scheduled.replace(microsecond=0)
    assert (
        nominal_fire_time(schedule_id="nightly", workflow_id="nightly-x", scheduled_start=None)
        is None
    )
