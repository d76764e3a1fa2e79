"""Maintenance windows (`maintenance:`): what the file accepts and refuses, and the skip
calendars a window compiles to, on the UTC path and on a zoned schedule's wall clock (held to
the minutes of the window read directly from its `from` and `to`)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from temporalio.client import ScheduleCalendarSpec, ScheduleRange

from cronwarden.errors import ScheduleFileError
from cronwarden.schedules.mapping import definition_digest, definition_json, to_spec
from cronwarden.schedules.model import ScheduleDefinition, parse_schedule_text
from cronwarden.schedules.spec_parts import SkipCalendar
from cronwarden.schedules.zones import Compiled, compiled_instants, load_zone, rule_slots
from tests.support.registries import noop_registry

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
_HEAD = "schedules:\n  - id: mw\n    job: noop\n    cron: '*/15 * * * *'\n    maintenance:\n"


def define(**fields: Any) -> ScheduleDefinition:
    return ScheduleDefinition.model_validate(
        {"id": "mw", "job": "noop", **fields}, context={"now": NOW}
    )


def utc(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def inside(wall: datetime, windows: list[tuple[int, int, int]]) -> bool:
    """Whether a wall time lies in one of (weekday with 0 Sunday, from minute, to minute)."""
    minute = wall.hour * 60 + wall.minute
    return any(wall.isoweekday() % 7 == day and low <= minute < high for day, low, high in windows)


_EVERY_MINUTE = ScheduleCalendarSpec(
    second=(ScheduleRange(0),),
    minute=(ScheduleRange(0, 59),),
    hour=(ScheduleRange(0, 23),),
    day_of_month=(ScheduleRange(1, 31),),
    month=(ScheduleRange(1, 12),),
    day_of_week=(ScheduleRange(0, 6),),
)


def test_a_window_compiles_to_at_most_three_products_of_hours_and_minutes() -> None:
    defn = define(
        cron="*/15 * * * *", maintenance=[{"days": "sun", "from": "02:30", "to": "04:15"}]
    )
    assert defn.skip_calendars == (
        SkipCalendar(day_of_week="sun", hour="2", minute="30-59"),
        SkipCalendar(day_of_week="sun", hour="3", minute="*"),
        SkipCalendar(day_of_week="sun", hour="4", minute="0-14"),
    )
    # YAML keeps an unquoted 02:00 as text (a leading zero is no base-60 number).
    [whole] = parse_schedule_text(
        _HEAD.replace("*/15", "0") + "      - {from: 02:00, to: 04:00}\n", noop_registry()
    )
    assert whole.skip_calendars == (SkipCalendar(hour="2-3"),)
    short = define(cron="0 * * * *", maintenance=[{"days": [6, 0], "from": "23:10", "to": "24:00"}])
    assert short.skip_calendars == (SkipCalendar(day_of_week="6,0", hour="23", minute="10-59"),)


def test_the_utc_spec_skips_exactly_the_minutes_of_each_window() -> None:
    defn = define(
        cron="* * * * *",
        exclude=["2027-01-06"],
        maintenance=[
            {"days": "sun", "from": "02:30", "to": "04:15"},
            {"days": "mon-fri", "from": "23:59", "to": "24:00"},
            {"from": "12:00", "to": "12:01"},
        ],
    )
    spec = to_spec(defn)
    start, end = utc("2027-01-01T00:00:00Z"), utc("2027-01-15T00:00:00Z")
    fired = compiled_instants(Compiled((_EVERY_MINUTE,), tuple(spec.skip), start, end), start, end)
    windows = [
        (0, 150, 255),
        *((d, 1439, 1440) for d in range(1, 6)),
        *((d, 720, 721) for d in range(7)),
    ]
    expected = []
    minute = start
    while minute < end:
        if minute.date().isoformat() != "2027-01-06" and not inside(minute, windows):
            expected.append(minute)
        minute += timedelta(minutes=1)
    assert fired == expected
    # The file's exclusion is still its own field; the windows are merged into the spec only.
    assert definition_json(defn, task_queue="q")["exclude"] == [
        SkipCalendar(year="2027", month="1", day_of_month="6").model_dump(mode="json")
    ]
    assert definition_json(defn, task_queue="q")["maintenance"][0] == {
        "days": "sun",
        "from": "02:30",
        "to": "04:15",
    }


@pytest.mark.parametrize(
    ("zone", "days"),
    [
        ("Europe/Berlin", ("2027-03-21", "2027-04-05")),  # spring forward on 28 March
        ("Europe/Berlin", ("2027-10-24", "2027-11-08")),  # fall back on 31 October
        ("America/New_York", ("2027-03-07", "2027-03-21")),
        ("America/New_York", ("2027-10-31", "2027-11-14")),
    ],
)
def test_a_zoned_window_follows_the_wall_clock_across_daylight_saving(
    zone: str, days: tuple[str, str]
) -> None:
    windows = [{"days": "sun", "from": "01:30", "to": "03:15"}, {"from": "09:00", "to": "09:30"}]
    plain = define(cron="*/15 * * * *", timezone=zone)
    held = define(cron="*/15 * * * *", timezone=zone, maintenance=windows)
    start, end = utc(f"{days[0]}T00:00:00Z"), utc(f"{days[1]}T00:00:00Z")
    year = (utc("2027-01-01T00:00:00Z"), utc("2028-01-01T00:00:00Z"))

    def fires(defn: ScheduleDefinition) -> list[datetime]:
        spec = to_spec(defn, window=year)
        compiled = Compiled(tuple(spec.calendars), tuple(spec.skip), *year)
        return compiled_instants(compiled, start, end)

    tz = load_zone(zone)
    ruled = [(0, 90, 195), *((d, 540, 570) for d in range(7))]
    expected = [t for t in fires(plain) if not inside(t.astimezone(tz), ruled)]
    assert fires(held) == expected
    assert len(expected) < len(fires(plain))
    # And the rule's own slots agree (what `schedules preview` checks Temporal against).
    assert held.local_spec is not None
    assert [s.utc for s in rule_slots(held.local_spec, start, end)] == expected


def test_an_interval_with_windows_keeps_its_zone_so_the_windows_follow_the_wall_clock() -> None:
    defn = define(
        every="10m", timezone="Europe/Berlin", maintenance=[{"from": "02:00", "to": "03:00"}]
    )
    assert defn.timezone == "Europe/Berlin"
    assert define(every="10m", timezone="Europe/Berlin").timezone is None


def test_the_digest_leaves_windows_out_while_unset_and_changes_with_them() -> None:
    plain = define(cron="0 3 * * *")
    assert "maintenance" not in definition_json(plain, task_queue="q")
    assert definition_digest(define(cron="0 3 * * *", maintenance=[]), task_queue="q") == (
        definition_digest(plain, task_queue="q")
    )
    one = define(cron="0 3 * * *", maintenance=[{"days": "sun", "from": "02:00", "to": "04:00"}])
    other = define(cron="0 3 * * *", maintenance=[{"days": "sat", "from": "02:00", "to": "04:00"}])
    digests = {definition_digest(d, task_queue="q") for d in (plain, one, other)}
    assert len(digests) == 3


@pytest.mark.parametrize(
    ("windows", "message"),
    [
        (
            "      - {days: sat, from: '22:00', to: '02:00'}\n",
            'crosses midnight; write it as two windows: {days: "sat", from: "22:00", to: '
            '"24:00"} and {days: "sun", from: "00:00", to: "02:00"}',
        ),
        ("      - {from: '02:00', to: '02:00'}\n", "is empty: `to` must be later than `from`"),
        ("      - {from: '00:00', to: '24:00'}\n", "the window never ends"),
        (
            "      - {days: mon-wed, from: '00:00', to: '24:00'}\n"
            "      - {days: 'thu-sat,sun', from: '00:00', to: '24:00'}\n",
            "cover every minute of every day",
        ),
        (
            "      - {from: 12:30, to: '14:00'}\n",
            '`from` is the number 750 (did you mean "12:30"?); write the time quoted',
        ),
        ("      - {from: '2:00', to: '25:00'}\n", "`to` '25:00' is not a time of day"),
        ("      - {from: '24:00', to: '24:00'}\n", "a window opens at 23:59 latest"),
        ("      - {from: '02:00'}\n", "field 'maintenance[0].to': is required"),
        (
            "      - {day: sun, from: '02:00', to: '03:00'}\n",
            "field 'maintenance[0].day': unknown field 'day' (did you mean 'days'?)",
        ),
        ("      - {days: funday, from: '02:00', to: '03:00'}\n", "'funday' is not a day-of-week"),
        ("      sundays\n", "`maintenance` must be a list of windows"),
    ],
)
def test_a_bad_window_is_one_clear_problem(windows: str, message: str) -> None:
    with pytest.raises(ScheduleFileError) as exc_info:
        parse_schedule_text(_HEAD + windows, noop_registry(), now=NOW)
    assert len(exc_info.value.problems) == 1
    assert message in exc_info.value.problems[0]
    assert "schedule 'mw' (entry 1)" in exc_info.value.problems[0]


def test_a_window_taking_every_day_the_cron_fires_is_refused_as_never_firing() -> None:
    text = (
        "schedules:\n  - id: mw\n    job: noop\n    cron: '0 3 * * sun'\n    maintenance:\n"
        "      - {days: sun, from: '00:00', to: '24:00'}\n"
    )
    with pytest.raises(ScheduleFileError) as exc_info:
        parse_schedule_text(text, noop_registry(), now=NOW)
    assert "this schedule never fires" in exc_info.value.problems[0]


@pytest.mark.parametrize(
    "fields",
    [
        {"cron": "0 3 * * *", "maintenance": [{"from": "02:00", "to": "04:00"}]},
        {
            "cron": ["15 3 * * sat", "45 23 * * sun"],
            "maintenance": [
                {"days": "sat", "from": "03:00", "to": "03:30"},
                {"days": "sun", "from": "23:00", "to": "24:00"},
            ],
        },
        {
            "cron": "0 9 * * *",
            "timezone": "Europe/Berlin",
            "maintenance": [{"from": "09:00", "to": "09:01"}],
        },
        {
            "every": "6h",
            "maintenance": [{"from": "00:00", "to": "00:01"}, {"from": "06:00", "to": "18:01"}],
        },
    ],
)
def test_windows_taking_every_fire_are_refused_as_never_firing(fields: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="every fire falls in a maintenance window"):
        define(**fields)


@pytest.mark.parametrize(
    "fields",
    [
        {"cron": "0 3,5 * * *", "maintenance": [{"from": "02:00", "to": "04:00"}]},
        {"cron": "0 3 * * *", "maintenance": [{"days": "mon-sat", "from": "02:00", "to": "04:00"}]},
        {"every": "7h", "maintenance": [{"from": "00:00", "to": "00:01"}]},
        {"every": "6h", "maintenance": [{"from": "00:00", "to": "00:01"}]},
    ],
)
def test_windows_leaving_some_fire_are_accepted(fields: dict[str, Any]) -> None:
    assert define(**fields).maintenance
