"""The horizon of a local-time schedule: `schedules apply` stores where its compiled entries end
(`heartbeats.compiled_until`), and the monitor pages ahead of it, once, from Postgres alone.

Past the horizon Temporal holds no fire of the schedule and the row's deadline goes empty, so
without this page a missed fire would go unpaged. The monitor's rows are staged in SQL, in
database time; the apply tests run on the real Temporal and Postgres."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime

import asyncpg
import pytest
import pytest_asyncio
from pydantic import SecretStr
from temporalio.client import Client

from cronwarden.config import Settings
from cronwarden.embedded import EmbeddedTemporal, free_port
from cronwarden.monitor.process import run_monitor
from cronwarden.schedules import mapping
from cronwarden.schedules.apply import CREATED, UNCHANGED, UPDATED, apply_definitions
from cronwarden.schedules.model import ScheduleDefinition
from cronwarden.store.incidents import HORIZON, HORIZON_LEAD
from tests.support.cleanup import delete_schedules
from tests.support.horizons import stored_horizon
from tests.support.http_probe import http_get_text
from tests.support.monitor import (
    RECOVERED,
    events,
    incidents_of,
    monitoring,
    passes,
)
from tests.support.monitor import receiver as receiver
from tests.support.receiver import Receiver
from tests.support.schedules import yearly_definition
from tests.support.servers import TEST_JOBS
from tests.support.waiting import wait_for

pytestmark = pytest.mark.integration

BERLIN = "Europe/Berlin"


async def stage_zoned(
    pool: asyncpg.Pool,
    schedule_id: str,
    *,
    horizon: str | None,
    next_expected: str | None = "1 hour",
    paused: bool = False,
) -> None:
    """A heartbeat row that ran an hour ago, its next fire `next_expected` from now and its
    compiled entries ending `horizon` from now (Postgres intervals; None: NULL)."""
    async with pool.acquire() as conn:
        await conn.execute(
            """
            INSERT INTO cronwarden.heartbeats
                   (schedule_id, next_expected_at, grace, last_success_at, paused, compiled_until)
            VALUES ($1, now() + $2::text::interval, interval '1 minute',
                    now() - interval '1 hour', $3, now() + $4::text::interval)
            """,
            schedule_id,
            next_expected,
            paused,
            horizon,
        )


# What a re-apply in a later year does to the row: the horizon moves out.
MOVE_HORIZON = (
    "UPDATE cronwarden.heartbeats SET compiled_until = now() + $2::text::interval"
    " WHERE schedule_id = $1"
)


async def test_a_horizon_ten_days_away_pages_once_and_resolves_once_when_it_moves_out(
    database: str, pool: asyncpg.Pool, receiver: Receiver, schedule_id: str
) -> None:
    await stage_zoned(pool, schedule_id, horizon="10 days")
    async with monitoring(database, receiver) as monitor:
        await passes(monitor, 1)
        [trigger] = events(receiver)
        # A second (and third) pass finds the incident open: no second page.
        await passes(monitor, 2)
        assert events(receiver) == [trigger]
        await pool.execute(MOVE_HORIZON, schedule_id, "3 years")
        await passes(monitor, 3)
    assert [b["event"] for b in events(receiver)] == ["trigger", "resolve"]
    assert trigger["kind"] == HORIZON and trigger["schedule_id"] == schedule_id
    assert trigger["dedup_key"] == f"cronwarden:{schedule_id}"
    # The page says what to do, and until when.
    assert "re-apply the schedule file" in trigger["summary"]
    until = trigger["details"]["compiled_until"]
    assert f"local-time entries end at {until}, in 10 day(s)" in trigger["summary"]
    [incident] = await incidents_of(pool, schedule_id)
    assert incident["kind"] == HORIZON and incident["resolution"] == "recovered"


async def test_schedules_sharing_a_horizon_page_once_and_resolve_once_none_is_left(
    database: str, pool: asyncpg.Pool, receiver: Receiver, schedule_id: str
) -> None:
    """The zoned schedules one apply compiled share their horizon: one page names them all,
    and its resolve comes once the last of them is re-applied, not the first."""
    fleet = [f"{schedule_id}-{i}" for i in range(3)]
    for sid in fleet:
        await stage_zoned(pool, sid, horizon="10 days")
    await pool.execute(
        "UPDATE cronwarden.heartbeats"
        " SET compiled_until = date_trunc('day', now()) + interval '10 days'"
    )
    async with monitoring(database, receiver) as monitor:
        await passes(monitor, 2)
        [trigger] = events(receiver)
        assert trigger["kind"] == HORIZON and trigger["schedule_id"] == fleet[0]
        assert [s["schedule_id"] for s in trigger["schedules"]] == fleet
        assert trigger["schedules_total"] == 3
        assert trigger["summary"].startswith("3 schedules: re-apply the schedule file")
        assert trigger["details"]["schedule_ids"] == fleet
        # The schedule whose incident pages is re-applied first: the page stands for the rest.
        await pool.execute(MOVE_HORIZON, fleet[0], "3 years")
        await passes(monitor, 2)
        assert events(receiver) == [trigger]
        for sid in fleet[1:]:
            await pool.execute(MOVE_HORIZON, sid, "3 years")
        await passes(monitor, 2)
    assert [b["event"] for b in events(receiver)] == ["trigger", "resolve"]
    for sid in fleet:
        [incident] = await incidents_of(pool, sid)
        assert incident["resolved_at"] is not None


async def test_a_horizon_already_passed_with_no_fire_ahead_pages(
    database: str, pool: asyncpg.Pool, receiver: Receiver, schedule_id: str
) -> None:
    """The silence this page exists for: Temporal has no fire left, so the row has no deadline
    and no overdue page could ever come."""
    await stage_zoned(pool, schedule_id, horizon="-2 days", next_expected=None)
    async with monitoring(database, receiver) as monitor:
        await passes(monitor, 2)
    [trigger] = events(receiver)
    assert trigger["kind"] == HORIZON
    assert "local-time entries ended at" in trigger["summary"]


@pytest.mark.parametrize(
    ("horizon", "paused"),
    [(None, False), ("40 days", False), ("10 days", True)],
    ids=["utc-schedule", "horizon-beyond-the-lead", "operator-paused"],
)
async def test_no_page_without_a_horizon_within_the_lead(
    database: str,
    pool: asyncpg.Pool,
    receiver: Receiver,
    schedule_id: str,
    horizon: str | None,
    paused: bool,
) -> None:
    await stage_zoned(pool, schedule_id, horizon=horizon, paused=paused)
    async with monitoring(database, receiver) as monitor:
        await passes(monitor, 3)
    assert receiver.requests == []
    assert await incidents_of(pool, schedule_id) == []


async def test_the_lead_is_a_setting(
    database: str, pool: asyncpg.Pool, receiver: Receiver, schedule_id: str
) -> None:
    assert Settings.model_fields["monitor_horizon_lead"].default == HORIZON_LEAD
    await stage_zoned(pool, schedule_id, horizon="40 days")
    async with monitoring(database, receiver, monitor_horizon_lead="60d") as monitor:
        await passes(monitor, 2)
    [trigger] = events(receiver)
    assert trigger["kind"] == HORIZON and trigger["details"]["lead"] == "60d"


async def test_a_missed_fire_pages_before_the_horizon_and_the_horizon_pages_after_it(
    database: str, pool: asyncpg.Pool, receiver: Receiver, schedule_id: str
) -> None:
    """One open incident per schedule: the fire missed now is the more urgent page; once the
    schedule runs again, the horizon (still near) is paged on its own."""
    await stage_zoned(pool, schedule_id, horizon="10 days", next_expected="-1 hour")
    async with monitoring(database, receiver) as monitor:
        await passes(monitor, 2)
        assert [(b["event"], b["kind"]) for b in events(receiver)] == [("trigger", "overdue")]
        async with pool.acquire() as conn:
            await conn.execute(RECOVERED, schedule_id)
        await passes(monitor, 2)
    assert [(b["event"], b["kind"]) for b in events(receiver)] == [
        ("trigger", "overdue"),
        ("resolve", "overdue"),
        ("trigger", HORIZON),
    ]


# --- apply writes the horizon ------------------------------------------------------------------


Apply = Callable[[int, ScheduleDefinition], Awaitable[str]]


@pytest_asyncio.fixture(loop_scope="session")
async def apply_in(
    client: Client, pool: asyncpg.Pool, task_queue: str, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[Apply]:
    """`apply_in(year, definition)`: the schedule applied as in June of `year` (the years a
    zoned schedule is compiled for follow `mapping.clock`); its action. Deleted afterwards."""
    applied: set[str] = set()

    async def apply(year: int, defn: ScheduleDefinition) -> str:
        monkeypatch.setattr(mapping, "clock", lambda: datetime(year, 6, 1, tzinfo=UTC))
        applied.add(defn.id)
        [change] = await apply_definitions(client, pool, [defn], task_queue=task_queue)
        return change.action

    yield apply
    await delete_schedules(client, applied)


async def test_apply_stores_a_zoned_schedules_horizon_and_clears_it_when_it_is_utc_again(
    pool: asyncpg.Pool, schedule_id: str, apply_in: Apply
) -> None:
    zoned = yearly_definition(schedule_id, timezone=BERLIN)
    # Compiled in 2026: the years 2025 to 2028, so the entries end on 1 January 2029.
    assert await apply_in(2026, zoned) == CREATED
    assert await stored_horizon(pool, schedule_id) == datetime(2029, 1, 1, tzinfo=UTC)
    # A row that lacks it (written before rows carried it) gets it from an unchanged re-apply.
    async with pool.acquire() as conn:
        await conn.execute(
            "UPDATE cronwarden.heartbeats SET compiled_until = NULL WHERE schedule_id = $1",
            schedule_id,
        )
    assert await apply_in(2026, zoned) == UNCHANGED
    assert await stored_horizon(pool, schedule_id) == datetime(2029, 1, 1, tzinfo=UTC)
    # A re-apply in a later year compiles the years after: the horizon moves out.
    assert await apply_in(2027, zoned) == UPDATED
    assert await stored_horizon(pool, schedule_id) == datetime(2030, 1, 1, tzinfo=UTC)
    # No longer zoned: nothing to watch.
    assert await apply_in(2027, yearly_definition(schedule_id)) == UPDATED
    assert await stored_horizon(pool, schedule_id) is None


async def test_a_zoned_schedule_ending_before_its_horizon_stores_none(
    pool: asyncpg.Pool, schedule_id: str, apply_in: Apply
) -> None:
    """Nothing of it is left past the horizon: no page to send."""
    ends = yearly_definition(schedule_id, timezone=BERLIN, end_at="2028-06-01T00:00:00Z")
    assert await apply_in(2026, ends) == CREATED
    assert await stored_horizon(pool, schedule_id) is None


async def test_the_status_page_shows_a_horizon_incident(
    temporal_server: EmbeddedTemporal,
    database: str,
    pool: asyncpg.Pool,
    task_queue: str,
    schedule_id: str,
) -> None:
    """The page lists incidents of any kind: a horizon one is shown like the others."""
    await stage_zoned(pool, schedule_id, horizon="10 days")
    port = free_port()
    settings = Settings(
        _env_file=None,  # type: ignore[call-arg]
        temporal_address=temporal_server.address,
        database_url=SecretStr(database),
        task_queue=task_queue,
        jobs=TEST_JOBS,
    )
    stop = asyncio.Event()
    task = asyncio.create_task(
        run_monitor(
            settings,
            interval=0.5,
            metrics_port=port,
            metrics_host="127.0.0.1",
            stop=stop,
            handle_signals=False,
        )
    )
    try:

        async def opened() -> bool:
            return bool(await incidents_of(pool, schedule_id))

        await wait_for(opened, timeout=30, what="the horizon incident")
        overview_status, overview = await http_get_text(port, "/")
        status, detail = await http_get_text(port, f"/schedules/{schedule_id}")
    finally:
        stop.set()
        await asyncio.wait_for(task, timeout=30)
    assert (overview_status, status) == (200, 200)
    for html in (overview, detail):
        assert f"{HORIZON} since" in html and "re-apply the schedule file" in html
