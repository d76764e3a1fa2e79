"""Cases where the compilation, the model or the file's zone default once departed from the
stated daylight-saving rule or from what a UTC schedule is."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from cronwarden.schedules.apply import horizon
from cronwarden.schedules.mapping import definition_json
from cronwarden.schedules.model import ScheduleDefinition, parse_schedule_text
from cronwarden.schedules.zones import LocalSpec, compile_local, compiled_instants, rule_slots
from tests.support.registries import noop_registry


def utc(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


_registry = noop_registry


def test_a_window_starting_inside_a_repeated_hour_fires_no_second_reading() -> None:
    # New York falls back at 2027-11-07 06:00Z (02:00 EDT -> 01:00 EST): 01:30 reads at 05:30Z
    # (EDT, the first) and 06:30Z (EST, the second). A fixed hour fires the first only, which
    # is before the window: the window holds no fire at all.
    spec = LocalSpec(zone="America/New_York", crons=("30 1 * * *",))
    start, end = utc("2027-11-07T06:00:00Z"), utc("2027-11-07T08:00:00Z")
    assert [s.utc for s in rule_slots(spec, start, end)] == []
    assert compiled_instants(compile_local(spec, start, end), start, end) == []


def test_an_every_schedule_in_a_zoned_file_has_no_horizon() -> None:
    (interval,) = parse_schedule_text(
        "timezone: Europe/Berlin\nschedules:\n  - {id: a, job: noop, every: 15m}\n",
        _registry(),
        now=datetime(2027, 6, 1, tzinfo=UTC),
    )
    assert horizon(interval, task_queue="q") is None
    assert "zone_compiled" not in definition_json(interval, task_queue="q")


def test_every_tzdata_name_for_utc_is_a_utc_schedule() -> None:
    entry = {"id": "a", "job": "noop", "cron": "0 9 * * *", "timezone": "Etc/Zulu"}
    assert ScheduleDefinition.model_validate(entry).timezone is None


def test_a_zone_name_in_the_wrong_case_is_refused_with_the_right_spelling() -> None:
    with pytest.raises(ValueError, match="did you mean 'UTC'"):
        ScheduleDefinition.model_validate(
            {"id": "a", "job": "noop", "cron": "0 9 * * *", "timezone": "utc"}
        )
    with pytest.raises(ValueError, match="did you mean 'Europe/Berlin'"):
        ScheduleDefinition.model_validate(
            {"id": "a", "job": "noop", "cron": "0 9 * * *", "timezone": "europe/berlin"}
        )


def test_an_interval_with_local_exclusions_keeps_its_zone() -> None:
    entry = {"id": "a", "job": "noop", "every": "15m", "exclude": [{"day_of_week": "sun"}]}
    zoned = ScheduleDefinition.model_validate({**entry, "timezone": "Europe/Berlin"})
    assert zoned.timezone == "Europe/Berlin"
