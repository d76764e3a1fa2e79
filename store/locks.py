"""Lease locks with fencing tokens (`cronwarden.locks`).

Expiry is always judged by the database's `now()`, never by a worker's clock: a worker whose
clock is off by minutes still sees the same leases as everyone else.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

# One statement: skip the lock entirely when the key is already committed, else take the lease
# if it is released, expired, or held by an EARLIER attempt of this very activity (Temporal only
# retries once it has declared that attempt dead, so taking over at once is safe, and the fresh
# token fences the old attempt if it is in fact still alive). Comparing attempts matters: an old
# attempt that reaches this statement late must not take the lease back from its own retry.
# `holder IS NULL` covers a release that committed after this statement's now() was fixed.
_ACQUIRE = """
WITH done AS (
    SELECT args_digest FROM cronwarden.outbox WHERE logical_key = $4
), acquired AS (
    INSERT INTO cronwarden.locks AS l
           (name, holder, attempt, token, expires_at, acquired_at, logical_key, schedule_id,
            run_deadline)
    SELECT $1, $2, $5, nextval('cronwarden.lock_tokens'), now() + make_interval(secs => $3),
           now(), $4, $6, now() + make_interval(secs => $7)
     WHERE NOT EXISTS (SELECT 1 FROM done)
    ON CONFLICT (name) DO UPDATE
       SET holder = EXCLUDED.holder,
           attempt = EXCLUDED.attempt,
           token = EXCLUDED.token,
           expires_at = EXCLUDED.expires_at,
           acquired_at = EXCLUDED.acquired_at,
           logical_key = EXCLUDED.logical_key,
           schedule_id = EXCLUDED.schedule_id,
           run_deadline = EXCLUDED.run_deadline
     WHERE l.expires_at <= now()
        OR l.holder IS NULL
        OR (l.holder = EXCLUDED.holder AND l.attempt < EXCLUDED.attempt)
    RETURNING token
)
SELECT (SELECT token FROM acquired) AS token,
       EXISTS (SELECT 1 FROM done) AS done,
       (SELECT args_digest FROM done) AS done_digest,
       (SELECT logical_key FROM cronwarden.locks WHERE name = $1) AS held_for
"""

_RENEW = """
UPDATE cronwarden.locks
   SET expires_at = now() + make_interval(secs => $3)
 WHERE name = $1 AND token = $2
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
    """When not acquired: the logical key of the run holding the lease."""


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
) -> Acquisition:
    """`run_deadline_seconds` (the run's timeout + grace) marks when a run still holding the
    lease is taking too long: the monitor pages for it."""
    row = await conn.fetchrow(
        _ACQUIRE, name, holder, ttl_seconds, logical_key, attempt, schedule_id, run_deadline_seconds
    )
    return Acquisition(
        token=row["token"],
        already_done=row["done"],
        done_args_digest=row["done_digest"],
        held_for=row["held_for"],
    )


async def renew(conn: Any, *, name: str, token: int, ttl_seconds: float) -> bool:
    """Extend the lease; False means another holder took it (our token is stale)."""
    return await conn.fetchval(_RENEW, name, token, ttl_seconds) is not None


async def release(conn: Any, *, name: str, token: int) -> bool:
    """False when `token` is no longer the lease's: someone took it over meanwhile."""
    # Matching on the token makes a late release by a fenced-off holder a no-op.
    status: str = await conn.execute(_RELEASE, name, token)
    return status == "UPDATE 1"
