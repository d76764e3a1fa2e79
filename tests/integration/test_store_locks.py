"""The lease queries against a real Postgres: who may take a lease, and when."""

from __future__ import annotations

import asyncpg
import pytest

from cronwarden.store import locks

pytestmark = pytest.mark.integration

LOCK = "schedule:locks-test"


async def acquire(
    pool: asyncpg.Pool, holder: str, *, attempt: int = 1, key: str = "k@1"
) -> int | None:
    async with pool.acquire() as conn:
        got = await locks.acquire(
            conn, name=LOCK, holder=holder, attempt=attempt, ttl_seconds=60, logical_key=key
        )
    return got.token


async def expire(pool: asyncpg.Pool) -> None:
    async with pool.acquire() as conn:
        await conn.execute(
            "UPDATE cronwarden.locks SET expires_at = now() - interval '1 second' WHERE name = $1",
            LOCK,
        )


async def test_a_free_lease_is_taken_and_a_held_one_refused(pool: asyncpg.Pool) -> None:
    first = await acquire(pool, "a")
    assert first is not None
    assert await acquire(pool, "b") is None


async def test_an_expired_lease_is_taken_over_with_a_larger_token(pool: asyncpg.Pool) -> None:
    first = await acquire(pool, "a")
    await expire(pool)
    second = await acquire(pool, "b")
    assert first is not None and second is not None and second > first


async def test_a_released_lease_is_free_at_once(pool: asyncpg.Pool) -> None:
    token = await acquire(pool, "a")
    assert token is not None
    async with pool.acquire() as conn:
        assert await locks.release(conn, name=LOCK, token=token) is True
    assert await acquire(pool, "b") is not None


async def test_a_later_attempt_of_the_same_activity_takes_over_but_never_an_earlier_one(
    pool: asyncpg.Pool,
) -> None:
    first = await acquire(pool, "wf/run/1", attempt=1)
    retry = await acquire(pool, "wf/run/1", attempt=2)
    assert first is not None and retry is not None and retry > first
    # The dead attempt 1 reaching the database late must not take the lease back.
    assert await acquire(pool, "wf/run/1", attempt=1) is None
    assert await acquire(pool, "wf/run/1", attempt=2) is None


async def test_renew_and_release_with_a_stale_token_change_nothing(pool: asyncpg.Pool) -> None:
    stale = await acquire(pool, "a")
    await expire(pool)
    current = await acquire(pool, "b")
    assert stale is not None and current is not None
    async with pool.acquire() as conn:
        assert await locks.renew(conn, name=LOCK, token=stale, ttl_seconds=60) is False
        # False tells a holder cancelled after losing its lease that it had lost it.
        assert await locks.release(conn, name=LOCK, token=stale) is False
        row = await conn.fetchrow(
            "SELECT holder, token FROM cronwarden.locks WHERE name = $1", LOCK
        )
        assert (row["holder"], row["token"]) == ("b", current)
        assert await locks.renew(conn, name=LOCK, token=current, ttl_seconds=60) is True


async def test_a_committed_key_is_reported_done_without_locking(pool: asyncpg.Pool) -> None:
    async with pool.acquire() as conn:
        await conn.execute(
            "INSERT INTO cronwarden.outbox (logical_key, schedule_id, fire_time, attempt,"
            " fencing_token, worker, args_digest) VALUES ('k@1', 's', now(), 1, 1, 'w', 'd')"
        )
        got = await locks.acquire(
            conn, name=LOCK, holder="a", attempt=1, ttl_seconds=60, logical_key="k@1"
        )
        rows = await conn.fetch("SELECT * FROM cronwarden.locks WHERE name = $1", LOCK)
    assert got.already_done and got.done_args_digest == "d" and got.token is None
    assert rows == []
