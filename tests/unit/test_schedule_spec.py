"""The spec fields beyond the trigger (start_at, end_at, exclude, jitter, a list of crons) and
the refusal of a spec that can never fire."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from pydantic import ValidationError
from temporalio.client import ScheduleRange

from cronwarden.activities.jobs import JobContext, JobRegistry, JobResult, JobSpec
from cronwarden.errors import ScheduleFileError
from cronwarden.schedules.inventory import spec_text
from cronwarden.schedules.mapping import definition_digest, definition_json, to_spec
from cronwarden.schedules.model import ScheduleDefinition, parse_schedule_text

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


def define(**fields: Any) -> ScheduleDefinition:
    return ScheduleDefinition.model_validate(
        {"id": "spec", "job": "report", **fields}, context={"now": NOW}
    )


def refusal(**fields: Any) -> str:
    with pytest.raises(ValidationError) as exc_info:
        define(**fields)
    return str(exc_info.value)


@pytest.mark.parametrize(
    ("fields", "reason"),
    [
        ({"cron": "0 0 30 2 *"}, "'0 0 30 2 *' asks for day 30 of February, a date that does"),
        ({"cron": "0 0 31 4,6,9,11 *"}, "asks for day 31 of April, June, September, November"),
        (
            {"cron": "0 0 1 1 * 2001-2020", "start_at": "2021-01-01T00:00:00Z"},
            "names only years before 2026 (2001, 2002, 2003",
        ),
        ({"cron": "0 0 29 2 * 2027"}, "matches no day between 2026-11-30T12:00:00Z and"),
        ({"cron": "0 0 1 1 mon 2027"}, "(its day-of-month and day-of-week must both match)"),
        (
            {
                "cron": "0 9 * * *",
                "start_at": "2031-01-01T00:00:00Z",
                "end_at": "2030-01-01T00:00Z",
            },
            "its end_at (2030-01-01T00:00:00Z) is not after its start_at (2031-01-01T00:00:00Z)",
        ),
        # Finished, and could never fire in its life either: still refused, naming why.
        (
            {"cron": "0 0 30 2 *", "end_at": "2026-11-01T00:00:00Z"},
            "'0 0 30 2 *' asks for day 30 of February, a date that does not exist",
        ),
        (
            {
                "cron": "0 9 * * sat",
                "start_at": "2026-11-02T00:00:00Z",
                "end_at": "2026-11-06T23:59:59Z",
            },
            "matches no day between 2026-11-02T00:00:00Z and 2026-11-06T23:59:59Z",
        ),
        (
            {
                "every": "1d",
                "start_at": "2026-11-01T01:00:00Z",
                "end_at": "2026-11-01T02:00:00Z",
            },
            "every 1d from the epoch next fires at 2026-11-02T00:00:00Z, after its end_at",
        ),
        (
            {
                "cron": "0 9 * * *",
                "start_at": "2026-11-02T00:00:00Z",
                "end_at": "2026-11-01T00:00:00Z",
            },
            "its end_at (2026-11-01T00:00:00Z) is not after its start_at",
        ),
        (
            {"every": "1d", "end_at": "2026-11-30T18:00:00Z"},
            "every 1d from the epoch next fires at 2026-12-01T00:00:00Z, after",
        ),
        (
            {"cron": "0 9 25 12 *", "exclude": [{"month": "dec", "day_of_month": 25}]},
            "matches only days its exclusions skip",
        ),
        (
            # Its one fire (11:00) was before its life began: it never fired, and never will.
            {"cron": "0 11 30 11 * 2026", "start_at": "2026-11-30T11:30:00Z"},
            "matches no day between 2026-11-30T12:00:00Z",
        ),
    ],
)
def test_a_spec_that_never_fires_is_refused_naming_why(fields: dict[str, Any], reason: str) -> None:
    message = refusal(**fields)
    assert "this schedule never fires" in message
    assert reason in message


def test_a_spec_whose_end_at_has_passed_is_finished_not_refused() -> None:
    # It could fire in its life: the file it is in stays valid after it ends.
    ended = define(every="1h", end_at="2026-11-01T00:00:00+02:00")
    assert ended.finished(NOW) == (
        "its end_at (2026-10-31T22:00:00Z) has passed, so it fires no more"
    )
    # Its whole life is in the past, and it matched a day of it.
    window = define(
        cron="0 9 * * mon-fri", start_at="2026-11-02T00:00:00Z", end_at="2026-11-06T23:59:59Z"
    )
    assert window.finished(NOW) is not None
    # Without a start_at, its life began before anyone knows: a year field it met counts.
    assert define(cron="0 0 1 1 * 2020-2025", end_at="2026-01-01T00:00:00Z").finished(NOW)
    # A cron whose years have all gone by, without an end_at: it fired in its life, and is
    # finished the same way, not refused (a file applied every year would break on 1 January).
    years = define(cron="0 0 1 1 * 2020-2025")
    assert years.finished(NOW) == (
        "it fires no more: '0 0 1 1 * 2020-2025' names only years before 2026 (2020, 2021, "
        "2022, 2023, 2024, ...)"
    )
    assert define(cron="0 11 30 11 * 2026").finished(NOW) is not None
    # Until its end_at passes it is not finished, even with no fire left before it.
    assert define(every="1h", end_at="2026-12-01T00:00:00Z").finished(NOW) is None
    assert define(cron="0 9 * * *").finished(NOW) is None


def test_a_spec_that_fires_once_more_is_accepted() -> None:
    # 30 November 2026 still has its 13:00 fire after NOW (12:00).
    assert define(cron="0 13 30 11 * 2026").cron == "0 13 30 11 * 2026"
    assert define(cron="0 0 29 2 * 2027-2028").crons == ["0 0 29 2 * 2027-2028"]


def test_a_list_of_crons_is_checked_item_by_item() -> None:
    assert define(cron=["0 9 * * mon-fri", "0 12 * * sat"]).crons == [
        "0 9 * * mon-fri",
        "0 12 * * sat",
    ]
    assert "cron[1]: minute field '61'" in refusal(cron=["0 9 * * *", "61 * * * *"])
    assert "the cron list repeats '0 9 * * *'" in refusal(cron=["0 9 * * *", "0  9 * * *"])
    assert "the cron list is empty" in refusal(cron=[])


def test_start_and_end_need_a_zone_and_are_kept_in_utc() -> None:
    defn = define(cron="0 9 * * *", start_at="2027-01-01T09:00:00+01:00")
    assert defn.start_at == datetime(2027, 1, 1, 8, 0, tzinfo=UTC)
    assert "has no time zone" in refusal(cron="0 9 * * *", start_at="2027-01-01T09:00:00")
    assert "is not an ISO 8601 time" in refusal(cron="0 9 * * *", end_at="next year")


def test_an_exclusion_date_that_does_not_exist_is_refused() -> None:
    assert "'2027-02-30' is not a date: February 2027 has 28 days" in refusal(
        cron="0 9 * * *", exclude=["2027-02-30"]
    )
    assert "day-of-week field 'xyz'" in refusal(cron="0 9 * * *", exclude=[{"day_of_week": "xyz"}])
    assert "exclude.0.weekday" in refusal(cron="0 9 * * *", exclude=[{"weekday": "sat"}])


def test_an_unknown_key_in_an_exclusion_is_named_with_its_place() -> None:
    registry = JobRegistry()
    registry.register(JobSpec(name="report", func=_noop, read_only=True, args_model=None))
    text = "schedules:\n  - id: s\n    job: report\n    cron: '0 9 * * *'\n"
    with pytest.raises(ScheduleFileError) as exc_info:
        parse_schedule_text(text + "    exclude: [{weekday: sat}]\n", registry, now=NOW)
    assert ("schedule 's' (entry 1), field 'exclude[0].weekday': unknown field 'weekday'") in str(
        exc_info.value
    )


async def _noop(ctx: JobContext) -> JobResult:
    return None


def test_exclusions_map_to_whole_day_skip_calendars() -> None:
    defn = define(
        cron="0 9 * * mon-fri",
        exclude=["2026-12-25", {"month": "dec", "day_of_month": "24,26-31"}],
    )
    christmas, holidays = to_spec(defn).skip
    # Every second of the day: Temporal's defaults would skip only 00:00:00.
    assert christmas.second == (ScheduleRange(0, 59),)
    assert christmas.minute == (ScheduleRange(0, 59),)
    assert christmas.hour == (ScheduleRange(0, 23),)
    assert christmas.year == (ScheduleRange(2026, 2026),)
    assert (christmas.month, christmas.day_of_month) == ((ScheduleRange(12),), (ScheduleRange(25),))
    assert holidays.year == ()
    assert holidays.day_of_month == (ScheduleRange(24), ScheduleRange(26, 31))
    assert holidays.day_of_week == (ScheduleRange(0, 6),)


def test_the_spec_carries_the_period_and_the_jitter_in_utc() -> None:
    defn = define(
        cron=["0 9 * * *", "30 17 * * fri"],
        start_at="2027-01-01T00:00:00Z",
        end_at="2027-06-30T00:00:00Z",
        jitter="30s",
    )
    spec = to_spec(defn)
    assert spec.cron_expressions == ["0 9 * * *", "30 17 * * fri"]
    assert spec.start_at == datetime(2027, 1, 1, tzinfo=UTC)
    assert spec.end_at == datetime(2027, 6, 30, tzinfo=UTC)
    assert spec.jitter == timedelta(seconds=30)
    assert spec.time_zone_name is None


def test_unset_spec_fields_leave_the_digest_of_older_definitions_alone() -> None:
    plain = define(cron="0 9 * * *")
    # The digest of this definition before start_at, end_at, exclude and jitter existed.
    assert definition_digest(plain, task_queue="q") == definition_digest(
        define(cron="0 9 * * *", exclude=[]), task_queue="q"
    )
    changed = {
        definition_digest(define(cron="0 9 * * *", **extra), task_queue="q")
        for extra in (
            {"start_at": "2027-01-01T00:00:00Z"},
            {"end_at": "2027-01-01T00:00:00Z"},
            {"exclude": ["2026-12-25"]},
            {"jitter": "10s"},
        )
    }
    assert definition_digest(plain, task_queue="q") not in changed
    assert len(changed) == 4


def test_list_status_and_describe_show_every_part_of_the_spec() -> None:
    defn = define(
        cron=["0 9 * * mon-fri", "30 17 * * fri"],
        start_at="2027-01-01T00:00:00Z",
        end_at="2027-06-30T00:00:00Z",
        exclude=["2027-05-01", {"month": "dec", "day_of_month": "24-26"}],
        jitter="30s",
    )
    assert spec_text(definition_json(defn, task_queue="q"), to_spec(defn)) == (
        "cron 0 9 * * mon-fri; cron 30 17 * * fri; from 2027-01-01T00:00:00Z; "
        "until 2027-06-30T00:00:00Z; except 2027-05-01, day_of_month=24-26 month=dec; jitter 30s"
    )
    # A schedule cronwarden did not create: Temporal's own spec, with the same parts.
    assert spec_text(None, to_spec(defn)) == (
        "cron 0 9 * * mon-fri; cron 30 17 * * fri; from 2027-01-01T00:00:00Z; "
        "until 2027-06-30T00:00:00Z; 2 skip calendar(s); jitter 30s"
    )
