"""The daylight-saving rule, slot by slot, and its compilation into UTC calendar entries.

The expectations are written from the rule's words (docs/time-zones.md), each instant worked out
from the zone's published offsets, not read back from the code; the compilation is then held to
the rule slot by slot over whole years, in zones with whole-hour, half-hour and 45-minute
offsets and one whose rules changed.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from cronwarden.errors import ScheduleFileError
from cronwarden.schedules.mapping import definition_json, to_spec
from cronwarden.schedules.model import ScheduleDefinition, parse_schedule_text
from cronwarden.schedules.spec_parts import SkipCalendar
from cronwarden.schedules.zones import (
    ZONE_DB_VERSION,
    LocalSpec,
    compile_local,
    compiled_instants,
    load_zone,
    local_text,
    repeat_refusal,
    rule_slots,
    transitions,
)
from tests.support.registries import noop_registry

YEAR_2027 = (datetime(2027, 1, 1, tzinfo=UTC), datetime(2028, 1, 1, tzinfo=UTC))


def utc(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def day_slots(spec: LocalSpec, day: str) -> list[str]:
    """The rule's fires on one local day, as UTC text."""
    zone = load_zone(spec.zone)
    start = datetime.fromisoformat(day).replace(tzinfo=zone).astimezone(UTC)
    end = (datetime.fromisoformat(day) + timedelta(days=1)).replace(tzinfo=zone).astimezone(UTC)
    return [f"{s.utc:%H:%MZ}" for s in rule_slots(spec, start, end)]


# --- the rule ---------------------------------------------------------------------------------

# New York: 2027-03-14 02:00 EST (07:00Z) jumps to 03:00 EDT; 2027-11-07 02:00 EDT (06:00Z)
# falls back to 01:00 EST. Berlin: 2027-03-28 02:00 CET (01:00Z) -> 03:00 CEST; 2027-10-31
# 03:00 CEST (01:00Z) -> 02:00 CET. Lord Howe: 2027-04-04 02:00 +11 (15:00Z the day before)
# -> 01:30 +10:30; 2027-10-03 02:00 +10:30 (15:30Z the day before) -> 02:30 +11.
RULE_CASES = [
    # A wall time in the gap fires once, at the end of the gap.
    ("America/New_York", "30 2 * * *", None, None, "2027-03-14", ["07:00Z"]),
    ("America/New_York", "0 2 * * *", None, None, "2027-03-14", ["07:00Z"]),
    ("America/New_York", "30 2 * * *", "skip", None, "2027-03-14", []),
    # Two gap wall times and the regular 03:00 are one instant.
    ("America/New_York", "0,30 2-3 * * *", None, None, "2027-03-14", ["07:00Z", "07:30Z"]),
    # A repeated wall time with a fixed hour fires at its first occurrence ...
    ("America/New_York", "30 1 * * *", None, None, "2027-11-07", ["05:30Z"]),
    # ... with `*` or a step in the hour field, at each.
    ("America/New_York", "30 */1 * * *", None, None, "2027-11-07", None),
    ("America/New_York", "30 1 * * *", None, "each", "2027-11-07", ["05:30Z", "06:30Z"]),
    ("America/New_York", "30 * * * *", None, "once", "2027-11-07", None),
    ("Europe/Berlin", "30 2 * * *", None, None, "2027-03-28", ["01:00Z"]),
    ("Europe/Berlin", "30 2 * * *", None, None, "2027-10-31", ["00:30Z"]),
    ("Europe/Berlin", "30 1 * * *", None, None, "2027-10-31", ["23:30Z"]),
    ("Europe/Berlin", "0 2 * * *", None, "each", "2027-10-31", ["00:00Z", "01:00Z"]),
    ("Australia/Lord_Howe", "30 1 * * *", None, None, "2027-04-04", ["14:30Z"]),
    ("Australia/Lord_Howe", "30 1 * * *", None, "each", "2027-04-04", ["14:30Z", "15:00Z"]),
    ("Australia/Lord_Howe", "0 2 * * *", None, None, "2027-10-03", ["15:30Z"]),
    ("Australia/Lord_Howe", "15 2 * * *", "skip", None, "2027-10-03", []),
]


@pytest.mark.parametrize(("zone", "cron", "gap", "repeat", "day", "expected"), RULE_CASES)
def test_the_rule_on_transition_days(
    zone: str, cron: str, gap: str | None, repeat: str | None, day: str, expected: list[str] | None
) -> None:
    spec = LocalSpec(zone=zone, crons=(cron,), dst_gap=gap or "shift", dst_repeat=repeat)
    fires = day_slots(spec, day)
    if expected is not None:
        assert fires == expected
        return
    # Hourly at :30 through New York's fall-back day: 25 hours, so 25 fires, two of them
    # 01:30 (05:30Z EDT and 06:30Z EST) unless `once` keeps only the first.
    counts = {None: 25, "once": 24}
    assert len(fires) == counts[repeat]
    assert ("06:30Z" in fires) is (repeat is None)
    assert "05:30Z" in fires


def test_every_slot_says_what_the_rule_did_on_a_transition_and_nothing_on_other_days() -> None:
    spec = LocalSpec(zone="America/New_York", crons=("30 2 * * *",))
    start, end = utc("2027-03-13T00:00:00Z"), utc("2027-03-16T00:00:00Z")
    slots = rule_slots(spec, start, end)
    assert [s.note is None for s in slots] == [True, False, True]
    shifted = slots[1]
    assert shifted.local.isoformat() == "2027-03-14T03:00:00-04:00"
    assert "02:30 does not exist on 2027-03-14" in (shifted.note or "")
    assert local_text(shifted.utc, "America/New_York") == "2027-03-14T03:00:00-04:00 EDT"
    assert local_text(shifted.utc, None) is None


def test_an_exclusion_matches_the_wall_clock_of_the_instant_that_fires() -> None:
    # Sundays 01:00-02:59 excluded: New York's fall-back Sunday loses both 01:30s; a weekday
    # keeps its 01:30; the shifted gap fire (03:00 on a Sunday) is not excluded.
    spec = LocalSpec(
        zone="America/New_York",
        crons=("30 1,2 * * *",),
        exclude=(SkipCalendar(day_of_week="sun", hour="1-2"),),
        dst_repeat="each",
    )
    assert day_slots(spec, "2027-11-07") == []
    assert day_slots(spec, "2027-11-08") == ["06:30Z", "07:30Z"]
    assert day_slots(spec, "2027-03-14") == ["07:00Z"]


# --- the compilation: exactly the rule's instants ------------------------------------------------

ZONES = [
    "America/New_York",
    "Europe/Berlin",
    "Australia/Lord_Howe",  # a 30-minute change, at a half-hour offset
    "America/St_Johns",  # a negative half-hour offset
    "Asia/Kathmandu",  # +05:45, no daylight saving
    "Pacific/Chatham",  # +12:45 / +13:45
]
CRONS = [
    "30 1 * * *",
    "30 2 * * *",
    "0,30 * * * *",
    "30 */2 * * *",
    "15 23 * * mon-fri",
    "45 0 1 * *",
    "0 9 8-14 * mon",
]


@pytest.mark.parametrize("zone", ZONES)
@pytest.mark.parametrize(("gap", "repeat"), [("shift", None), ("skip", "once"), ("shift", "each")])
def test_the_compiled_entries_fire_exactly_the_rule_for_a_year(
    zone: str, gap: str, repeat: str | None
) -> None:
    start, end = YEAR_2027
    for cron in CRONS:
        spec = LocalSpec(zone=zone, crons=(cron,), dst_gap=gap, dst_repeat=repeat)
        expected = [s.utc for s in rule_slots(spec, start, end)]
        assert compiled_instants(compile_local(spec, start, end), start, end) == expected, cron


def test_a_list_of_crons_with_exclusions_compiles_to_their_union_less_the_exclusions() -> None:
    # The fixed-hour cron fires 01:30 once, the every-half-hour one fires it at each reading: the
    # second reading stays, because one cron wants it.
    spec = LocalSpec(
        zone="Europe/Berlin",
        crons=("0,30 * * * *", "30 1 * * *", "0 2 * * sat,sun"),
        exclude=(
            SkipCalendar(day_of_week="sun", hour="1-2"),
            SkipCalendar(hour="3", minute="0"),
            SkipCalendar(year="2027", month="10", day_of_month="30"),
        ),
    )
    start, end = YEAR_2027
    expected = [s.utc for s in rule_slots(spec, start, end)]
    assert len(expected) > 16_000
    assert compiled_instants(compile_local(spec, start, end), start, end) == expected


def test_a_window_starting_and_ending_mid_day_compiles_exactly() -> None:
    spec = LocalSpec(zone="Australia/Lord_Howe", crons=("*/15 * * * *",))
    start, end = utc("2027-04-03T14:07:00Z"), utc("2027-10-02T15:52:00Z")
    expected = [s.utc for s in rule_slots(spec, start, end)]
    assert compiled_instants(compile_local(spec, start, end), start, end) == expected


def test_a_zone_whose_rules_changed_compiles_by_the_rules_in_force_each_year() -> None:
    # Mexico City kept daylight saving until its fall back on 2022-10-30 and abolished it:
    # 2023-04-02 has no gap, and a 02:30 fires at 02:30 CST (08:30Z) that day.
    zone = load_zone("America/Mexico_City")
    start, end = datetime(2022, 1, 1, tzinfo=UTC), datetime(2024, 1, 1, tzinfo=UTC)
    moves = transitions(zone, start, end)
    assert [m.instant.date().isoformat() for m in moves] == ["2022-04-03", "2022-10-30"]
    spec = LocalSpec(zone="America/Mexico_City", crons=("30 2 * * *", "30 1 * * *"))
    assert day_slots(spec, "2022-04-03") == ["07:30Z", "08:00Z"]
    assert day_slots(spec, "2023-04-02") == ["07:30Z", "08:30Z"]
    expected = [s.utc for s in rule_slots(spec, start, end)]
    assert compiled_instants(compile_local(spec, start, end), start, end) == expected


def test_the_entries_for_four_years_stay_few() -> None:
    # Temporal evaluates every entry for every next fire time: the count is a cost.
    spec = LocalSpec(zone="America/New_York", crons=("30 1 * * *",))
    compiled = compile_local(
        spec, datetime(2026, 1, 1, tzinfo=UTC), datetime(2030, 1, 1, tzinfo=UTC)
    )
    assert len(compiled.calendars) < 60
    assert all(entry.year for entry in compiled.calendars)


# --- the guard's check -----------------------------------------------------------------------


def test_the_second_reading_of_a_fixed_hour_is_refused_and_nothing_else() -> None:
    fixed = LocalSpec(zone="America/New_York", crons=("30 1 * * *",))
    first, second = utc("2027-11-07T05:30:00Z"), utc("2027-11-07T06:30:00Z")
    assert repeat_refusal(fixed, first) is None
    refusal = repeat_refusal(fixed, second)
    assert refusal is not None and "first occurrence only (2027-11-07T05:30:00Z)" in refusal
    # Off the grid (a manual trigger at 01:10 EST) and an ordinary day are never refused.
    assert repeat_refusal(fixed, utc("2027-11-07T06:10:00Z")) is None
    assert repeat_refusal(fixed, utc("2027-11-08T06:30:00Z")) is None
    # The rule fires each reading when the hour is `*`, or when asked.
    assert repeat_refusal(LocalSpec(zone="America/New_York", crons=("30 * * * *",)), second) is None
    each = LocalSpec(zone="America/New_York", crons=("30 1 * * *",), dst_repeat="each")
    assert repeat_refusal(each, second) is None


# --- the schedule file ------------------------------------------------------------------------

FILE = """
timezone: Europe/Berlin
schedules:
  - {id: berlin, job: noop, cron: "0 9 * * *"}
  - {id: utc-one, job: noop, cron: "0 9 * * *", timezone: UTC}
  - {id: new-york, job: noop, cron: "30 1 * * *", timezone: America/New_York, dst_repeat: each}
"""


_registry = noop_registry


def test_the_file_default_zone_applies_to_entries_that_name_none() -> None:
    berlin, utc_one, new_york = parse_schedule_text(FILE, _registry())
    assert berlin.timezone == "Europe/Berlin"
    assert utc_one.timezone is None
    assert new_york.timezone == "America/New_York" and new_york.dst_repeat == "each"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "timezone: Europe/Berln",
            "'Europe/Berln' is not an IANA time zone name (did you mean 'Europe/Berlin'",
        ),
        ("timezone: 5", "expected an IANA time zone name"),
    ],
)
def test_a_bad_file_zone_is_one_clear_problem(text: str, message: str) -> None:
    with pytest.raises(ScheduleFileError) as exc_info:
        parse_schedule_text(
            f"{text}\nschedules:\n  - {{id: a, job: noop, cron: '0 9 * * *'}}\n", _registry()
        )
    assert message in str(exc_info.value)


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"timezone": "Mars/Olympus"}, "'Mars/Olympus' is not an IANA time zone name"),
        ({"dst_gap": "skip"}, "`dst_gap` applies only to a schedule with a `timezone`"),
        ({"timezone": "Europe/Paris", "dst_repeat": "twice"}, "dst_repeat"),
        (
            {"timezone": "Europe/Paris", "dst_gap": "skip", "cron": None, "every": "1h"},
            "an `every` interval counts real time",
        ),
    ],
)
def test_bad_zone_fields_are_refused(fields: dict[str, object], message: str) -> None:
    entry = {"id": "a", "job": "noop", "cron": "0 9 * * *", **fields}
    with pytest.raises(ValueError) as exc_info:
        ScheduleDefinition.model_validate(entry)
    assert message in str(exc_info.value)


def test_a_utc_schedule_keeps_its_digest_and_a_zoned_one_names_its_compilation() -> None:
    plain = ScheduleDefinition.model_validate({"id": "a", "job": "noop", "cron": "0 9 * * *"})
    as_utc = ScheduleDefinition.model_validate(
        {"id": "a", "job": "noop", "cron": "0 9 * * *", "timezone": "UTC"}
    )
    assert definition_json(plain, task_queue="q") == definition_json(as_utc, task_queue="q")
    assert "timezone" not in definition_json(plain, task_queue="q")
    zoned = ScheduleDefinition.model_validate(
        {"id": "a", "job": "noop", "cron": "0 9 * * *", "timezone": "Europe/Paris"}
    )
    data = definition_json(zoned, task_queue="q")
    assert data["timezone"] == "Europe/Paris"
    assert data["zone_compiled"].startswith(f"tzdata {ZONE_DB_VERSION}, ")
    spec = to_spec(zoned)
    # The zone never reaches Temporal: it gets UTC entries.
    assert spec.time_zone_name is None and not spec.cron_expressions and spec.calendars


def test_a_zoned_cron_whose_last_year_still_fires_in_its_zone_is_not_refused() -> None:
    # 00:00 on 1 January 2027 in Honolulu (UTC-10) is 10:00Z: at 05:00Z that day it is still to
    # come, though 00:00Z has passed.
    entry = {"id": "a", "job": "noop", "cron": "0 0 1 1 * 2027", "timezone": "Pacific/Honolulu"}
    now = utc("2027-01-01T05:00:00Z")
    definition = ScheduleDefinition.model_validate(entry, context={"now": now})
    assert definition.finished(now) is None
    assert definition.finished(utc("2027-01-02T00:00:00Z")) is not None
    # The same cron in UTC is over by then.
    plain = ScheduleDefinition.model_validate({**entry, "timezone": None}, context={"now": now})
    assert plain.finished(now) is not None


def test_entries_never_name_a_year_temporal_refuses() -> None:
    # Temporal's calendar runs from 2000 to 2100; an apply in 2099 compiles to the end of 2100.
    spec = LocalSpec(zone="Europe/Berlin", crons=("30 1 * * *",))
    compiled = compile_local(
        spec, datetime(2098, 1, 1, tzinfo=UTC), datetime(2103, 1, 1, tzinfo=UTC)
    )
    years = {r.start for entry in compiled.calendars for r in entry.year} | {
        r.end for entry in compiled.calendars for r in entry.year
    }
    assert max(years) == 2100
    assert compiled.end == datetime(2101, 1, 1, tzinfo=UTC)
    early = compile_local(spec, datetime(1998, 1, 1, tzinfo=UTC), datetime(2001, 1, 1, tzinfo=UTC))
    assert min(r.start for entry in early.calendars for r in entry.year) == 2000
