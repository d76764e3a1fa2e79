"""Local time beside UTC: the pure formatting every view of a zoned schedule shares, and a UTC
schedule's output left exactly as it was."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from cronwarden.monitor.messages import incident_message, with_local_time
from cronwarden.monitor.sinks.pagerduty import pagerduty_event
from cronwarden.monitor.sinks.slack import slack_payload
from cronwarden.schedules.inventory import definition_spec_text
from cronwarden.schedules.local_times import (
    causes_for_text,
    causes_with_local,
    horizon_warning,
    key_with_local,
    local_fields,
    with_local,
    zone_fields,
)
from cronwarden.schedules.status import StatusRow
from cronwarden.schedules.zones import HORIZON_WARNING

NY = "America/New_York"
SPRING = datetime(2027, 3, 14, 7, 0, tzinfo=UTC)  # 02:00 EST does not exist: 03:00 EDT
WINTER = datetime(2027, 1, 5, 7, 30, tzinfo=UTC)


def test_a_zoned_time_reads_utc_then_its_wall_clock_with_offset_and_abbreviation() -> None:
    assert with_local(WINTER, NY) == "2027-01-05T07:30:00Z (2027-01-05T02:30:00-05:00 EST)"
    assert with_local(SPRING, NY) == "2027-03-14T07:00:00Z (2027-03-14T03:00:00-04:00 EDT)"
    key = "daily@2027-01-05T07:30:00Z"
    assert key_with_local("daily", key, NY) == f"{key} (2027-01-05T02:30:00-05:00 EST)"


def test_a_utc_schedule_gets_no_new_field_and_no_parentheses() -> None:
    assert with_local(WINTER, None) == "2027-01-05T07:30:00Z"
    assert with_local(None, NY) == "-"
    assert key_with_local("daily", "daily@2027-01-05T07:30:00Z", None) == (
        "daily@2027-01-05T07:30:00Z"
    )
    assert zone_fields(None, next_fire=WINTER) == {}
    assert local_fields(None, at=WINTER) == {}
    groups = [{"cause": "no-worker", "first": "d@2027-01-05T07:30:00Z", "last": "d@x"}]
    assert causes_with_local("d", groups, None) is groups
    assert causes_for_text("d", groups, None) == groups


def test_zoned_json_carries_the_zone_and_a_local_field_beside_each_utc_one() -> None:
    assert zone_fields(NY, next_fire=WINTER, last=None) == {
        "timezone": NY,
        "next_fire_local": "2027-01-05T02:30:00-05:00 EST",
        "last_local": None,
    }
    groups = [
        {"first": "d@2027-01-05T07:30:00Z", "last": "d@2027-03-14T07:00:00Z", "count": 2},
    ]
    [group] = causes_with_local("d", groups, NY) or []
    assert group["first_local"] == "2027-01-05T02:30:00-05:00 EST"
    assert group["last_local"] == "2027-03-14T03:00:00-04:00 EDT"
    [text] = causes_for_text("d", groups, NY)
    assert text["first"] == "d@2027-01-05T07:30:00Z (2027-01-05T02:30:00-05:00 EST)"


def test_the_horizon_warning_starts_within_horizon_warning_of_the_compiled_end() -> None:
    definition = {"timezone": NY, "zone_compiled": "tzdata 2026a, 2025-2029"}
    horizon = datetime(2030, 1, 1, tzinfo=UTC)
    assert horizon_warning(definition, now=horizon - HORIZON_WARNING - timedelta(1)) is None
    near = horizon_warning(definition, now=horizon - HORIZON_WARNING)
    assert near is not None and "2030-01-01T00:00:00Z" in near
    assert "re-apply the schedule file to compile further" in near
    past = horizon_warning(definition, now=horizon + timedelta(days=1))
    assert past is not None and "ended" in past
    # A UTC schedule compiles nothing: no horizon, whatever its definition holds.
    assert horizon_warning({"zone_compiled": "tzdata 2026a, 2025-2029"}, now=horizon) is None


def test_the_spec_text_names_the_zone_only_for_a_zoned_schedule() -> None:
    assert definition_spec_text({"cron": "30 2 * * *"}) == "cron 30 2 * * *"
    zoned = {"cron": "30 2 * * *", "timezone": NY, "dst_gap": "skip"}
    assert definition_spec_text(zoned) == f"cron 30 2 * * *; timezone {NY}; dst_gap skip"


def row(timezone: str | None) -> StatusRow:
    return StatusRow(
        schedule_id="daily",
        managed=True,
        in_temporal=True,
        job="probe",
        spec="cron 30 2 * * *",
        overlap="skip",
        paused=False,
        paused_by=None,
        pause_note=None,
        orphaned=False,
        last_success_key="daily@2027-01-05T07:30:00Z",
        last_success_at=WINTER,
        next_expected_at=WINTER + timedelta(days=1),
        health="ok",
        last_error=None,
        skipped_overlap=None,
        missed_catchup=None,
        now=WINTER + timedelta(hours=1),
        timezone=timezone,
    )


def keys_of(value: Any, prefix: str = "") -> set[str]:
    if not isinstance(value, dict):
        return set()
    found = set()
    for key, item in value.items():
        found.add(prefix + key)
        found |= keys_of(item, f"{prefix}{key}.")
    return found


def test_a_status_row_gains_local_fields_only_when_zoned() -> None:
    plain, zoned = row(None).as_json(), row(NY).as_json()
    assert keys_of(zoned) - keys_of(plain) == {
        "timezone",
        "next_expected_at_local",
        "last_success.at_local",
        "last_replay.at_local",
        "missing.keys_local",
        "horizon_warning",
    }
    assert zoned["next_expected_at_local"] == "2027-01-06T02:30:00-05:00 EST"
    assert zoned["last_success"]["at_local"] == "2027-01-05T02:30:00-05:00 EST"


def overdue_message() -> dict[str, Any]:
    return incident_message(
        "trigger",
        {
            "id": 7,
            "kind": "overdue",
            "schedule_id": "daily",
            "summary": "schedule daily is overdue: a run was expected at 2027-01-05T07:30:00Z "
            "(grace 1m); last success 2027-01-04T07:30:00Z",
            "details": {"next_expected_at": "2027-01-05T07:30:00Z", "grace": "1m"},
            "opened_at": WINTER,
        },
    )


def test_an_overdue_page_of_a_zoned_schedule_names_the_expected_fire_locally_in_every_sink() -> (
    None
):
    local = "2027-01-05T02:30:00-05:00 EST"
    paged = with_local_time(overdue_message(), NY)
    assert paged["details"]["next_expected_local"] == local
    assert paged["details"]["timezone"] == NY
    assert f"expected at 2027-01-05T07:30:00Z ({local}) (grace 1m)" in paged["summary"]
    assert local in slack_payload(paged)["text"]
    assert local in pagerduty_event(paged, routing_key="k")["payload"]["summary"]
    # Applied twice (a retried delivery), it says it once.
    assert with_local_time(paged, NY) == paged


def test_a_utc_schedules_page_is_left_as_it_is() -> None:
    message = overdue_message()
    assert with_local_time(message, None) == message
