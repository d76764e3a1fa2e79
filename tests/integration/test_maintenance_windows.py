"""Maintenance windows on a real Temporal: its matching times skip exactly the window's minutes
(in UTC, and on a zoned schedule's wall clock across both daylight-saving changes), and a
schedule whose fires a window skips expects its next fire after the window, so nothing pages."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
import pytest
from temporalio.client import Client
from temporalio.worker import Worker

from cronwarden.backfill.plan import matching_times
from cronwarden.backfill.window import Window
from cronwarden.monitor.scan import heartbeat_problem
from cronwarden.schedules.apply import apply_definitions
from cronwarden.schedules.model import ScheduleDefinition
from cronwarden.schedules.zones import load_zone, rule_slots
from tests.support.database import fetch
from tests.support.schedules import definition as fast_definition
from tests.support.waiting import wait_for

pytestmark = pytest.mark.integration


def definition(schedule_id: str, **fields: Any) -> ScheduleDefinition:
    """A fast test schedule on the given trigger: fires are late after a grace of 1 s."""
    return fast_definition(schedule_id, every=None, heartbeat_grace="1s", **fields)


def at(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


def inside(wall: datetime, windows: list[tuple[int, int, int]]) -> bool:
    """Whether a wall time lies in one of (weekday with 0 Sunday, from minute, to minute)."""
    minute = wall.hour * 60 + wall.minute
    return any(wall.isoweekday() % 7 == day and low <= minute < high for day, low, high in windows)


async def temporal_times(client: Client, schedule_id: str, start: str, end: str) -> list[datetime]:
    # [start, end): the window's end is inclusive.
    pages = matching_times(client, schedule_id, Window(at(start), at(end) - timedelta(seconds=1)))
    return [datetime.fromtimestamp(s, UTC) async for page in pages for s in page]


async def test_temporal_skips_exactly_the_minutes_of_a_utc_window(
    client: Client, pool: asyncpg.Pool, task_queue: str, schedule_id: str
) -> None:
    defn = definition(
        schedule_id,
        cron="*/15 * * * *",
        maintenance=[
            {"days": "sun", "from": "02:30", "to": "04:15"},
            {"days": "mon-fri", "from": "12:00", "to": "12:20"},
        ],
    )
    await apply_definitions(client, pool, [defn], task_queue=task_queue)
    try:
        times = await temporal_times(
            client, schedule_id, "2030-12-01T00:00:00", "2030-12-09T00:00:00"
        )
    finally:
        await client.get_schedule_handle(schedule_id).delete()
    windows = [(0, 150, 255), *((day, 720, 740) for day in range(1, 6))]
    every = [at("2030-12-01T00:00:00") + timedelta(minutes=15 * n) for n in range(8 * 96)]
    assert times == [t for t in every if not inside(t, windows)]
    # 1 December 2030 is a Sunday: 02:15 fires, 02:30 to 04:00 do not, 04:15 does.
    sunday = [t for t in times if at("2030-12-01T02:00:00") <= t < at("2030-12-01T05:00:00")]
    assert sunday == [
        at("2030-12-01T02:00:00"),
        at("2030-12-01T02:15:00"),
        at("2030-12-01T04:15:00"),
        at("2030-12-01T04:30:00"),
        at("2030-12-01T04:45:00"),
    ]


@pytest.mark.parametrize(
    "days",
    [
        ("2027-03-21T00:00:00", "2027-04-05T00:00:00"),  # spring forward on 28 March
        ("2027-10-24T00:00:00", "2027-11-08T00:00:00"),  # fall back on 31 October
    ],
)
async def test_a_zoned_window_skips_its_wall_clock_minutes_across_a_daylight_saving_change(
    client: Client, pool: asyncpg.Pool, task_queue: str, schedule_id: str, days: tuple[str, str]
) -> None:
    fields: dict[str, Any] = {"cron": "*/30 * * * *", "timezone": "Europe/Berlin"}
    windows = [{"days": "sun", "from": "01:30", "to": "03:15"}, {"from": "09:00", "to": "09:30"}]
    defn = definition(schedule_id, **fields, maintenance=windows)
    await apply_definitions(client, pool, [defn], task_queue=task_queue)
    try:
        times = await temporal_times(client, schedule_id, *days)
    finally:
        await client.get_schedule_handle(schedule_id).delete()
    plain = definition(schedule_id, **fields).local_spec
    assert plain is not None
    berlin = load_zone("Europe/Berlin")
    ruled = [(0, 90, 195), *((day, 540, 570) for day in range(7))]
    fired = [s.utc for s in rule_slots(plain, at(days[0]), at(days[1]))]
    assert times == [t for t in fired if not inside(t.astimezone(berlin), ruled)]
    gone = {
        # 01:30 CET; 02:00 and 02:30 do not exist, the gap's fire is 03:00 CEST: in the window.
        "2027-03-28T00:30:00",
        "2027-03-28T01:00:00",
        # 02:00 and 02:30 read twice (CEST, then CET): every reading is in the window.
        "2027-10-31T00:00:00",
        "2027-10-31T00:30:00",
        "2027-10-31T01:00:00",
        "2027-10-31T01:30:00",
    }
    kept = {"2027-03-28T01:30:00", "2027-10-31T02:30:00", "2027-03-28T00:00:00"}
    present = {t.strftime("%Y-%m-%dT%H:%M:%S") for t in times}
    span = {t for t in gone | kept if days[0] <= t < days[1]}
    assert span
    assert span & present == span & kept


async def test_a_window_moves_the_next_expected_fire_past_it_so_nothing_pages(
    client: Client, pool: asyncpg.Pool, task_queue: str, worker: Worker, schedule_id: str
) -> None:
    now = datetime.now(UTC)
    # The window opens at a minute boundary with at least one fire before it. Fires 30 s
    # apart: a loaded machine starts a fire some seconds late, and a skip schedule would drop
    # the next one if they came closer.
    opens = now.replace(second=0, microsecond=0) + timedelta(minutes=1 if now.second < 20 else 2)
    closes = min(
        opens + timedelta(minutes=2),
        datetime.combine(opens.date(), datetime.min.time(), UTC) + timedelta(days=1),
    )
    to = "24:00" if closes.date() != opens.date() else f"{closes:%H:%M}"
    defn = definition(
        schedule_id,
        cron="0,30 * * * * * *",
        maintenance=[{"from": f"{opens:%H:%M}", "to": to}],
    )
    await apply_definitions(client, pool, [defn], task_queue=task_queue)
    last_before = opens - timedelta(seconds=30)

    async def committed_last_before() -> dict[str, Any] | None:
        rows = await fetch(
            pool, "SELECT * FROM cronwarden.heartbeats WHERE schedule_id = $1", schedule_id
        )
        row = dict(rows[0]) if rows else None
        if row is None or row["last_fire_time"] is None:
            return None
        return row if row["last_fire_time"] >= last_before else None

    try:
        row = await wait_for(
            committed_last_before, timeout=150, what="the last fire before the window to commit"
        )
    finally:
        await client.get_schedule_handle(schedule_id).delete()
    assert row is not None
    assert row["last_fire_time"] == last_before
    # Temporal skips every fire of the window: the next one expected is where it closes.
    assert row["next_expected_at"] == closes
    for moment in (opens, closes - timedelta(seconds=1), closes + row["grace"]):
        assert heartbeat_problem(row, moment) is None
    # Once the window is over and the grace with it, a fire missing from there on pages.
    assert heartbeat_problem(row, closes + row["grace"] + timedelta(seconds=1)) is not None
