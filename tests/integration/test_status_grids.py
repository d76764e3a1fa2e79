"""The status page's background task on real servers: its scratch schedules per round are
bounded, what waits for the budget is read in later rounds, and nothing is left behind."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

import asyncpg
import pytest
from temporalio.client import Client

from cronwarden.monitor.grids import GridCache, GridRefresher, RefreshPolicy
from cronwarden.schedules.apply import apply_definitions
from tests.support.schedules import definition
from tests.support.scratch_watch import scratch_ever, scratch_now, settled

pytestmark = pytest.mark.integration


async def test_a_round_makes_at_most_its_scratch_budget_and_the_rest_wait_for_later_rounds(
    client: Client, pool: asyncpg.Pool, task_queue: str
) -> None:
    tag = uuid.uuid4().hex[:6]
    ids = [f"jittered-{tag}-{i}" for i in range(3)]
    defns = [definition(sid, every="1m", jitter="20s") for sid in ids]
    await apply_definitions(client, pool, defns, task_queue=task_queue)
    digests = dict(
        await pool.fetch(
            "SELECT schedule_id, definition_digest FROM cronwarden.heartbeats"
            " WHERE schedule_id = ANY($1)",
            ids,
        )
    )

    async def temporal() -> Client:
        return client

    async def pool_source() -> asyncpg.Pool:
        return pool

    cache = GridCache(RefreshPolicy(scratch_per_round=1))
    refresher = GridRefresher(cache, temporal, pool_source)
    try:
        await settled(client)
        before = await scratch_ever(client)
        cache.want([(sid, digests[sid]) for sid in ids])
        now = datetime.now(UTC)
        reports = [await refresher.round(now=now) for _ in range(4)]
        await settled(client)
        made = await scratch_ever(client) - before
        known = [cache.lookup(sid, digests[sid], now=now, n=30).expected for sid in ids]
    finally:
        for sid in ids:
            await client.get_schedule_handle(sid).delete()
    assert [r.scratch_made for r in reports] == [1, 1, 1, 0]
    assert [r.waiting_for_budget for r in reports] == [2, 1, 0, 0]
    assert [r.grids for r in reports] == [1, 1, 1, 0]
    assert len(made) == 3 and await scratch_now(client) == set()
    assert all(expected is not None for expected in known)
