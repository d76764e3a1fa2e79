"""Local-time schedules under attack, on the real Temporal and Postgres: a release rolled back
across a new year, and a heartbeat row that `schedules unpause` creates for a zoned schedule.
Each failed before its fix."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime, tzinfo

import asyncpg
import pytest
import pytest_asyncio
from temporalio.client import Client
from temporalio.worker import Worker

from cronwarden.activities.contract import RAN
from cronwarden.activities.jobs import import_job_modules
from cronwarden.schedules import args_trigger, mapping
from cronwarden.schedules.apply import SupersededFile, apply_definitions
from cronwarden.schedules.model import ScheduleDefinition
from cronwarden.schedules.operations import pause, unpause
from cronwarden.schedules.overridden_args import OverriddenArgs
from cronwarden.store import heartbeats
from tests.support.cleanup import delete_schedules
from tests.support.horizons import stored_horizon
from tests.support.schedules import yearly_definition
from tests.support.servers import TEST_JOBS

pytestmark = pytest.mark.integration

BERLIN = "Europe/Berlin"
NEW_YORK = "America/New_York"


@dataclass(frozen=True)
class Rig:
    client: Client
    pool: asyncpg.Pool
    task_queue: str
    sid: str
    """The schedule under test, deleted afterwards."""
    monkeypatch: pytest.MonkeyPatch

    def in_june_of(self, year: int) -> None:
        """What follows runs as in June of `year` (the years a zoned schedule is compiled for
        follow `mapping.clock`)."""
        self.monkeypatch.setattr(mapping, "clock", lambda: datetime(year, 6, 1, tzinfo=UTC))

    async def apply(self, defn: ScheduleDefinition, *, release: bool = False) -> None:
        await apply_definitions(
            self.client, self.pool, [defn], task_queue=self.task_queue, release=release
        )


@pytest_asyncio.fixture(loop_scope="session")
async def rig(
    client: Client,
    pool: asyncpg.Pool,
    task_queue: str,
    schedule_id: str,
    monkeypatch: pytest.MonkeyPatch,
) -> AsyncIterator[Rig]:
    yield Rig(client, pool, task_queue, schedule_id, monkeypatch)
    await delete_schedules(client, {schedule_id})


async def test_an_old_release_rerun_in_a_new_year_is_still_refused(rig: Rig) -> None:
    old = yearly_definition(rig.sid, timezone=BERLIN)
    new = yearly_definition(rig.sid, timezone=NEW_YORK)
    rig.in_june_of(2026)
    await rig.apply(old, release=True)
    await rig.apply(new, release=True)
    # The same year: the old file is refused, as it should be.
    with pytest.raises(SupersededFile):
        await rig.apply(old, release=True)
    # The next year, the very same old file: it must still be refused.
    rig.in_june_of(2027)
    try:
        await rig.apply(old, release=True)
    except SupersededFile:
        return
    raise AssertionError("the old file was applied over the newer one without --force")


async def test_a_heartbeat_row_unpause_creates_for_a_zoned_schedule_has_its_horizon(
    rig: Rig,
) -> None:
    rig.in_june_of(2027)
    await rig.apply(yearly_definition(rig.sid, timezone=BERLIN))
    # Compiled in 2027: the years 2026 to 2029.
    assert await stored_horizon(rig.pool, rig.sid) == datetime(2030, 1, 1, tzinfo=UTC)
    await pause(rig.client, rig.pool, rig.sid, reason="maintenance")
    # The row is lost (the case unpause's own code handles: "never applied here, or lost").
    async with rig.pool.acquire() as conn:
        await heartbeats.delete(conn, rig.sid)
    await unpause(rig.client, rig.pool, rig.sid)
    assert await stored_horizon(rig.pool, rig.sid) == datetime(2030, 1, 1, tzinfo=UTC)


class _AtASecondReading(datetime):
    """The clock of a trigger sent at 2027-11-07T06:30:00Z: 01:30 EST in New York, the second
    reading of 01:30 that day (the first is 05:30Z, EDT)."""

    @classmethod
    def now(cls, tz: tzinfo | None = None) -> _AtASecondReading:
        return cls(2027, 11, 7, 6, 30, tzinfo=UTC)


async def test_a_trigger_sent_at_a_second_reading_runs(rig: Rig, worker: Worker) -> None:
    rig.in_june_of(2027)
    await rig.apply(yearly_definition(rig.sid, cron="30 1 * * *", timezone=NEW_YORK))
    rig.monkeypatch.setattr(args_trigger, "datetime", _AtASecondReading)
    started = await args_trigger.trigger_with_args(
        rig.client,
        rig.sid,
        OverriddenArgs(args={}, source="--args"),
        import_job_modules([TEST_JOBS]),
    )
    assert started.logical_key == f"{rig.sid}@2027-11-07T06:30:00Z"
    assert started.outcome == RAN
