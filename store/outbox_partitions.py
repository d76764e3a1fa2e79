"""The outbox's monthly partitions: created ahead, dropped whole past the dedupe horizon.

The work itself is two functions of migration 0019 (`create_outbox_partitions`,
`drop_outbox_partitions`), SECURITY DEFINER so that the monitor, which runs as the runtime role
and may not CREATE or DROP, can keep the partitions; this module calls them, and prepares an
existing outbox for that migration without stopping commits (`prepare_conversion`).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import asyncpg

# How far ahead months are created. A commit whose month has no partition still lands (in the
# default partition), but there it is never dropped: three months leave a monitor that was down
# for weeks time to catch up before any fire needs its month.
MONTHS_AHEAD = 3

_CREATE = "SELECT cronwarden.create_outbox_partitions(now() + make_interval(months => $1))"
_DROP = "SELECT cronwarden.drop_outbox_partitions($1::interval)"

# Every partition with its range, oldest first (the default partition last).
_PARTITIONS = """
SELECT c.relnamespace::regnamespace::text || '.' || c.relname AS name,
       pg_get_expr(c.relpartbound, c.oid) AS bound,
       cronwarden.outbox_partition_end(c.relname) AS ends
  FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
 WHERE i.inhparent = 'cronwarden.outbox'::regclass
 ORDER BY cronwarden.outbox_partition_end(c.relname) NULLS LAST, c.relname
"""


@dataclass(frozen=True)
class Upkeep:
    created: list[str]
    """Monthly partitions created by this call."""
    dropped: list[str]
    """Partitions dropped by this call, their whole range past the horizon."""


async def create_ahead(conn: Any, *, months: int = MONTHS_AHEAD) -> list[str]:
    """Create the monthly partitions from this month through `months` ahead that are missing."""
    return [r[0] for r in await conn.fetch(_CREATE, months)]


async def drop_past(conn: Any, horizon: timedelta) -> list[str]:
    """Drop every partition whose range ended more than `horizon` ago (at least 7 days)."""
    return [r[0] for r in await conn.fetch(_DROP, horizon)]


async def upkeep(conn: Any, horizon: timedelta, *, months: int = MONTHS_AHEAD) -> Upkeep:
    """One round of both: what the monitor runs after a pass, on a connection of its own.

    Each function is its own statement and transaction (autocommit): a partition dropped is not
    held back by a create that waits for its lock, nor the other way round."""
    created = await create_ahead(conn, months=months)
    dropped = await drop_past(conn, horizon)
    return Upkeep(created=created, dropped=dropped)


async def partitions(conn: Any) -> list[dict[str, Any]]:
    """The outbox's partitions: name, bound (as Postgres prints it) and end, oldest first."""
    return [dict(r) for r in await conn.fetch(_PARTITIONS)]


# --- Converting an existing outbox online (before migration 0019) ---------------------------

# An earlier run stopped half way through the concurrent build leaves an invalid index behind:
# it must go before the build is tried again (IF NOT EXISTS would keep it).
_INVALID_INDEX = """
SELECT NOT i.indisvalid FROM pg_index i
 WHERE i.indexrelid = to_regclass('cronwarden.outbox_key_fire_time')
"""
_PLAIN_OUTBOX = "SELECT relkind = 'r' FROM pg_class WHERE oid = to_regclass('cronwarden.outbox')"
_BOUND_CONSTRAINT = """
SELECT convalidated FROM pg_constraint
 WHERE conrelid = 'cronwarden.outbox'::regclass AND conname = 'outbox_before_bound'
"""
# The first month at least a month after now: fires commit near their own time, so none of them
# meets the CHECK below before the swap, minutes later, lifts it.
_FIRST_BOUND = """
SELECT (date_trunc('month', now() AT TIME ZONE 'UTC') + interval '2 months') AT TIME ZONE 'UTC'
"""
# One scan, needed only when the outbox holds a fire at or past that month (a test's year 9999).
_BOUND_PAST_MAX = """
SELECT (date_trunc('month', greatest(now() + interval '1 month', max(fire_time)) AT TIME ZONE 'UTC')
        + interval '1 month') AT TIME ZONE 'UTC'
  FROM cronwarden.outbox
"""
# Tried with a short lock timeout and again: ADD CONSTRAINT takes ACCESS EXCLUSIVE for an
# instant, and while it waits for a running transaction every commit queues behind it.
STEP_LOCK_TIMEOUT = "2s"
STEP_ATTEMPTS = 30


async def prepare_conversion(conn: asyncpg.Connection) -> None:
    """Make migration 0019's swap catalog work only, while commits go on.

    Outside any transaction: build the (logical_key, fire_time) unique index CONCURRENTLY, add
    CHECK (fire_time < bound) NOT VALID (an instant's ACCESS EXCLUSIVE, under a lock timeout,
    retried) and validate it under SHARE UPDATE EXCLUSIVE, which lets inserts through. The
    bound goes into `cronwarden.outbox_conversion` for the migration to read. Safe to run
    again after a failure; does nothing to an outbox that is partitioned already."""
    if not await conn.fetchval(_PLAIN_OUTBOX):
        return
    if await conn.fetchval(_INVALID_INDEX):
        await conn.execute("DROP INDEX CONCURRENTLY cronwarden.outbox_key_fire_time")
    await conn.execute(
        "CREATE UNIQUE INDEX CONCURRENTLY IF NOT EXISTS outbox_key_fire_time"
        " ON cronwarden.outbox (logical_key, fire_time)"
    )
    bound = await conn.fetchval(_FIRST_BOUND)
    for attempt in range(2):
        await _with_lock_timeout(
            conn,
            "ALTER TABLE cronwarden.outbox DROP CONSTRAINT IF EXISTS outbox_before_bound;"
            "ALTER TABLE cronwarden.outbox ADD CONSTRAINT outbox_before_bound"
            f" CHECK (fire_time < '{bound.isoformat()}'::timestamptz) NOT VALID",
        )
        try:
            await conn.execute(
                "ALTER TABLE cronwarden.outbox VALIDATE CONSTRAINT outbox_before_bound"
            )
            break
        except asyncpg.CheckViolationError:
            if attempt:
                raise
            bound = await conn.fetchval(_BOUND_PAST_MAX)
    await conn.execute(
        "CREATE TABLE IF NOT EXISTS cronwarden.outbox_conversion (bound timestamptz NOT NULL);"
        "TRUNCATE cronwarden.outbox_conversion"
    )
    await conn.execute("INSERT INTO cronwarden.outbox_conversion VALUES ($1)", bound)


async def abandon_conversion(conn: asyncpg.Connection) -> None:
    """Undo `prepare_conversion` when the migration gave up: its CHECK would refuse every fire
    from its bound's month on. The index stays (the next attempt reuses it)."""
    if not await conn.fetchval(_PLAIN_OUTBOX):
        return
    await _with_lock_timeout(
        conn,
        "ALTER TABLE cronwarden.outbox DROP CONSTRAINT IF EXISTS outbox_before_bound;"
        "DROP TABLE IF EXISTS cronwarden.outbox_conversion",
    )


async def _with_lock_timeout(conn: asyncpg.Connection, sql: str) -> None:
    for attempt in range(STEP_ATTEMPTS):
        try:
            async with conn.transaction():
                await conn.execute(f"SET LOCAL lock_timeout = '{STEP_LOCK_TIMEOUT}'")
                await conn.execute(sql)
            return
        except asyncpg.LockNotAvailableError:
            if attempt == STEP_ATTEMPTS - 1:
                raise
            await asyncio.sleep(min(0.1 * 2**attempt, 5.0))
