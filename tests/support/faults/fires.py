"""What the schedule-level fault scenarios (6-9) share: a schedule's fires, frozen and counted
into one `FaultRow` (expected, committed, applied, listed by `backfill plan`), and a monitor
subprocess paging a local receiver."""

from __future__ import annotations

import asyncio
import signal
from collections.abc import AsyncIterator
from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path

import asyncpg
import pytest_asyncio
from temporalio.client import ScheduleDescription, ScheduleHandle

from cronwarden.activities.contract import logical_key
from tests.support.cli import cli_json, iso
from tests.support.faults.counts import count_row
from tests.support.faults.tally import FaultRow, outbox_keys
from tests.support.monitor import env_for, settings_for, start_monitor
from tests.support.receiver import Receiver
from tests.support.schedules import every_two_seconds
from tests.support.waiting import wait_for


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
    """A paused `every: 2s` schedule's fires, from its creation to its last scheduled action."""

    schedule_id: str
    created_at: datetime
    end: datetime
    """The nominal time of the last action Temporal started before the pause: fires up to
    there are expected, whether they committed or not."""
    rows: list[asyncpg.Record]
    """Its outbox records, oldest first."""
    expected: set[datetime]
    listed: set[str]
    """What `backfill plan` lists as missing, asked once the schedule was paused."""

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

    async def settled() -> ScheduleDescription | None:
        description = await handle.describe()
        return None if description.info.running_actions else description

    description = await wait_for(settled, timeout=60, what="the schedule's last run to finish")
    assert description is not None
    rows = await committed_fires(pool, handle.id)
    # The window ends at Temporal's last start, not at the last commit: a run started at the
    # tail that never committed must count as expected.
    started = [a.scheduled_at for a in description.info.recent_actions]
    end = max([*started, *(r["fire_time"] for r in rows)], default=created_at)
    listed = await listed_by_plan(env, handle.id, created_at, end)
    return Fires(handle.id, created_at, end, rows, every_two_seconds(created_at, end), listed)


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
    if not fires.rows:
        checks.append("no fire committed")
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
    """A `cronwarden monitor` subprocess (real clock, a pass every 0.2 s), the receiver it
    pages, and the file its output goes to."""

    proc: asyncio.subprocess.Process
    receiver: Receiver
    log: Path

    async def stop(self) -> int:
        """SIGTERM; its exit code. A monitor that does not exit in time is killed, and the
        timeout raised."""
        if self.proc.returncode is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return await asyncio.wait_for(self.proc.wait(), timeout=30)
        except TimeoutError:
            self.proc.kill()
            await self.proc.wait()
            raise

    def tail(self, chars: int = 4000) -> str:
        """The end of its output, for a failure message."""
        return self.log.read_text(errors="replace")[-chars:] if self.log.exists() else ""


@pytest_asyncio.fixture(loop_scope="session")
async def watch(database: str, receiver: Receiver, tmp_path: Path) -> AsyncIterator[Watch]:
    log = tmp_path / "monitor.log"
    proc = await start_monitor(env_for(settings_for(database, receiver)), log)
    watching = Watch(proc, receiver, log)
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
