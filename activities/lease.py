"""Taking a run's lease: waiting for it in a fair order, and never leaking it to a cancellation.

Why the wait happens here, inside the activity, polling every quarter second while it
heartbeats Temporal, and not in the workflow between activity attempts: a live fire of a `skip`
schedule that waits too long makes Temporal skip the schedule's NEXT fire, so a fire must get
the lease within a moment of its release, not after a workflow timer and a new activity task.
The order is kept by the database (`cronwarden.lock_waiters`, see store/locks.py): live fires
first, then replays, each in arrival order, so a short poll never lets a lucky poller starve an
unlucky one. Polling, not LISTEN/NOTIFY: a LISTEN needs a connection held for the whole wait
(one per waiting run, outside the pool's accounting), and the poll is one short indexed
statement; a quarter second is small against the seconds Temporal needs to start a run.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import asyncpg

from cronwarden.store import locks
from cronwarden.store.pool import own_statements

# How often a queued run asks for the lease again; its place in the queue outlives this many
# missed polls, so a run that died stops blocking the queue within seconds.
POLL_EVERY = 0.25
QUEUE_TTL_SECONDS = 5.0
# A lease row locked past the statement's lock timeout (a holder stopped between its commit
# statement and COMMIT) is asked again for at most this long beyond the lease's TTL: the server
# ends such a holder's transaction after its TTL idle (activities/context.py), so a row still
# locked then is something else, and the run fails retryably, naming it.
ROW_LOCKED_MARGIN_SECONDS = 10.0
# Heartbeats to Temporal while waiting, well inside the workflow's 10 s heartbeat timeout.
HEARTBEAT_EVERY = 2.0
# A cancelled acquire waits this long for its statement's answer before falling back to a
# release by holder (the lease then also expires by itself after its TTL).
STATEMENT_GRACE_SECONDS = 10.0

# A run's last attempt, queued, asks Temporal this often whether it still waits for it (see
# `acquire_lease`'s `still_current`).
STILL_CURRENT_EVERY = 5.0

_DB_ERRORS = (asyncpg.PostgresError, asyncpg.InterfaceError, OSError, TimeoutError)


class LeaseRowLocked(Exception):
    """The lease row stayed locked far longer than any holder's transaction may stay open."""


class AttemptAbandoned(Exception):
    """Temporal no longer waits for this attempt (or cannot be asked): it left the queue."""


@dataclass(frozen=True)
class LeaseRequest:
    name: str
    holder: str
    """The activity attempt asking (workflow id / run id / activity id)."""
    attempt: int
    ttl_seconds: float
    logical_key: str
    schedule_id: str
    run_deadline_seconds: float | None
    replay: bool
    """A `backfill run` replay: it queues behind every live fire."""
    wait_for_any: bool
    """Wait whoever holds the lease (buffer_one fires, replays); else only behind a replay."""
    wait_seconds: float
    """The longest this run may wait for the lease before it ends `overlap-locked`."""
    per_key: bool = False
    """A per-fire-time lease (allow_all): taking it sweeps the schedule's released ones."""


async def acquire_lease(
    pool: asyncpg.Pool,
    req: LeaseRequest,
    *,
    log: Any,
    heartbeat: Callable[[], None] | None = None,
    still_current: Callable[[], Awaitable[bool]] | None = None,
) -> locks.Acquisition:
    """The lease, an already-done key, or (after waiting as long as the request allows) the
    run holding the lease. A cancellation at any point leaves neither a lease nor a queue place
    behind.

    `still_current`, given for a run's last attempt, is asked every STILL_CURRENT_EVERY seconds
    while the run is queued. A worker cut off from Temporal but not from Postgres never hears
    that Temporal timed its attempt out (its heartbeats go nowhere, and nothing cancels it), and
    would keep its place, ahead of live runs, for the whole wait. Earlier attempts need no such
    check: their retry takes the same place over (store/migrations/0009: stale)."""
    give_up_at = time.monotonic() + req.wait_seconds
    checked_at = time.monotonic()
    beating: asyncio.Task[None] | None = None
    queued = False
    locked_since: float | None = None
    try:
        while True:
            asked_at = time.monotonic()
            got = await _attempt(pool, req, log)
            if got.row_locked:
                # Nothing was decided: the wait is not the run's to count against its own
                # (a live `skip` fire would give up at once), but Temporal must hear from it
                # from this moment on.
                now = time.monotonic()
                if locked_since is None:
                    locked_since = now
                    log.warning("run.lease-row-locked", lock=req.name)
                elif now - locked_since > req.ttl_seconds + ROW_LOCKED_MARGIN_SECONDS:
                    raise LeaseRowLocked(
                        f"the lease {req.name} stayed locked by a transaction that does not end "
                        f"for {now - locked_since:.0f}s (longer than its lock_ttl); retrying"
                    )
                if heartbeat is not None and beating is None:
                    beating = asyncio.create_task(_beat(heartbeat), name=f"wait:{req.logical_key}")
                give_up_at += time.monotonic() - asked_at + POLL_EVERY
                await asyncio.sleep(POLL_EVERY)
                continue
            if got.token is not None or got.already_done:
                return got
            queued = queued or got.queued
            left = give_up_at - time.monotonic()
            if not got.queued or left <= 0:
                if queued:
                    await _leave(pool, req, log)
                return got
            if still_current is not None and time.monotonic() - checked_at >= STILL_CURRENT_EVERY:
                if not await still_current():
                    await _leave(pool, req, log)
                    raise AttemptAbandoned(
                        f"Temporal no longer waits for this attempt of {req.logical_key} (or "
                        "could not be asked): it left the lease's queue"
                    )
                checked_at = time.monotonic()
            if beating is None:
                log.info(
                    "run.lease-waiting",
                    lock=req.name,
                    held_by=got.held_for,
                    held_by_replay=got.held_by_replay,
                    wait_seconds=round(left, 1),
                )
                if heartbeat is not None:
                    beating = asyncio.create_task(_beat(heartbeat), name=f"wait:{req.logical_key}")
            await asyncio.sleep(min(POLL_EVERY, left))
    except asyncio.CancelledError:
        if queued:
            await asyncio.shield(_leave(pool, req, log))
        raise
    finally:
        if beating is not None:
            # Cancelled, never awaited: an await here is a point where a cancellation of this
            # run would replace the `return` of a lease just taken, and the token would never
            # reach the guard (nothing renews or releases it until its TTL). Not awaiting is
            # safe: the task is parked in its sleep, so it never heartbeats again.
            beating.cancel()


async def _attempt(pool: asyncpg.Pool, req: LeaseRequest, log: Any) -> locks.Acquisition:
    """One acquire statement, shielded: a cancellation cannot tear it between the moment the
    lease is taken on the server and the moment its token reaches us (the statement itself, the
    result on the wire, the connection's return to the pool). The cancelled caller waits for the
    answer and releases what it got."""
    statement = asyncio.ensure_future(_acquire_once(pool, req))
    try:
        return await asyncio.shield(statement)
    except asyncio.CancelledError:
        await asyncio.shield(_release_after_cancel(pool, req, statement, log))
        raise


async def _acquire_once(pool: asyncpg.Pool, req: LeaseRequest) -> locks.Acquisition:
    async with own_statements(pool) as conn:
        return await locks.acquire(
            conn,
            name=req.name,
            holder=req.holder,
            attempt=req.attempt,
            ttl_seconds=req.ttl_seconds,
            logical_key=req.logical_key,
            schedule_id=req.schedule_id,
            run_deadline_seconds=req.run_deadline_seconds,
            replay=req.replay,
            wait_for_any=req.wait_for_any,
            queue_ttl_seconds=QUEUE_TTL_SECONDS,
            sweep_released=req.per_key,
        )


async def _release_after_cancel(
    pool: asyncpg.Pool,
    req: LeaseRequest,
    statement: asyncio.Future[locks.Acquisition],
    log: Any,
) -> None:
    done, _ = await asyncio.wait([statement], timeout=STATEMENT_GRACE_SECONDS)
    try:
        async with own_statements(pool) as conn:
            if not done:
                # No answer in time: release whatever this attempt holds, by its name. Should
                # the statement still land later, the lease expires after its TTL.
                statement.add_done_callback(_retrieve)
                await locks.release_holder(
                    conn, name=req.name, holder=req.holder, attempt=req.attempt
                )
            elif not statement.cancelled() and statement.exception() is None:
                got = statement.result()
                if got.token is not None:
                    await locks.release(conn, name=req.name, token=got.token)
            await locks.leave_queue(conn, name=req.name, waiter=req.holder, attempt=req.attempt)
    except _DB_ERRORS as exc:
        log.warning("run.release-failed", error=str(exc), noticed="cancelled while acquiring")
        return
    log.info("run.lease-released", noticed="cancelled while acquiring")


def _retrieve(future: asyncio.Future[Any]) -> None:
    if not future.cancelled():
        future.exception()


async def _leave(pool: asyncpg.Pool, req: LeaseRequest, log: Any) -> None:
    try:
        async with own_statements(pool) as conn:
            await locks.leave_queue(conn, name=req.name, waiter=req.holder, attempt=req.attempt)
    except _DB_ERRORS as exc:
        # The place expires by itself within QUEUE_TTL_SECONDS.
        log.warning("run.lease-queue-leave-failed", error=str(exc))


async def _beat(heartbeat: Callable[[], None]) -> None:
    while True:
        heartbeat()
        await asyncio.sleep(HEARTBEAT_EVERY)
