"""How many Postgres round trips the guard makes, counted on the wire by a proxy in front of
the server (tests/support/pgwire.py), how many DescribeSchedule calls (counted at the worker's
client), and that skipping the pool's session reset never leaks a job's session state."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import timedelta

import asyncpg
import pytest
import pytest_asyncio
from temporalio.client import Client

from bench.guard_overhead import DescribeCounter, is_prepare, label_statement
from cronwarden.activities.contract import RAN
from cronwarden.schedules.apply import apply_definitions
from cronwarden.schedules.model import ScheduleDefinition
from cronwarden.store.pool import create_pool, own_statements
from tests.support.database import fetch
from tests.support.pgwire import RoundTripProxy, target_of
from tests.support.runs import FIRE, start_run
from tests.support.servers import in_process_worker

pytestmark = pytest.mark.integration


@pytest_asyncio.fixture(loop_scope="session")
async def proxy(database: str) -> AsyncIterator[RoundTripProxy]:
    counting = RoundTripProxy(*target_of(database), label=label_statement)
    await counting.start()
    try:
        yield counting
    finally:
        await counting.stop()


async def test_a_guarded_no_op_run_makes_two_postgres_round_trips_and_no_describe_once_cached(
    client: Client,
    database: str,
    pool: asyncpg.Pool,
    task_queue: str,
    schedule_id: str,
    proxy: RoundTripProxy,
) -> None:
    # A real schedule: the guard caches its next action times (activities/next_fires.py).
    await apply_definitions(
        client,
        pool,
        [
            ScheduleDefinition.model_validate(
                {"id": schedule_id, "job": "noop-digest", "every": "1h"}
            )
        ],
        task_queue=task_queue,
    )
    # One connection is enough for a no-op run, and asyncpg's pool reuses the last released
    # one first: the count is the same on every run.
    proxied = await create_pool(proxy.proxied(database), max_size=2)
    # The worker's client (the one the guard describes schedules with) counts its calls.
    describes = DescribeCounter()
    counted_client = Client(
        client.service_client, namespace=client.namespace, interceptors=[describes]
    )
    try:
        async with in_process_worker(counted_client, proxied, task_queue):
            warm_up = await start_run(client, task_queue, schedule_id, job="noop-digest")
            assert (await warm_up.result()).outcome == RAN
            # The cold cache asked Temporal once.
            assert describes.calls == 1
            proxy.reset()
            describes.calls = 0
            handle = await start_run(
                client, task_queue, schedule_id, job="noop-digest", fire=FIRE + timedelta(hours=1)
            )
            assert (await handle.result()).outcome == RAN
    finally:
        await proxied.close()
        await client.get_schedule_handle(schedule_id).delete()
    counted = {label: n for label, n in proxy.counts.items() if not is_prepare(label)}
    assert counted == {
        "acquire (+ outbox look)": 1,
        "commit (fence + outbox + heartbeat + release)": 1,
    }
    # The heartbeat's next expected fire came from the worker's cache: no describe at all.
    assert describes.calls == 0


async def test_session_state_a_job_sets_is_reset_before_the_connection_is_reused(
    client: Client, database: str, pool: asyncpg.Pool, task_queue: str, schedule_id: str
) -> None:
    async with in_process_worker(client, pool, task_queue):
        handle = await start_run(client, task_queue, schedule_id, job="leak-session")
        assert (await handle.result()).outcome == RAN
    leaked = await fetch(
        pool,
        "SELECT count(*) AS n FROM pg_stat_activity WHERE application_name = 'leaked-by-job'",
    )
    assert leaked[0]["n"] == 0


async def test_own_statements_resets_the_session_after_a_failed_statement(
    database: str, proxy: RoundTripProxy
) -> None:
    pool = await create_pool(proxy.proxied(database), max_size=1)
    try:
        proxy.reset()
        async with own_statements(pool) as conn:
            await conn.execute("SELECT 1")
        # A body that ended normally skips the reset round trip.
        assert "pool reset on release" not in proxy.counts
        with pytest.raises(asyncpg.DivisionByZeroError):
            async with own_statements(pool) as conn:
                await conn.execute("SELECT 1/0")
        # One that failed may have left the session anywhere: the release resets it.
        assert proxy.counts["pool reset on release"] == 1
    finally:
        await pool.close()
