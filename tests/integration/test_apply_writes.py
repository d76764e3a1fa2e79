"""What `schedules apply` writes to Temporal, counted at the client's edge (every RPC the
client sends, see bench/rpc_calls.py): a re-apply of an unchanged file writes nothing, and a
change writes only the schedule that changed."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import asyncpg
import pytest
import pytest_asyncio
from temporalio.client import Client

from bench.apply_scale import definitions
from bench.rpc_calls import counting_rpcs
from cronwarden.embedded import EmbeddedTemporal
from schedules.apply import CREATED, UNCHANGED, UPDATED, apply_definitions
from schedules.model import ScheduleDefinition
from tests.integration.conftest import fetch

pytestmark = pytest.mark.integration

COUNT = 30


@pytest_asyncio.fixture(loop_scope="session")
async def counted_client(temporal_server: EmbeddedTemporal) -> Client:
    """A client of the test's own, so the count holds this test's calls only."""
    return await Client.connect(temporal_server.address)


@pytest_asyncio.fixture(loop_scope="session")
async def many(counted_client: Client) -> AsyncIterator[list[ScheduleDefinition]]:
    defs = definitions(f"many-{uuid.uuid4().hex[:6]}", COUNT)
    yield defs
    for defn in defs:
        await counted_client.get_schedule_handle(defn.id).delete()


async def test_a_second_apply_with_no_change_makes_zero_write_calls_to_temporal(
    counted_client: Client, pool: asyncpg.Pool, task_queue: str, many: list[ScheduleDefinition]
) -> None:
    with counting_rpcs(counted_client) as first:
        created = await apply_definitions(counted_client, pool, many, task_queue=task_queue)
    assert [c.action for c in created] == [CREATED] * COUNT
    # The counter sees the writes: one create per schedule.
    assert first.writes == {"create_schedule": COUNT}

    # A heartbeat row gone missing (the database was set up after the schedules) comes back;
    # the rows that exist keep what they hold.
    gone = many[0].id
    async with pool.acquire() as conn:
        await conn.execute("DELETE FROM cronwarden.heartbeats WHERE schedule_id = $1", gone)
        await conn.execute(
            "UPDATE cronwarden.heartbeats SET last_error = 'kept' WHERE schedule_id = $1",
            many[1].id,
        )

    with counting_rpcs(counted_client) as second:
        again = await apply_definitions(counted_client, pool, many, task_queue=task_queue)

    assert [c.action for c in again] == [UNCHANGED] * COUNT
    assert second.writes == {}, second
    assert second["describe_schedule"] == COUNT
    assert [c.next_fire for c in again] == [c.next_fire for c in created]
    rows = await fetch(
        pool,
        "SELECT schedule_id, next_expected_at, last_error FROM cronwarden.heartbeats"
        " WHERE schedule_id = ANY($1::text[])",
        [gone, many[1].id],
    )
    by_id = {r["schedule_id"]: r for r in rows}
    assert by_id[gone]["next_expected_at"] == again[0].next_fire
    assert by_id[many[1].id]["last_error"] == "kept"


async def test_an_apply_that_changes_one_schedule_of_many_writes_only_that_one(
    counted_client: Client, pool: asyncpg.Pool, task_queue: str, many: list[ScheduleDefinition]
) -> None:
    await apply_definitions(counted_client, pool, many, task_queue=task_queue)
    changed = [*many]
    changed[7] = many[7].model_copy(update={"timeout": many[7].timeout * 2})

    with counting_rpcs(counted_client) as calls:
        result = await apply_definitions(counted_client, pool, changed, task_queue=task_queue)

    assert [c.schedule_id for c in result if c.action == UPDATED] == [many[7].id]
    assert result[7].changed_fields == ["timeout"]
    assert calls.writes == {"update_schedule": 1}, calls
