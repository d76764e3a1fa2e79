"""Timed pauses on the real servers: `schedules pause --for/--until` records its end, the
monitor lifts it when the time has passed (Temporal and the heartbeat row, recorded as its own
change), pages `unpause-failed` once while it cannot and resolves once it could; bad flags
change nothing."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
import pytest
import pytest_asyncio
from temporalio.client import Client

from cronwarden.embedded import EmbeddedTemporal
from cronwarden.monitor.pauses import PauseCheck, PauseCheckPolicy
from cronwarden.schedules import operations
from cronwarden.schedules.apply import apply_definitions
from cronwarden.store import heartbeats
from tests.support.cli import cli
from tests.support.database import fetch
from tests.support.holding_proxy import HoldingProxy
from tests.support.monitor import events, expected_ago, incidents_of, monitoring, passes
from tests.support.monitor import receiver as receiver
from tests.support.receiver import Receiver
from tests.support.schedules import definition
from tests.support.waiting import wait_for

pytestmark = pytest.mark.integration


def pause_check(client: Client, timeout: float = 5.0) -> PauseCheck:
    async def connect() -> Client:
        return client

    return PauseCheck(connect, PauseCheckPolicy(timeout=timeout, reconnect_every=0))


async def beat(pool: asyncpg.Pool, schedule_id: str) -> dict[str, Any]:
    async with pool.acquire() as conn:
        row = await heartbeats.get(conn, schedule_id)
    assert row is not None
    return row


async def changes(pool: asyncpg.Pool, schedule_id: str) -> list[asyncpg.Record]:
    return await fetch(
        pool,
        "SELECT actor, action, reason, details FROM cronwarden.change_log"
        " WHERE schedule_id = $1 ORDER BY id",
        schedule_id,
    )


async def db_now(pool: asyncpg.Pool) -> datetime:
    [row] = await fetch(pool, "SELECT now() AS now")
    now: datetime = row["now"]
    return now


async def test_a_pause_for_a_few_seconds_is_lifted_by_the_monitor_without_a_page(
    database: str,
    client: Client,
    pool: asyncpg.Pool,
    task_queue: str,
    receiver: Receiver,
    cli_env: dict[str, str],
    schedule_id: str,
) -> None:
    defn = definition(schedule_id, every="1h", heartbeat_grace="1s")
    await apply_definitions(client, pool, [defn], task_queue=task_queue)
    handle = client.get_schedule_handle(schedule_id)
    try:
        result = await cli(
            cli_env, "schedules", "pause", schedule_id, "--for", "3s", "--reason", "deploy"
        )
        assert result.code == 0, result
        row = await beat(pool, schedule_id)
        until = row["paused_until"]
        assert row["paused"] and until is not None
        assert timedelta(0) < until - await db_now(pool) <= timedelta(seconds=3)
        assert (await handle.describe()).schedule.state.paused
        # The deadline the row held passed long ago while paused: what the unpause must not
        # page for.
        await expected_ago(pool, schedule_id, "1 day")
        async with monitoring(database, receiver, pauses=pause_check(client)) as monitor:
            # Before its end the pause stands.
            await passes(monitor)
            assert (await beat(pool, schedule_id))["paused"] is True

            async def lifted() -> bool:
                await passes(monitor)
                return not (await beat(pool, schedule_id))["paused"]

            await wait_for(lifted, timeout=30, what="the monitor to end the timed pause")
            await passes(monitor, 2)
        assert not (await handle.describe()).schedule.state.paused
        row = await beat(pool, schedule_id)
        assert row["paused_until"] is None and row["unpause_error"] is None
        assert row["next_expected_at"] > until
        assert events(receiver) == []
        assert [dict(r) for r in await incidents_of(pool, schedule_id)] == []
        recorded = [
            (r["actor"], r["action"], r["reason"]) for r in await changes(pool, schedule_id)
        ]
        assert recorded[-2:] == [
            (recorded[-2][0], "pause", "deploy"),
            ("cronwarden-monitor", "unpause", "timed pause ended"),
        ]
        [paused] = [r for r in await changes(pool, schedule_id) if r["action"] == "pause"]
        assert "until" in paused["details"]
    finally:
        await handle.delete()


@pytest_asyncio.fixture(loop_scope="session")
async def held_temporal(temporal_server: EmbeddedTemporal) -> AsyncIterator[HoldingProxy]:
    host, port = temporal_server.address.rsplit(":", 1)
    proxy = HoldingProxy(host, int(port))
    await proxy.start()
    try:
        yield proxy
    finally:
        await proxy.stop()


async def test_with_temporal_not_answering_the_monitor_pages_unpause_failed_once_then_resolves(
    database: str,
    client: Client,
    pool: asyncpg.Pool,
    task_queue: str,
    receiver: Receiver,
    schedule_id: str,
    held_temporal: HoldingProxy,
) -> None:
    defn = definition(schedule_id, every="1h")
    await apply_definitions(client, pool, [defn], task_queue=task_queue)
    handle = client.get_schedule_handle(schedule_id)
    try:
        until = datetime.now(UTC) + timedelta(seconds=2)
        await operations.pause(client, pool, schedule_id, reason="deploy", until=until)
        through_proxy = await Client.connect(held_temporal.address)
        check = pause_check(through_proxy, timeout=1.0)
        async with monitoring(database, receiver, pauses=check) as monitor:
            await wait_for(
                lambda: _past(pool, until), timeout=20, what="the pause's end, by Postgres"
            )
            held_temporal.hold()
            for _ in range(3):
                assert await monitor.step() is None
            row = await beat(pool, schedule_id)
            assert row["paused"] and row["paused_until"] == until
            assert row["unpause_error"] and row["unpause_failed_at"] is not None
            assert (await handle.describe()).schedule.state.paused
            paged = events(receiver, schedule_id=schedule_id)
            assert [(p["event"], p["kind"]) for p in paged] == [("trigger", "unpause-failed")]

            held_temporal.release()

            async def resolved() -> bool:
                assert await monitor.step() is None
                return len(events(receiver, schedule_id=schedule_id)) >= 2

            await wait_for(resolved, timeout=30, what="the unpause-failed incident to resolve")
            for _ in range(2):
                assert await monitor.step() is None
        paged = events(receiver, schedule_id=schedule_id)
        assert [(p["event"], p["kind"]) for p in paged] == [
            ("trigger", "unpause-failed"),
            ("resolve", "unpause-failed"),
        ]
        assert not (await handle.describe()).schedule.state.paused
        row = await beat(pool, schedule_id)
        assert not row["paused"] and row["unpause_error"] is None
        recorded = [(r["actor"], r["action"]) for r in await changes(pool, schedule_id)]
        assert recorded == [("cronwarden-monitor", "unpause")]
    finally:
        held_temporal.release()
        await handle.delete()


async def _past(pool: asyncpg.Pool, moment: datetime) -> bool:
    return await db_now(pool) > moment


@pytest.mark.parametrize(
    ("flags", "says"),
    [
        (["--for", "0s"], "longer than zero"),
        (["--for", "-5m"], "negative"),
        (["--for", "2h", "--until", "2099-01-01T00:00:00Z"], "not both"),
        (["--until", "2020-01-01T00:00:00Z"], "not in the future"),
        (["--until", "2099-01-01T00:00:00Z"], "at most 90d"),
        (["--for", "91d"], "at most 90d"),
        (["--until", "2099-01-01T00:00:00"], "no time zone"),
    ],
)
async def test_a_bad_end_is_one_clear_error_and_changes_nothing(
    client: Client,
    pool: asyncpg.Pool,
    task_queue: str,
    cli_env: dict[str, str],
    schedule_id: str,
    flags: list[str],
    says: str,
) -> None:
    await apply_definitions(
        client, pool, [definition(schedule_id, every="1h")], task_queue=task_queue
    )
    handle = client.get_schedule_handle(schedule_id)
    try:
        before = await beat(pool, schedule_id)
        result = await cli(cli_env, "schedules", "pause", schedule_id, *flags)
        assert result.code == 2, result
        [line] = [ln for ln in result.stderr.splitlines() if ln.startswith("error:")]
        assert says in line, line
        assert not (await handle.describe()).schedule.state.paused
        assert await beat(pool, schedule_id) == before
        assert await changes(pool, schedule_id) == []
    finally:
        await handle.delete()
