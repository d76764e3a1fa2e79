"""The lease step (`cronwarden.acquire_lease`) where one transition must wait for another: a
holder stopped between its commit statement and COMMIT, an acquire that waited longer than a
lease lasts, a retry that would jump a live fire, and two jobs of one lease that must never
overlap in time."""

from __future__ import annotations

import asyncio
import itertools
import time
from datetime import timedelta
from typing import Any

import asyncpg
import pytest
from temporalio.client import Client

from cronwarden.activities.contract import RAN
from cronwarden.store import locks
from cronwarden.store.runs import begin_run_script
from tests.support.database import fetch
from tests.support.runs import FIRE, start_run
from tests.support.servers import in_process_worker
from tests.support.waiting import wait_for

pytestmark = pytest.mark.integration

LOCK = "schedule:step"


async def ask(
    conn: Any,
    holder: str,
    *,
    attempt: int = 1,
    replay: bool = False,
    ttl: float = 60.0,
    **more: Any,
) -> locks.Acquisition:
    return await locks.acquire(
        conn,
        name=LOCK,
        holder=holder,
        attempt=attempt,
        ttl_seconds=ttl,
        logical_key=f"{holder}@2026-01-01T00:00:00Z",
        replay=replay,
        wait_for_any=more.pop("wait_for_any", replay),
        **more,
    )


async def stopped_before_commit(conn: Any, token: int, *, idle_timeout: str = "0") -> None:
    """What a holder's connection looks like when it was stopped right after its commit
    statement: the transaction open, the lease row locked by the fence."""
    await conn.execute("BEGIN")
    await conn.execute(begin_run_script("marker", idle_timeout))
    await conn.execute(
        "UPDATE cronwarden.locks SET holder = NULL WHERE name = $1 AND token = $2", LOCK, token
    )


async def test_an_acquire_behind_a_holder_stopped_inside_its_commit_answers_ask_again(
    pool: asyncpg.Pool,
) -> None:
    async with pool.acquire() as conn:
        held = await ask(conn, "holder")
    assert held.token is not None
    stopped = await pool.acquire()
    try:
        await stopped_before_commit(stopped, held.token)
        async with pool.acquire() as conn:
            started = time.monotonic()
            got = await ask(conn, "live")
            waited = time.monotonic() - started
        # Not blocked for as long as the holder stays stopped: "ask again" after the lock
        # timeout, with nothing decided.
        assert got.row_locked and got.token is None and not got.queued
        assert waited < locks.LOCK_TIMEOUT_MS / 1000 + 2
    finally:
        await stopped.execute("ROLLBACK")
        await pool.release(stopped)
    async with pool.acquire() as conn:
        after = await ask(conn, "live")
    assert (
        not after.row_locked
        and after.token is None
        and after.held_for == "holder@2026-01-01T00:00:00Z"
    )


async def test_the_server_ends_a_stopped_holders_transaction_after_its_idle_timeout(
    pool: asyncpg.Pool, database: str
) -> None:
    async with pool.acquire() as conn:
        held = await ask(conn, "holder", ttl=2.0)
    assert held.token is not None
    stopped = await asyncpg.connect(database)
    try:
        await stopped_before_commit(stopped, held.token, idle_timeout="1500ms")

        async def free_again() -> bool:
            async with pool.acquire() as conn:
                got = await ask(conn, "next")
            return got.token is not None

        # The stopped holder's transaction is ended by the server, its fence undone, and its
        # lease (renewed no more) expires: the next run takes it within the TTL and a bound.
        await wait_for(free_again, timeout=10, what="the lease taken after the holder stopped")
        with pytest.raises((asyncpg.PostgresError, asyncpg.InterfaceError, OSError)):
            await stopped.execute("COMMIT")
    finally:
        await stopped.close()


async def test_a_lease_taken_after_a_long_wait_lasts_its_whole_ttl_from_when_it_was_taken(
    pool: asyncpg.Pool,
) -> None:
    # Expiry by clock_timestamp(): an acquire that waited on the row must not write a lease that
    # is already (nearly) expired, as now() (the statement's start) would.
    async with pool.acquire() as conn:
        await ask(conn, "first")  # creates the row
        await conn.execute("UPDATE cronwarden.locks SET holder = NULL WHERE name = $1", LOCK)
    blocker = await pool.acquire()
    try:
        await blocker.execute("BEGIN")
        await blocker.execute("SELECT 1 FROM cronwarden.locks WHERE name = $1 FOR UPDATE", LOCK)
        async with pool.acquire() as conn:
            pid = conn.get_server_pid()
            waiting = asyncio.ensure_future(ask(conn, "late", ttl=3.0))

            async def blocked() -> bool:
                rows = await fetch(
                    pool,
                    "SELECT 1 FROM pg_stat_activity WHERE pid = $1 AND wait_event_type = 'Lock'",
                    pid,
                )
                return bool(rows)

            await wait_for(blocked, timeout=10, what="the acquire waiting on the lease row")
            seen_waiting = await blocker.fetchval("SELECT clock_timestamp()")
            await blocker.execute("COMMIT")
            got = await waiting
    finally:
        await pool.release(blocker)
    assert got.token is not None
    [row] = await fetch(
        pool, "SELECT acquired_at, expires_at FROM cronwarden.locks WHERE name = $1", LOCK
    )
    assert row["acquired_at"] >= seen_waiting
    assert row["expires_at"] - row["acquired_at"] == timedelta(seconds=3)


async def test_a_replays_retry_never_takes_the_lease_ahead_of_a_waiting_live_fire(
    pool: asyncpg.Pool,
) -> None:
    async with pool.acquire() as conn:
        replay = await ask(conn, "replay/run/act", attempt=1, replay=True)
        assert replay.token is not None
        # A live buffer_one fire queues behind it.
        live = await ask(conn, "live", wait_for_any=True)
        assert live.queued
        # The replay's worker died; Temporal retries it. The retry must not jump the live fire:
        # it hands the lease on (fencing its dead attempt) and queues.
        retry = await ask(conn, "replay/run/act", attempt=2, replay=True)
        assert retry.token is None and retry.queued
        assert retry.held_for == "live@2026-01-01T00:00:00Z"
        got = await ask(conn, "live", wait_for_any=True)
        assert got.token is not None
        # The dead attempt's token was replaced: it cannot commit or renew.
        assert not await locks.renew(conn, name=LOCK, token=replay.token, ttl_seconds=60)


async def test_a_released_lease_is_never_renewed(pool: asyncpg.Pool) -> None:
    async with pool.acquire() as conn:
        held = await ask(conn, "holder")
        assert held.token is not None
        assert await locks.release(conn, name=LOCK, token=held.token)
        assert not await locks.renew(conn, name=LOCK, token=held.token, ttl_seconds=60)


async def test_two_jobs_of_one_lease_never_overlap_in_time(
    client: Client, pool: asyncpg.Pool, task_queue: str, schedule_id: str
) -> None:
    # Different fire times: no outbox record stands between them, only the lease. Replays wait
    # for the lease whoever holds it, so all six run, one after the other.
    fires = [FIRE + timedelta(minutes=i) for i in range(6)]
    async with in_process_worker(client, pool, task_queue):
        runs = [
            await start_run(
                client, task_queue, schedule_id, fire=fire, replay=True, args={"sleep": 0.3}
            )
            for fire in fires
        ]
        outcomes = await asyncio.gather(*(run.result() for run in runs))
    assert [o.outcome for o in outcomes] == [RAN] * len(fires)
    rows = await fetch(
        pool,
        "SELECT started_at, finished_at FROM public.test_effects"
        " WHERE logical_key LIKE $1 ORDER BY started_at",
        f"{schedule_id}@%",
    )
    assert len(rows) == len(fires)
    for earlier, later in itertools.pairwise(rows):
        assert later["started_at"] >= earlier["finished_at"], (earlier, later)
