"""Local-time schedules under attack: cases where what is pushed, recorded or checked departs
from the stated rule. Each failed before its fix."""

from __future__ import annotations

import importlib.resources
import zoneinfo
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from temporalio.client import ScheduleCalendarSpec

from cronwarden.activities.contract import GuardedRunInput
from cronwarden.activities.guard import _not_in_rule
from cronwarden.errors import ScheduleFileError
from cronwarden.monitor import notify
from cronwarden.schedules import mapping, zones
from cronwarden.schedules.apply import horizon
from cronwarden.schedules.mapping import DEFINITION_MEMO, DIGEST_MEMO, ZONE_COMPILED
from cronwarden.schedules.model import ScheduleDefinition, parse_schedule_text
from cronwarden.schedules.zones import (
    compile_local,
    compiled_instants,
    compiled_until,
    load_zone,
)
from cronwarden.store import notifications
from cronwarden.store import zones as zone_store
from tests.support.horizons import decide as decide_pass
from tests.support.horizons import row as horizon_row
from tests.support.registries import noop_registry as _registry

NEW_YORK = "America/New_York"


def _ticking(instants: list[datetime]) -> Iterator[datetime]:
    """A clock that moves on at each call and then stays at the last instant."""
    yield from instants
    while True:
        yield instants[-1]


def _last_compiled_year(spec_calendars: list[ScheduleCalendarSpec]) -> int:
    # Every compiled entry is dated: it names the year(s) it covers.
    years = [r.end or r.start for calendar in spec_calendars for r in calendar.year]
    assert years, "a zoned schedule's compiled entries are dated"
    return max(years)


def test_an_apply_straddling_new_year_pushes_entries_its_memo_names(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    defn = ScheduleDefinition.model_validate(
        {"id": "a", "job": "noop", "cron": "30 1 * * *", "timezone": NEW_YORK}
    )
    ticks = _ticking(
        [datetime(2026, 12, 31, 23, 59, 59, tzinfo=UTC), datetime(2027, 1, 1, tzinfo=UTC)]
    )
    monkeypatch.setattr(mapping, "clock", lambda: next(ticks))
    schedule = mapping.to_temporal(defn, task_queue="q")
    memo = schedule.action.memo  # type: ignore[attr-defined]
    label = memo[DEFINITION_MEMO][ZONE_COMPILED]
    until = compiled_until(label)
    assert until is not None
    # What the memo claims was pushed is what was pushed: its last year is the entries' last.
    assert _last_compiled_year(list(schedule.spec.calendars)) == until.year - 1
    # And the run input carries the digest the memo records (the worker's caches key on it).
    assert schedule.action.args[0].definition_digest == memo[DIGEST_MEMO]  # type: ignore[attr-defined]


def test_two_names_of_one_zone_are_duplicates() -> None:
    text = (
        "schedules:\n"
        "  - {id: a, job: noop, cron: '0 9 * * *', timezone: US/Eastern}\n"
        "  - {id: b, job: noop, cron: '0 9 * * *', timezone: America/New_York}\n"
    )
    with pytest.raises(ScheduleFileError, match="duplicate each other"):
        parse_schedule_text(text, _registry(), now=datetime(2027, 6, 1, tzinfo=UTC))


def test_status_tz_reads_the_pinned_zone_database(tmp_path: Path) -> None:
    from cronwarden.cli.schedules import _zone

    # A host whose America/New_York is another zone's data (a stale or foreign zoneinfo).
    host = tmp_path / "America"
    host.mkdir()
    tokyo = importlib.resources.files("tzdata.zoneinfo").joinpath("Asia", "Tokyo")
    (host / "New_York").write_bytes(tokyo.read_bytes())
    winter = datetime(2027, 1, 15, 12, tzinfo=UTC)
    zoneinfo.reset_tzpath(to=[str(tmp_path)])
    zoneinfo.ZoneInfo.clear_cache()
    try:
        shown = winter.astimezone(_zone(NEW_YORK))
    finally:
        zoneinfo.reset_tzpath()
        zoneinfo.ZoneInfo.clear_cache()
    assert shown.utcoffset() == load_zone(NEW_YORK).utcoffset(winter)


def test_a_schedule_ending_in_the_last_compiled_day_has_no_horizon(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(mapping, "clock", lambda: datetime(2026, 6, 1, tzinfo=UTC))
    # Compiled in 2026: the entries end at 2029-01-01; the schedule ends 12 hours before.
    defn = ScheduleDefinition.model_validate(
        {
            "id": "a",
            "job": "noop",
            "cron": "0 9 * * *",
            "timezone": NEW_YORK,
            "end_at": "2028-12-31T12:00:00Z",
        }
    )
    assert horizon(defn, task_queue="q") is None


def test_the_guard_does_not_refuse_a_compiled_fire_by_other_zone_data(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Mexico City has had no daylight saving since 2022: its 01:30 is 07:30Z every day,
    # 2027-11-07 included, and that is what apply compiles and Temporal fires.
    defn = ScheduleDefinition.model_validate(
        {"id": "a", "job": "noop", "cron": "30 1 * * *", "timezone": "America/Mexico_City"}
    )
    fire = datetime(2027, 11, 7, 7, 30, tzinfo=UTC)
    schedule = mapping.to_temporal(defn, task_queue="q")
    assert fire in compiled_instants(
        compile_local(defn.local_spec, fire, fire + timedelta(seconds=1)),  # type: ignore[arg-type]
        fire,
        fire + timedelta(seconds=1),
    )
    inp = GuardedRunInput(
        schedule_id="a",
        logical_key=f"a@{fire:%Y-%m-%dT%H:%M:%SZ}",
        fire_time=fire.isoformat(),
        job="noop",
        args={},
        args_digest="",
        lock_name="schedule:a",
        lock_ttl_seconds=60,
        heartbeat_grace_seconds=60,
        zone=schedule.action.args[0].zone,  # type: ignore[attr-defined]
    )
    # A worker whose zone data still has the old rule (a fall back on the first Sunday of
    # November, as Chicago's): there 07:30Z on 2027-11-07 reads as the second 01:30.
    chicago = load_zone("America/Chicago")
    monkeypatch.setattr(zones, "load_zone", lambda name: chicago)
    monkeypatch.setattr(zones, "ZONE_DB_VERSION", "2022a")
    assert _not_in_rule(inp) is None


def test_a_fleet_sharing_one_horizon_pages_once() -> None:
    fleet = [horizon_row(f"zoned-{i:02}") for i in range(40)]
    decided = decide_pass(horizons=fleet, watched=40)
    pages = len(decided.open) + (1 if decided.system else 0)
    assert pages == 1


async def test_a_zone_the_monitor_does_not_know_holds_back_no_page(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async def recorded(conn: object, ids: list[str]) -> dict[str, str]:
        # A zone added to tzdata after the monitor's release (as America/Ciudad_Juarez was).
        return {"zoned": "America/Added_Later"}

    monkeypatch.setattr(zone_store, "latest_zones", recorded)
    expected = "2027-03-14T07:00:00Z"

    def claimed(number: int, sid: str) -> notifications.Claimed:
        message = {
            "schedule_id": sid,
            "summary": f"schedule {sid}: missed its fire at {expected}",
            "details": {"next_expected_at": expected},
        }
        return notifications.Claimed(number, number, "trigger", "webhook", message, 1)

    rows = [claimed(1, "zoned"), claimed(2, "utc")]
    # Both pages go out, the zoned one in UTC only.
    assert await notify._with_local_times(None, rows) == rows
