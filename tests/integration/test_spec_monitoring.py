"""The monitor and the spec fields: a schedule past its end_at is finished, not absent, and an
excluded time is not a late one."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
import pytest
from temporalio.client import Client
from temporalio.worker import Worker

from monitor.scan import heartbeat_problem
from schedules.apply import apply_definitions
from schedules.model import ScheduleDefinition
from tests.integration.conftest import fetch, wait_for

pytestmark = pytest.mark.integration


def definition(schedule_id: str, **fields: Any) -> ScheduleDefinition:
    base: dict[str, Any] = {
        "id": schedule_id,
        "job": "probe",
        "catchup_window": "1m",
        "heartbeat_grace": "1s",
        "lock_ttl": "10s",
        "timeout": "30s",
    }
    return ScheduleDefinition.model_validate({**base, **fields})


async def beat(pool: asyncpg.Pool, schedule_id: str) -> dict[str, Any]:
    rows = await fetch(
        pool, "SELECT * FROM cronwarden.heartbeats WHERE schedule_id = $1", schedule_id
    )
    return dict(rows[0])


async def test_a_schedule_past_its_end_at_expects_nothing_and_never_pages(
    client: Client, pool: asyncpg.Pool, task_queue: str, worker: Worker, schedule_id: str
) -> None:
    end_at = datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=7)
    defn = definition(schedule_id, every="2s", end_at=end_at.isoformat())
    await apply_definitions(client, pool, [defn], task_queue=task_queue)
    handle = client.get_schedule_handle(schedule_id)

    async def finished() -> dict[str, Any] | None:
        row = await beat(pool, schedule_id)
        done = row["last_fire_time"] is not None and row["last_fire_time"] > end_at - timedelta(
            seconds=2
        )
        return row if done and row["next_expected_at"] is None else None

    try:
        row = await wait_for(finished, timeout=60, what="the last fire to leave nothing expected")
    finally:
        await handle.delete()
    assert row is not None
    assert row["last_fire_time"] <= end_at
    # A day later the schedule is finished, not overdue.
    assert heartbeat_problem(row, end_at + timedelta(days=1)) is None


async def test_an_excluded_time_is_not_expected_so_it_is_never_late(
    client: Client, pool: asyncpg.Pool, task_queue: str, worker: Worker, schedule_id: str
) -> None:
    # Every 2 seconds, except the seconds between the tens: it fires at :00, :10, :20, ...
    defn = definition(
        schedule_id,
        cron="*/2 * * * * * *",
        exclude=[{"second": "2-8,12-18,22-28,32-38,42-48,52-58"}],
    )
    await apply_definitions(client, pool, [defn], task_queue=task_queue)
    handle = client.get_schedule_handle(schedule_id)

    async def committed_twice() -> dict[str, Any] | None:
        rows = await fetch(
            pool, "SELECT count(*) AS n FROM cronwarden.outbox WHERE schedule_id = $1", schedule_id
        )
        return await beat(pool, schedule_id) if rows[0]["n"] >= 2 else None

    try:
        row = await wait_for(committed_twice, timeout=60, what="two committed fires")
    finally:
        await handle.delete()
    assert row is not None
    last: datetime = row["last_fire_time"]
    assert last.second % 10 == 0
    # The next slot after the excluded seconds, not the next 2 s step: with a grace of 1 s, a
    # deadline at +2 s would page while nothing is due.
    assert row["next_expected_at"] == last + timedelta(seconds=10)
    assert heartbeat_problem(row, last + timedelta(seconds=6)) is None
