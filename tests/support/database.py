"""A test database (cronwarden's schema, plus the probe jobs' effects table), and reading it."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import asyncpg

import tests.support.jobs
from cronwarden.embedded import EmbeddedPostgres
from cronwarden.store.migrate import migrate
from cronwarden.store.pool import connect


async def create_test_database(server: EmbeddedPostgres, name: str) -> str:
    """Create `name` on `server`, migrate it, add `test_effects`; its DSN."""
    server.create_database(name)
    dsn = server.dsn(name)
    conn = await connect(dsn)
    try:
        await migrate(conn)
        await conn.execute(tests.support.jobs.EFFECTS_DDL)
    finally:
        await conn.close()
    return dsn


async def fetch(dsn_or_pool: Any, query: str, *args: Any) -> list[asyncpg.Record]:
    async with dsn_or_pool.acquire() as conn:
        rows: list[asyncpg.Record] = await conn.fetch(query, *args)
        return rows


async def committed_times(pool: asyncpg.Pool, schedule_id: str) -> list[datetime]:
    """The fire times of the schedule's outbox records, ascending."""
    rows = await fetch(
        pool,
        "SELECT fire_time FROM cronwarden.outbox WHERE schedule_id = $1 ORDER BY 1",
        schedule_id,
    )
    return [r["fire_time"] for r in rows]
