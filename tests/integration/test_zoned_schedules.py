"""Local-time schedules on the real servers: Temporal evaluates the compiled UTC entries exactly as
the daylight-saving rule says, runs started with both readings of a repeated wall time apply it
once, a backfill expects exactly the rule's slots (whatever years the live entries cover), and a
re-apply in a new year pushes the entries for the years ahead.

The rule's slots come from `rule_slots`; New York's are also written out as UTC instants worked
out by hand from the offsets (EST is UTC-5, EDT UTC-4), so the test does not only compare the
compiler with itself.
"""

from __future__ import annotations

import uuid
from datetime import UTC, date, datetime, time, timedelta
from pathlib import Path

import asyncpg
import pytest
from temporalio.client import Client
from temporalio.worker import Worker

from cronwarden.activities.contract import ALREADY_DONE, NOT_IN_RULE, OVERLAP_LOCKED, logical_key
from cronwarden.activities.jobs import REGISTRY
from cronwarden.backfill.plan import effective_history, load_managed, matching_times, plan
from cronwarden.backfill.replay import (
    FAILED,
    REPLAYED,
    Definitions,
    Summary,
    replay_all,
    replay_one,
)
from cronwarden.backfill.window import Window
from cronwarden.schedules import mapping
from cronwarden.schedules.apply import CREATED, UNCHANGED, UPDATED, apply_definitions
from cronwarden.schedules.model import ScheduleDefinition, load_schedule_file
from cronwarden.schedules.preview import scratch_schedule
from cronwarden.schedules.zones import LocalSpec, load_zone, rule_slots, transitions
from tests.support.database import committed_times
from tests.support.outage import apply_paused
from tests.support.runs import effects
from tests.support.schedules import write_schedules_file
from tests.support.servers import in_process_worker

pytestmark = pytest.mark.integration

NEW_YORK = "America/New_York"
ZONES = (NEW_YORK, "Europe/Berlin", "Australia/Lord_Howe")
CRONS = ("30 1 * * *", "30 2 * * *", "0,30 * * * *")
LOCK_WAIT = 20.0


def at(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def half_hours(first: str, last: str) -> list[datetime]:
    """Every 30 minutes from `first` to `last`, both included (UTC)."""
    start, end = at(first), at(last)
    count = (end - start) // timedelta(minutes=30)
    return [start + timedelta(minutes=30 * i) for i in range(count + 1)]


# New York's 2027 transitions: 14 March, 02:00 EST becomes 03:00 EDT (07:00Z); 7 November,
# 02:00 EDT becomes 01:00 EST (06:00Z), so 01:00-01:59 happens twice.
NEW_YORK_2027: dict[tuple[str, date], list[datetime]] = {
    # 01:30 EST.
    ("30 1 * * *", date(2027, 3, 14)): [at("2027-03-14T06:30:00Z")],
    # 02:30 does not exist: fired at the end of the gap, 03:00 EDT.
    ("30 2 * * *", date(2027, 3, 14)): [at("2027-03-14T07:00:00Z")],
    # 00:00-01:30 EST, then 02:00 and 02:30 (in the gap) are one fire with 03:00 EDT, then
    # every half hour of EDT to 23:30 EDT: a 23-hour day, 46 fires.
    ("0,30 * * * *", date(2027, 3, 14)): half_hours("2027-03-14T05:00:00Z", "2027-03-14T06:30:00Z")
    + half_hours("2027-03-14T07:00:00Z", "2027-03-15T03:30:00Z"),
    # 01:30 EDT, the first reading only (the hour is a fixed one).
    ("30 1 * * *", date(2027, 11, 7)): [at("2027-11-07T05:30:00Z")],
    # 02:30 EST.
    ("30 2 * * *", date(2027, 11, 7)): [at("2027-11-07T07:30:00Z")],
    # The hour is `*`: each reading of 01:00 and 01:30 fires; a 25-hour day, 50 fires.
    ("0,30 * * * *", date(2027, 11, 7)): half_hours("2027-11-07T04:00:00Z", "2027-11-08T04:30:00Z"),
}


def local_day(zone: str, day: date) -> tuple[datetime, datetime]:
    """The zone's calendar day as UTC instants [start, end)."""
    tz = load_zone(zone)
    start = datetime.combine(day, time(), tzinfo=tz).astimezone(UTC)
    end = datetime.combine(day + timedelta(days=1), time(), tzinfo=tz).astimezone(UTC)
    return start, end


def transition_days(zone: str, year: int) -> list[date]:
    """The local days on which the zone's offset changes in `year`."""
    tz = load_zone(zone)
    moves = transitions(
        tz,
        datetime(year, 1, 1, tzinfo=UTC) - timedelta(days=1),
        datetime(year + 1, 1, 1, tzinfo=UTC),
    )
    return sorted({m.instant.astimezone(tz).date() for m in moves if m.instant.year == year})


async def matching(
    client: Client, schedule_id: str, start: datetime, end: datetime
) -> list[datetime]:
    """Temporal's matching times of the schedule in [start, end)."""
    window = Window(start, end - timedelta(seconds=1))
    found: list[datetime] = []
    async for page in matching_times(client, schedule_id, window):
        found.extend(datetime.fromtimestamp(s, UTC) for s in page)
    return found


def expected(spec: LocalSpec, start: datetime, end: datetime) -> list[datetime]:
    return [slot.utc for slot in rule_slots(spec, start, end)]


def schedule_file(tmp_path: Path, entries: list[dict[str, str]]) -> list[ScheduleDefinition]:
    """A schedule file of these entries (job `probe`), loaded as `schedules apply` loads one."""
    lines = ["schedules:"]
    for entry in entries:
        lines.append(f"  - id: {entry['id']}")
        lines.append("    job: probe")
        # Other tests' schedules on the shared server may run the same cron in the same zone.
        lines.append("    allow_duplicate: true")
        for name, value in entry.items():
            if name != "id":
                lines.append(f"    {name}: '{value}'")
    return load_schedule_file(write_schedules_file(tmp_path, "\n".join(lines) + "\n"), REGISTRY)


async def delete_all(client: Client, ids: list[str]) -> None:
    for schedule_id in ids:
        await client.get_schedule_handle(schedule_id).delete()


def prefix() -> str:
    return f"tz-{uuid.uuid4().hex[:8]}"


# --- 1. Temporal's evaluation of the compiled entries ----------------------------------------


async def test_temporal_fires_the_rule_on_every_2027_transition_day(
    tmp_path: Path, client: Client, pool: asyncpg.Pool, task_queue: str
) -> None:
    base = prefix()
    entries = {
        f"{base}-{z}-{c}": (zone, cron)
        for z, zone in enumerate(ZONES)
        for c, cron in enumerate(CRONS)
    }
    defs = schedule_file(
        tmp_path,
        [{"id": sid, "cron": cron, "timezone": zone} for sid, (zone, cron) in entries.items()],
    )
    changes = await apply_definitions(client, pool, defs, task_queue=task_queue)
    # The days' lengths: 23 hours of half-hour fires in March, 25 in November.
    assert len(NEW_YORK_2027[("0,30 * * * *", date(2027, 3, 14))]) == 46
    assert len(NEW_YORK_2027[("0,30 * * * *", date(2027, 11, 7))]) == 50
    try:
        assert [c.action for c in changes] == [CREATED] * len(entries)
        checked_new_york = set()
        for defn in defs:
            zone, cron = entries[defn.id]
            spec = defn.local_spec
            assert spec is not None
            days = transition_days(zone, 2027)
            assert len(days) == 2, (zone, days)
            for day in days:
                start, end = local_day(zone, day)
                fired = await matching(client, defn.id, start, end)
                assert fired == expected(spec, start, end), (zone, cron, day)
                if zone == NEW_YORK:
                    assert fired == NEW_YORK_2027[(cron, day)], (cron, day)
                    checked_new_york.add((cron, day))
            # And the whole year: the entries between transitions and across the year's ends.
            year = (at("2027-01-01T00:00:00Z"), at("2028-01-01T00:00:00Z"))
            assert await matching(client, defn.id, *year) == expected(spec, *year), (zone, cron)
        assert checked_new_york == set(NEW_YORK_2027)
    finally:
        await delete_all(client, list(entries))


async def test_a_zone_whose_rules_changed_is_evaluated_by_the_rules_of_each_year(
    client: Client, task_queue: str, schedule_id: str
) -> None:
    # Mexico City kept summer time until 30 October 2022 and abolished it from 2023: CST
    # (UTC-6) all year since. A copy compiled for 2022-2023, as a backfill of then asks.
    window = (at("2022-01-01T00:00:00Z"), at("2023-12-31T23:59:59Z"))
    literal = {
        # 3 April 2022: 02:00 CST became 03:00 CDT (08:00Z).
        ("30 1 * * *", date(2022, 4, 3)): [at("2022-04-03T07:30:00Z")],
        ("30 2 * * *", date(2022, 4, 3)): [at("2022-04-03T08:00:00Z")],
        # 30 October 2022: 02:00 CDT became 01:00 CST (07:00Z): 01:30 CDT first, 02:30 CST.
        ("30 1 * * *", date(2022, 10, 30)): [at("2022-10-30T06:30:00Z")],
        ("30 2 * * *", date(2022, 10, 30)): [at("2022-10-30T08:30:00Z")],
        # The same Sundays of 2023 are ordinary CST days.
        ("30 1 * * *", date(2023, 4, 2)): [at("2023-04-02T07:30:00Z")],
        ("30 2 * * *", date(2023, 4, 2)): [at("2023-04-02T08:30:00Z")],
        ("30 1 * * *", date(2023, 10, 29)): [at("2023-10-29T07:30:00Z")],
        ("30 2 * * *", date(2023, 10, 29)): [at("2023-10-29T08:30:00Z")],
    }
    assert transition_days("America/Mexico_City", 2023) == []
    for cron in ("30 1 * * *", "30 2 * * *", "0,30 * * * *"):
        defn = ScheduleDefinition.model_validate(
            {"id": schedule_id, "job": "probe", "cron": cron, "timezone": "America/Mexico_City"}
        )
        spec = defn.local_spec
        assert spec is not None
        async with scratch_schedule(client, defn, task_queue=task_queue, window=window) as sid:
            for day in (date(2022, 4, 3), date(2022, 10, 30), date(2023, 4, 2), date(2023, 10, 29)):
                start, end = local_day("America/Mexico_City", day)
                fired = await matching(client, sid, start, end)
                assert fired == expected(spec, start, end), (cron, day)
                if (cron, day) in literal:
                    assert fired == literal[(cron, day)], (cron, day)
            if cron != "0,30 * * * *":
                # Both whole years: one fire a day, each by the offset of its own date.
                whole = await matching(client, sid, window[0], at("2024-01-01T00:00:00Z"))
                assert len(whole) == 365 * 2
                assert whole == expected(spec, window[0], at("2024-01-01T00:00:00Z"))


# --- 2. The repeat rule through real runs ------------------------------------------------------

FIRST_READING = at("2027-11-07T05:30:00Z")  # 01:30 EDT
SECOND_READING = at("2027-11-07T06:30:00Z")  # 01:30 EST


async def effects_by_reading(pool: asyncpg.Pool, schedule_id: str) -> list[int]:
    """How many times the probe applied each reading's key (test_effects has no unique
    constraint: a second application is a second row)."""
    return [await effects(pool, logical_key(schedule_id, t)) for t in READINGS]


READINGS = (FIRST_READING, SECOND_READING)


@pytest.mark.parametrize(
    ("dst_repeat", "second_outcome", "applied"),
    [
        # The rule (the hour is a fixed one): 01:30 once, at its first reading.
        (None, NOT_IN_RULE, [FIRST_READING]),
        ("each", REPLAYED, [FIRST_READING, SECOND_READING]),
    ],
)
async def test_runs_started_with_both_readings_of_a_repeated_wall_time_apply_the_rule(
    client: Client,
    pool: asyncpg.Pool,
    task_queue: str,
    schedule_id: str,
    worker: Worker,
    dst_repeat: str | None,
    second_outcome: str,
    applied: list[datetime],
) -> None:
    fields = {"id": schedule_id, "job": "probe", "cron": "30 1 * * *", "timezone": NEW_YORK}
    if dst_repeat is not None:
        fields["dst_repeat"] = dst_repeat
    defn = ScheduleDefinition.model_validate(fields)
    handle, _ = await apply_paused(client, pool, task_queue, defn)
    try:
        managed = await load_managed(client, schedule_id)
        # As a backfill starts them (fire_time set, replay), the second reading first: nothing
        # is recorded yet, so only the rule can refuse it.
        second = await replay_one(client, managed, SECOND_READING, lock_wait=LOCK_WAIT)
        first = await replay_one(client, managed, FIRST_READING, lock_wait=LOCK_WAIT)
    finally:
        await handle.delete()
    assert (first.outcome, second.outcome) == (REPLAYED, second_outcome), (first, second)
    if second_outcome == NOT_IN_RULE:
        # The refusal names the reading the rule fires.
        assert second.detail is not None and "(2027-11-07T05:30:00Z)" in second.detail
    assert await committed_times(pool, schedule_id) == applied
    assert await effects_by_reading(pool, schedule_id) == [int(t in applied) for t in READINGS]


# --- 3. Backfill of a zoned schedule -----------------------------------------------------------

# Both of New York's 2027 transitions, a day on each side.
SPRING = Window(at("2027-03-13T00:00:00Z"), at("2027-03-16T00:00:00Z"))
AUTUMN = Window(at("2027-11-06T00:00:00Z"), at("2027-11-09T00:00:00Z"))


def backfilled(base: str) -> list[ScheduleDefinition]:
    return [
        ScheduleDefinition.model_validate(
            {"id": f"{base}-{name}", "job": "probe", "cron": cron, "timezone": NEW_YORK, **extra}
        )
        for name, cron, extra in (
            # 02:30 is in the March gap: under skip it is not due at all that day.
            ("skip", "30 2 * * *", {"dst_gap": "skip"}),
            # 01:30 happens twice in November: due once, at 01:30 EDT.
            ("once", "30 1 * * *", {}),
            # Every half hour, but each repeated reading due only once.
            ("half", "0,30 * * * *", {"dst_repeat": "once"}),
        )
    ]


def slots_of(defn: ScheduleDefinition, window: Window) -> list[datetime]:
    spec = defn.local_spec
    assert spec is not None
    return expected(spec, window.start, window.end + timedelta(seconds=1))


async def apply_all_paused(
    client: Client, pool: asyncpg.Pool, task_queue: str, defs: list[ScheduleDefinition]
) -> None:
    # No worker on the queue and every schedule paused: nothing of them runs (an outage).
    for defn in defs:
        await apply_paused(client, pool, task_queue, defn)


async def plan_is_the_rule(
    client: Client,
    pool: asyncpg.Pool,
    defs: list[ScheduleDefinition],
    *,
    judged_by: str = "history",
) -> dict[str, list[datetime]]:
    """Plan both windows of each definition; every missing key is a slot of the rule and every
    slot is missing. The missing times per schedule."""
    missing: dict[str, list[datetime]] = {}
    for defn in defs:
        managed = await load_managed(client, defn.id)
        for window in (SPRING, AUTUMN):
            planned = await plan(client, pool, managed, window)
            slots = slots_of(defn, window)
            assert list(planned.missing_times()) == slots, (defn.id, window)
            assert (planned.expected, planned.done) == (len(slots), 0)
            assert [j.source for j in planned.judged] == [judged_by]
            missing.setdefault(defn.id, []).extend(slots)
    return missing


def assert_the_rules_slots(
    defs: list[ScheduleDefinition], missing: dict[str, list[datetime]]
) -> None:
    """What the rule says of these days, written out (New York: EST UTC-5, EDT UTC-4)."""
    skip, once, half = (missing[d.id] for d in defs)
    march_14, november_7 = date(2027, 3, 14), date(2027, 11, 7)
    # 02:30 on 14 March does not exist and `skip` drops it: nothing that day.
    assert not [t for t in skip if t.date() == march_14]
    assert [t for t in skip if t.date() == november_7] == [at("2027-11-07T07:30:00Z")]
    assert [t for t in once if t.date() == november_7] == [at("2027-11-07T05:30:00Z")]
    # 01:00 and 01:30 EDT (05:00Z, 05:30Z), never their EST readings (06:00Z, 06:30Z).
    assert [t for t in half if at("2027-11-07T04:30:00Z") < t < at("2027-11-07T07:30:00Z")] == [
        at("2027-11-07T05:00:00Z"),
        at("2027-11-07T05:30:00Z"),
        at("2027-11-07T07:00:00Z"),
    ]


async def backfill_run(
    client: Client,
    pool: asyncpg.Pool,
    schedule_id: str,
    window: Window,
    times: list[datetime] | None = None,
) -> Summary:
    """`backfill run` as the command runs it: plan the window, then replay `times` (the plan's
    missing keys when not given), each with the definition that judged its part."""
    managed = await load_managed(client, schedule_id)
    planned = await plan(client, pool, managed, window)
    async with pool.acquire() as conn:
        history = await effective_history(client, conn, schedule_id, managed.description)
    return await replay_all(
        client,
        managed,
        list(planned.missing_times()) if times is None else times,
        concurrency=4,
        lock_wait=LOCK_WAIT,
        definitions=Definitions(managed, planned.judged, history),
    )


async def replay_planned(
    client: Client, pool: asyncpg.Pool, defn: ScheduleDefinition, window: Window
) -> None:
    """The window's missing keys (the rule's slots) replayed once each; nothing is missing
    after."""
    slots = slots_of(defn, window)
    summary = await backfill_run(client, pool, defn.id, window)
    assert summary.counts[REPLAYED] == len(slots), summary
    assert not summary.skipped and not summary.failures, summary
    assert await committed_times(pool, defn.id) == slots
    again = await plan(client, pool, await load_managed(client, defn.id), window)
    assert (again.done, len(again.missing)) == (len(slots), 0)


async def test_a_backfill_expects_exactly_the_rules_slots_and_replays_them_once(
    client: Client, pool: asyncpg.Pool, task_queue: str
) -> None:
    defs = backfilled(prefix())
    await apply_all_paused(client, pool, task_queue, defs)
    try:
        missing = await plan_is_the_rule(client, pool, defs)
        assert_the_rules_slots(defs, missing)
        once = defs[1].id
        async with in_process_worker(client, pool, task_queue):
            await replay_planned(client, pool, defs[1], AUTUMN)
            # The second reading named by hand runs with the recorded definition's zone: the
            # guard refuses it, and the summary counts it as its own outcome.
            summary = await backfill_run(client, pool, once, AUTUMN, [SECOND_READING])
        assert summary.counts == {
            REPLAYED: 0,
            ALREADY_DONE: 0,
            OVERLAP_LOCKED: 0,
            FAILED: 0,
            NOT_IN_RULE: 1,
        }
        assert not summary.failures
        # Each slot applied once; the refused second reading not at all.
        assert await committed_times(pool, once) == slots_of(defs[1], AUTUMN)
        for t in [*slots_of(defs[1], AUTUMN), SECOND_READING]:
            assert await effects(pool, logical_key(once, t)) == int(t != SECOND_READING)
    finally:
        await delete_all(client, [d.id for d in defs])


async def test_a_window_years_before_the_live_entries_is_judged_by_the_rule(
    client: Client, pool: asyncpg.Pool, task_queue: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Applied in mid-2030: the live entries cover 2029-2032 only, and 2027 is three years back.
    monkeypatch.setattr(mapping, "clock", lambda: at("2030-06-01T00:00:00Z"))
    defs = backfilled(prefix())
    await apply_all_paused(client, pool, task_queue, defs)
    try:
        await assert_nothing_live_in_2027(client, defs)
        missing = await plan_is_the_rule(client, pool, defs)
        assert_the_rules_slots(defs, missing)
        async with in_process_worker(client, pool, task_queue):
            await replay_planned(client, pool, defs[1], AUTUMN)
    finally:
        await delete_all(client, [d.id for d in defs])


# --- 4. Apply refreshes the compiled years ---------------------------------------------------


async def test_the_first_apply_of_a_new_year_pushes_the_years_ahead_and_then_nothing(
    tmp_path: Path,
    client: Client,
    pool: asyncpg.Pool,
    task_queue: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    base = prefix()
    zoned, utc = f"{base}-zoned", f"{base}-utc"
    defs = schedule_file(
        tmp_path,
        [
            {"id": zoned, "cron": "30 1 * * *", "timezone": NEW_YORK},
            {"id": utc, "cron": "0 3 * * *"},
        ],
    )
    spec = defs[0].local_spec
    assert spec is not None
    year_2029 = (at("2029-01-01T00:00:00Z"), at("2030-01-01T00:00:00Z"))

    async def apply_on(day: str) -> dict[str, str]:
        monkeypatch.setattr(mapping, "clock", lambda: at(day))
        changes = await apply_definitions(client, pool, defs, task_queue=task_queue)
        return {c.schedule_id: c.action for c in changes}

    try:
        assert await apply_on("2026-06-01T00:00:00Z") == {zoned: CREATED, utc: CREATED}
        # Compiled for 2025-2028: nothing in 2029 yet.
        assert await matching(client, zoned, *year_2029) == []
        assert await last_entry_year(client, zoned) == 2028

        assert await apply_on("2027-01-02T00:00:00Z") == {zoned: UPDATED, utc: UNCHANGED}
        assert await last_entry_year(client, zoned) == 2029
        fired = await matching(client, zoned, *year_2029)
        assert len(fired) == 365 and fired == expected(spec, *year_2029)

        assert await apply_on("2027-01-02T18:00:00Z") == {zoned: UNCHANGED, utc: UNCHANGED}
    finally:
        await delete_all(client, [zoned, utc])


async def last_entry_year(client: Client, schedule_id: str) -> int:
    """The last year any of the live schedule's calendar entries names."""
    spec = (await client.get_schedule_handle(schedule_id).describe()).schedule.spec
    return max(r.end for entry in spec.calendars for r in entry.year)


async def assert_nothing_live_in_2027(client: Client, defs: list[ScheduleDefinition]) -> None:
    for defn in defs:
        # The live schedule itself fires nothing in 2027: asking it would plan nothing.
        assert await matching(client, defn.id, SPRING.start, AUTUMN.end) == []


async def test_a_zoned_schedule_without_recorded_history_is_judged_by_its_memo_in_any_year(
    client: Client, pool: asyncpg.Pool, task_queue: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Applied without Postgres (the dev stack's way): no history row, only the live schedule,
    # whose entries cover 2029-2032. Its memo holds the definition, which the rule compiles for
    # 2027.
    monkeypatch.setattr(mapping, "clock", lambda: at("2030-06-01T00:00:00Z"))
    defs = backfilled(prefix())
    await apply_definitions(client, None, defs, task_queue=task_queue)
    try:
        await assert_nothing_live_in_2027(client, defs)
        missing = await plan_is_the_rule(client, pool, defs, judged_by="live")
        assert_the_rules_slots(defs, missing)
    finally:
        await delete_all(client, [d.id for d in defs])
