"""What the schedule-level fault scenarios (6-9) share: a schedule's fires, frozen and counted
into one `FaultRow` (expected, committed, applied, listed by `backfill plan`), and a monitor
subprocess paging a local receiver."""

from __future__ import annotations

import asyncio
import signal
from collections.abc import AsyncIterator
from dataclasses import dataclass, replace
from datetime import datetime

import asyncpg
import pytest_asyncio
from temporalio.client import ScheduleHandle

from activities.contract import logical_key
from tests.faults.counts import count_row
from tests.faults.tally import FaultRow, outbox_keys
from tests.integration.conftest import wait_for
from tests.integration.test_backfill import cli_json, every_two_seconds, iso
from tests.integration.test_monitor import env_for, settings_for, start_monitor
from tests.receiver import Receiver


async def committed_fires(pool: asyncpg.Pool, schedule_id: str) -> list[asyncpg.Record]:
    async with pool.acquire() as conn:
        rows: list[asyncpg.Record] = await conn.fetch(
            "SELECT logical_key, fire_time, committed_at, worker FROM cronwarden.outbox"
            " WHERE schedule_id = $1 ORDER BY fire_time",
            schedule_id,
        )
    return rows


async def fires_after(pool: asyncpg.Pool, schedule_id: str, moment: datetime, n: int) -> bool:
    """At least `n` fires after `moment` committed."""
    rows = await committed_fires(pool, schedule_id)
    return len([r for r in rows if r["fire_time"] > moment]) >= n


async def listed_by_plan(
    env: dict[str, str], schedule_id: str, start: datetime, end: datetime
) -> set[str]:
    """The keys `backfill plan` reports missing in the window (through the CLI, as an operator
    would run it)."""
    window = ["--start", iso(start), "--end", iso(end)]
    plan = await cli_json(env, "backfill", "plan", schedule_id, *window)
    return set(plan["missing_keys"])


@dataclass(frozen=True)
class Fires:
    """A paused `every: 2s` schedule's fires, from its creation to its last commit."""

    schedule_id: str
    created_at: datetime
    rows: list[asyncpg.Record]
    """Its outbox records, oldest first."""
    expected: set[datetime]
    listed: set[str]
    """What `backfill plan` lists as missing, asked once the schedule was paused."""

    @property
    def end(self) -> datetime:
        last: datetime = self.rows[-1]["fire_time"]
        return last

    @property
    def expected_keys(self) -> set[str]:
        return {logical_key(self.schedule_id, t) for t in self.expected}

    @property
    def uncommitted(self) -> set[str]:
        return self.expected_keys - {r["logical_key"] for r in self.rows}


async def freeze(
    handle: ScheduleHandle, pool: asyncpg.Pool, env: dict[str, str], created_at: datetime
) -> Fires:
    """Pause the schedule and let its last run finish, so the window stops moving, then take
    stock of it. (A run still in flight would commit a key after the count.)"""
    await handle.pause(note="test: freeze the window")

    async def settled() -> bool:
        return not (await handle.describe()).info.running_actions

    await wait_for(settled, timeout=60, what="the schedule's last run to finish")
    rows = await committed_fires(pool, handle.id)
    end = max(r["fire_time"] for r in rows)
    listed = await listed_by_plan(env, handle.id, created_at, end)
    return Fires(handle.id, created_at, rows, every_two_seconds(created_at, end), listed)


async def fire_row(
    pool: asyncpg.Pool,
    fires: Fires,
    *,
    scenario: str,
    pages: int | None = None,
    checks_failed: list[str] | None = None,
) -> FaultRow:
    """One row of the table for a schedule. Every committed key that is not an expected fire
    (a key derived from the wrong clock, say) is a failed check of its own."""
    checks = list(checks_failed or [])
    async with pool.acquire() as conn:
        extra = sorted(await outbox_keys(conn, fires.schedule_id) - fires.expected_keys)
    if extra:
        checks.append(f"{len(extra)} committed keys are no expected fire: {extra[:3]}")
    row = await count_row(
        pool,
        scenario=scenario,
        schedule_id=fires.schedule_id,
        expected=fires.expected_keys,
        listed=fires.listed,
        checks=checks,
    )
    return replace(row, pages=pages)


@dataclass(frozen=True)
class Watch:
    """A `cronwarden monitor` subprocess (real clock, a pass every 0.2 s) and the receiver it
    pages."""

    proc: asyncio.subprocess.Process
    receiver: Receiver

    async def stop(self) -> int:
        """SIGTERM; its exit code."""
        if self.proc.returncode is None:
            self.proc.send_signal(signal.SIGTERM)
        return await asyncio.wait_for(self.proc.wait(), timeout=30)


@pytest_asyncio.fixture(loop_scope="session")
async def watch(
    database: str,
    receiver: Receiver,
) -> AsyncIterator[Watch]:
    watching = Watch(await start_monitor(env_for(settings_for(database, receiver))), receiver)
    try:
        yield watching
    finally:
        await watching.stop()


async def monitor_passes(pool: asyncpg.Pool) -> int:
    """Passes completed by every monitor over this database so far."""
    async with pool.acquire() as conn:
        passes: int = await conn.fetchval(
            "SELECT coalesce(sum(passes), 0)::int FROM cronwarden.monitor_state"
        )
    return passes
