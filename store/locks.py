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
#
# The lease has a queue (`lock_waiters`): a free lease goes to the first live waiter, else to
# the first replay waiter, so a replay never takes the lease while a live fire waits for it, and
# waiters of one priority are served in arrival order (none is starved by luckier pollers). A
# run that does not get the lease joins the queue in the same statement when it means to wait:
# always for `$10` (buffer_one fires, replays), else only when a replay holds the lease (a live
# `skip` fire waits for a replay, never for another live run). Joining here, not in a second
# statement, leaves no moment in which the next replay could slip in ahead of a live fire.
_ACQUIRE = """
WITH done AS (
    SELECT args_digest FROM cronwarden.outbox WHERE logical_key = $4
), me AS (
    SELECT enqueued_at FROM cronwarden.lock_waiters WHERE name = $1 AND waiter = $2
), ahead AS (
    SELECT w.logical_key, w.priority FROM cronwarden.lock_waiters w
     WHERE w.name = $1 AND w.waiter <> $2 AND w.expires_at > now()
       AND (w.priority < $8
            OR (w.priority = $8
                AND (w.enqueued_at, w.waiter)
                    < (COALESCE((SELECT enqueued_at FROM me), 'infinity'), $2)))
     ORDER BY w.priority, w.enqueued_at, w.waiter
     LIMIT 1
), retaking AS (
    -- A retry of the holder itself takes its lease back at once, queue or not.
    SELECT 1 FROM cronwarden.locks WHERE name = $1 AND holder = $2 AND attempt < $5
), acquired AS (
    INSERT INTO cronwarden.locks AS l
           (name, holder, attempt, token, expires_at, acquired_at, logical_key, schedule_id,
            run_deadline, replay)
    SELECT $1, $2, $5, nextval('cronwarden.lock_tokens'), now() + make_interval(secs => $3),
           now(), $4, $6, now() + make_interval(secs => $7), $8 = 1
     WHERE NOT EXISTS (SELECT 1 FROM done)
       AND (NOT EXISTS (SELECT 1 FROM ahead) OR EXISTS (SELECT 1 FROM retaking))
    ON CONFLICT (name) DO UPDATE
       SET holder = EXCLUDED.holder,
           attempt = EXCLUDED.attempt,
           token = EXCLUDED.token,
           expires_at = EXCLUDED.expires_at,
           acquired_at = EXCLUDED.acquired_at,
           logical_key = EXCLUDED.logical_key,
           schedule_id = EXCLUDED.schedule_id,
           run_deadline = EXCLUDED.run_deadline,
           replay = EXCLUDED.replay
     WHERE l.expires_at <= now()
        OR l.holder IS NULL
        OR (l.holder = EXCLUDED.holder AND l.attempt < EXCLUDED.attempt)
    RETURNING token
), previous AS (
    -- The lease as the statement's snapshot saw it, for `took_over` only: a lease seen held
    -- and unexpired that `acquired` took anyway was released meanwhile, not taken over.
    SELECT holder IS NOT NULL AND (expires_at <= now() OR (holder = $2 AND attempt < $5))
           AS takeable_held
      FROM cronwarden.locks WHERE name = $1
), current AS (
    -- A locking read, so the lease as it is now and not as this statement's snapshot saw it:
    -- when another acquire took the lease while ours waited on the row (`acquired` re-checks
    -- the newest row, a plain read would not), a live fire refused by that replay must see it
    -- and queue behind it, not take the lease for free and skip itself. FOR UPDATE, not FOR
    -- SHARE: `acquired` locks the row exclusively too, and a shared lock taken first and
    -- upgraded later would deadlock two pollers. Empty when `acquired` changed the row.
    SELECT logical_key, holder, attempt, replay,
           holder IS NOT NULL AND expires_at > now() AS active
      FROM cronwarden.locks WHERE name = $1
       FOR UPDATE
), queued AS (
    -- An attempt Temporal has retried already (the lease's holder is a later attempt of the
    -- same activity, or its place is) never queues again: it would hold a ghost place, ahead
    -- of live fires, for as long as it keeps polling.
    INSERT INTO cronwarden.lock_waiters AS w
           (name, waiter, attempt, priority, logical_key, enqueued_at, expires_at)
    SELECT $1, $2, $5, $8, $4, now(), now() + make_interval(secs => $9)
     WHERE NOT EXISTS (SELECT 1 FROM acquired) AND NOT EXISTS (SELECT 1 FROM done)
       AND ($10 OR EXISTS (SELECT 1 FROM current WHERE active AND replay))
       AND NOT EXISTS (SELECT 1 FROM current WHERE holder = $2 AND attempt > $5)
    ON CONFLICT (name, waiter) DO UPDATE
       SET expires_at = EXCLUDED.expires_at, attempt = EXCLUDED.attempt
     WHERE w.attempt <= EXCLUDED.attempt
    RETURNING 1
), swept AS (
    -- Per-key leases (allow_all, named `key:{logical key}`: activities/contract.py) leave one
    -- released row per fire time: the schedule's next per-key acquire deletes its released
    -- ones. Only released rows: a lease still held or expired-but-held is a run (perhaps a
    -- dead one a retry will take over), and stays; never a schedule's or a shared lock's row,
    -- whatever schedule last held it. SKIP LOCKED, in name order:
    -- two per-key acquires each taking back an old released row the other would delete must
    -- not wait for each other (a deadlock); a row skipped now is deleted by a later acquire.
    DELETE FROM cronwarden.locks
     WHERE holder IS NULL
       AND name IN (SELECT name FROM cronwarden.locks
                     WHERE $11 AND schedule_id = $6 AND starts_with(name, 'key:')
                       AND name <> $1 AND holder IS NULL
                       AND expires_at < now() - interval '1 minute'
                     ORDER BY name
                       FOR UPDATE SKIP LOCKED)
), dequeued AS (
    -- Our own place once we hold the lease or find the key done (a run that stopped waiting
    -- because another run committed its key must not stay in line ahead of live fires), and
    -- places their waiters abandoned long ago.
    DELETE FROM cronwarden.lock_waiters
     WHERE name = $1
       AND ((EXISTS (SELECT 1 FROM acquired)
             AND (waiter = $2 OR expires_at < now() - interval '1 minute'))
            OR (EXISTS (SELECT 1 FROM done) AND waiter = $2))
)
SELECT (SELECT token FROM acquired) AS token,
       EXISTS (SELECT 1 FROM done) AS done,
       (SELECT args_digest FROM done) AS done_digest,
       EXISTS (SELECT 1 FROM queued) AS queued,
       COALESCE((SELECT logical_key FROM current WHERE active),
                (SELECT logical_key FROM ahead),
                (SELECT logical_key FROM current)) AS held_for,
       COALESCE((SELECT replay FROM current WHERE active),
                (SELECT priority = 1 FROM ahead), false) AS held_by_replay,
       NOT EXISTS (SELECT 1 FROM current WHERE active)
           AND NOT EXISTS (SELECT 1 FROM ahead) AS seen_free,
       EXISTS (SELECT 1 FROM acquired)
           AND COALESCE((SELECT takeable_held FROM previous), false) AS took_over
"""

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
    """When not acquired: the logical key of the run holding the lease (or first in line)."""
    held_by_replay: bool = False
    """When not acquired: that run is a `backfill run` replay."""
    queued: bool = False
    """When not acquired: this run holds a place in the lease's queue (it means to wait)."""
    seen_free: bool = False
    """When not acquired: the statement saw the lease free and nobody ahead, yet was refused:
    another run created the lease's row while it ran (a row no read of its snapshot shows, so
    `held_for` is unknown). A fresh statement sees that run."""
    took_over: bool = False
    """When acquired: from a holder that never released it (its lease expired, or it was an
    earlier attempt of this run), as the statement's snapshot saw the lease."""


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
    )
    return Acquisition(
        token=row["token"],
        already_done=row["done"],
        done_args_digest=row["done_digest"],
        held_for=row["held_for"],
        held_by_replay=row["held_by_replay"],
        queued=row["queued"],
        seen_free=row["seen_free"],
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
