"""Lease locks with fencing tokens (`cronwarden.locks`).

Expiry is always judged by the database's clock, never by a worker's: a worker whose clock is
off by minutes still sees the same leases as everyone else.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import asyncpg

# One serialized transition per call, in a function (store/migrations/0009): the lease row is
# locked first, and only then are the outbox and the queue read. The rules are written there.
_ACQUIRE = """
SELECT token, done, done_digest, queued, held_for, held_by_replay, took_over
  FROM cronwarden.acquire_lease($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)
"""

# How long an acquire waits for the lease row's lock before it answers "ask again". The row is
# locked for microseconds by other acquires and by a holder's commit until its COMMIT; a wait
# this long means a holder stopped (or cut off) inside that window, which the server ends by
# itself after the holder's lock_ttl idle in its transaction. Well under Temporal's heartbeat
# timeout: the waiting run keeps heartbeating between its asks.
LOCK_TIMEOUT_MS = 1000

# Giving up or cancelled while queued: leave the queue so nobody waits behind a ghost for the
# seconds its place would take to expire. Never a later attempt's place: an attempt Temporal
# already retried must not throw its retry out of line.
_LEAVE = """
DELETE FROM cronwarden.lock_waiters WHERE name = $1 AND waiter = $2 AND attempt <= $3
"""

# The lease of one activity attempt, whatever its token: for a cancellation that struck while
# the acquire statement's result was on its way, when the token never reached us.
_RELEASE_HOLDER = """
UPDATE cronwarden.locks
   SET holder = NULL, expires_at = now()
 WHERE name = $1 AND holder = $2 AND attempt = $3
"""

# A released lease is never extended (its holder is gone); clock_timestamp(): a renewal that
# waited on the row must not write a lease already shortened by its wait.
_RENEW = """
UPDATE cronwarden.locks
   SET expires_at = clock_timestamp() + make_interval(secs => $3)
 WHERE name = $1 AND token = $2 AND holder IS NOT NULL
RETURNING expires_at
"""

_RELEASE = """
UPDATE cronwarden.locks
   SET holder = NULL, expires_at = now()
 WHERE name = $1 AND token = $2
"""


@dataclass(frozen=True)
class Acquisition:
    token: int | None
    """The fencing token when the lease was taken, else None."""
    already_done: bool
    """The logical key is committed already: nothing was locked."""
    done_args_digest: str | None
    held_for: str | None
    """When not acquired: the logical key of the run holding the lease (or first in line)."""
    held_by_replay: bool = False
    """When not acquired: that run is a `backfill run` replay."""
    queued: bool = False
    """When not acquired: this run holds a place in the lease's queue (it means to wait)."""
    took_over: bool = False
    """When acquired: from a holder that never released it (its lease expired, or it was an
    earlier attempt of this run)."""
    row_locked: bool = False
    """Nothing decided: the lease row stayed locked past LOCK_TIMEOUT_MS (a holder stopped
    between its commit statement and COMMIT). Ask again."""


async def acquire(
    conn: Any,
    *,
    name: str,
    holder: str,
    ttl_seconds: float,
    logical_key: str,
    attempt: int = 1,
    schedule_id: str | None = None,
    run_deadline_seconds: float | None = None,
    replay: bool = False,
    wait_for_any: bool = False,
    queue_ttl_seconds: float = 5.0,
    sweep_released: bool = False,
) -> Acquisition:
    """`run_deadline_seconds` (the run's timeout + grace) marks when a run still holding the
    lease is taking too long: the monitor pages for it. `wait_for_any`: when not acquired, join
    the lease's queue whoever holds it (else only behind a replay); the place lasts
    `queue_ttl_seconds` unless refreshed by the next call. `sweep_released`: delete the
    schedule's other released leases (per-key leases, one per fire time)."""
    try:
        row = await conn.fetchrow(
            _ACQUIRE,
            name,
            holder,
            ttl_seconds,
            logical_key,
            attempt,
            schedule_id,
            run_deadline_seconds,
            1 if replay else 0,
            queue_ttl_seconds,
            wait_for_any,
            sweep_released,
            LOCK_TIMEOUT_MS,
        )
    except asyncpg.LockNotAvailableError:
        return Acquisition(
            token=None, already_done=False, done_args_digest=None, held_for=None, row_locked=True
        )
    return Acquisition(
        token=row["token"],
        already_done=row["done"],
        done_args_digest=row["done_digest"],
        held_for=row["held_for"],
        held_by_replay=row["held_by_replay"],
        queued=row["queued"],
        took_over=row["took_over"],
    )


async def leave_queue(conn: Any, *, name: str, waiter: str, attempt: int) -> None:
    await conn.execute(_LEAVE, name, waiter, attempt)


async def release_holder(conn: Any, *, name: str, holder: str, attempt: int) -> bool:
    """Release the lease of this activity attempt, when its token is unknown."""
    status: str = await conn.execute(_RELEASE_HOLDER, name, holder, attempt)
    return status == "UPDATE 1"


async def renew(conn: Any, *, name: str, token: int, ttl_seconds: float) -> bool:
    """Extend the lease; False means another holder took it (our token is stale)."""
    return await conn.fetchval(_RENEW, name, token, ttl_seconds) is not None


async def release(conn: Any, *, name: str, token: int) -> bool:
    """False when `token` is no longer the lease's: someone took it over meanwhile."""
    # Matching on the token makes a late release by a fenced-off holder a no-op.
    status: str = await conn.execute(_RELEASE, name, token)
    return status == "UPDATE 1"


# Runs at the lease now, by the schedules they run for: holding it, or queued for it (a replay
# behind a live run, a buffer_one fire). What the status page shows as running. A shared lock
# names its holder's schedule in `schedule_id`; a waiter is known by its logical key, whose
# part before the '@' is its schedule id (schedule ids have no '@').
_ACTIVE_KEYS = """
SELECT schedule_id, logical_key FROM cronwarden.locks
 WHERE schedule_id = ANY($1::text[]) AND holder IS NOT NULL AND expires_at > now()
   AND logical_key IS NOT NULL
UNION
SELECT split_part(logical_key, '@', 1), logical_key FROM cronwarden.lock_waiters
 WHERE split_part(logical_key, '@', 1) = ANY($1::text[]) AND expires_at > now()
"""


async def active_keys(conn: Any, schedule_ids: list[str]) -> list[tuple[str, str]]:
    """(schedule id, logical key) of every run holding or queued at a lease for one of
    `schedule_ids`."""
    rows = await conn.fetch(_ACTIVE_KEYS, schedule_ids)
    return [(r["schedule_id"], r["logical_key"]) for r in rows]


# The run holding the lease a waiting run is queued for (`backfill/causes.py`: "waiting for the
# lease held by K"); nothing when the key is not queued or the lease is free.
_HOLDER_FOR_WAITER = """
SELECT coalesce(l.logical_key, l.holder) AS held_by
  FROM cronwarden.lock_waiters w
  JOIN cronwarden.locks l ON l.name = w.name
 WHERE w.logical_key = $1 AND w.expires_at > now()
   AND l.holder IS NOT NULL AND l.expires_at > now()
   AND l.logical_key IS DISTINCT FROM $1
 LIMIT 1
"""


async def holder_for_waiter(conn: Any, logical_key: str) -> str | None:
    """The logical key (or holder) of the run holding the lease `logical_key` waits for."""
    held_by: str | None = await conn.fetchval(_HOLDER_FOR_WAITER, logical_key)
    return held_by
