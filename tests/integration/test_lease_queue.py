"""The lease's queue on real servers: live fires before replays, replays in arrival order, no
lease or queue place left behind by a cancellation, lease skips recorded, allow_all overlapping."""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

import asyncpg
import pytest

from cronwarden.activities import lease
from cronwarden.activities.lease import LeaseRequest, acquire_lease
from cronwarden.logs import get_logger
from cronwarden.store import locks
from tests.support.database import fetch
from tests.support.waiting import wait_for

pytestmark = pytest.mark.integration

LOG = get_logger("cronwarden.test")


def request(name: str, holder: str, **fields: Any) -> LeaseRequest:
    base: dict[str, Any] = {
        "name": name,
        "holder": holder,
        "attempt": 1,
        "ttl_seconds": 60.0,
        "logical_key": f"{holder}@2026-11-30T04:00:00Z",
        "schedule_id": holder,
        "run_deadline_seconds": None,
        "replay": False,
        "wait_for_any": False,
        "wait_seconds": 0.0,
    }
    return LeaseRequest(**(base | fields))


async def take(pool: asyncpg.Pool, req: LeaseRequest) -> locks.Acquisition:
    """One acquire statement, as one poll of a waiting run makes it."""
    async with pool.acquire() as conn:
        return await take_on(conn, req)


async def take_on(conn: asyncpg.Connection, req: LeaseRequest) -> locks.Acquisition:
    return await locks.acquire(
        conn,
        name=req.name,
        holder=req.holder,
        ttl_seconds=req.ttl_seconds,
        logical_key=req.logical_key,
        attempt=req.attempt,
        schedule_id=req.schedule_id,
        replay=req.replay,
        wait_for_any=req.wait_for_any,
        sweep_released=req.per_key,
    )


async def age_leases(pool: asyncpg.Pool, schedule_id: str) -> None:
    """Make the schedule's leases old enough for a per-key acquire to sweep released ones."""
    async with pool.acquire() as conn:
        await conn.execute(
            "UPDATE cronwarden.locks SET expires_at = now() - interval '2 minutes' "
            "WHERE schedule_id = $1",
            schedule_id,
        )


async def release(pool: asyncpg.Pool, name: str, token: int | None) -> None:
    assert token is not None
    async with pool.acquire() as conn:
        assert await locks.release(conn, name=name, token=token)


async def lock_row(pool: asyncpg.Pool, name: str) -> asyncpg.Record | None:
    rows = await fetch(pool, "SELECT * FROM cronwarden.locks WHERE name = $1", name)
    return rows[0] if rows else None


async def waiters(pool: asyncpg.Pool, name: str) -> list[str]:
    rows = await fetch(
        pool, "SELECT waiter FROM cronwarden.lock_waiters WHERE name = $1 ORDER BY 1", name
    )
    return [r["waiter"] for r in rows]


async def blocked_on_a_lock(pool: asyncpg.Pool, pid: int) -> bool:
    """The backend `pid` is waiting for a row or table lock another transaction holds."""
    rows = await fetch(
        pool,
        "SELECT 1 FROM pg_stat_activity WHERE pid = $1 AND wait_event_type = 'Lock'",
        pid,
    )
    return bool(rows)


async def anyone_blocked_on_a_lock(pool: asyncpg.Pool) -> bool:
    rows = await fetch(
        pool,
        "SELECT 1 FROM pg_stat_activity WHERE datname = current_database()"
        " AND wait_event_type = 'Lock'",
    )
    return bool(rows)


async def commit_key(pool: asyncpg.Pool, key: str) -> None:
    """Another run of `key` committed it."""
    async with pool.acquire() as conn:
        await conn.execute(
            "INSERT INTO cronwarden.outbox (logical_key, schedule_id, fire_time, attempt,"
            " fencing_token, worker, args_digest) VALUES ($1, 's', now(), 1, 1, 'w', 'd')",
            key,
        )


# --- the queue's order, statement by statement -------------------------------------------


async def test_a_replay_never_takes_the_lease_while_a_live_fire_waits_for_it(
    pool: asyncpg.Pool,
) -> None:
    lock = "schedule:q1"
    holding = await take(pool, request(lock, "replay-0", replay=True, wait_for_any=True))
    assert holding.token is not None
    replay = request(lock, "replay-1", replay=True, wait_for_any=True)
    live = request(lock, "live", wait_for_any=False)
    assert (await take(pool, replay)).queued
    # A live skip fire behind a replay waits for it (it is queued), ahead of the earlier replay.
    blocked = await take(pool, live)
    assert (blocked.token, blocked.queued, blocked.held_by_replay) == (None, True, True)

    await release(pool, lock, holding.token)
    assert (await take(pool, replay)).token is None
    assert (await take(pool, live)).token is not None
    assert await waiters(pool, lock) == ["replay-1"]


async def test_a_live_skip_fire_behind_another_live_run_is_not_queued(pool: asyncpg.Pool) -> None:
    lock = "shared-q2"
    other = await take(pool, request(lock, "other-schedule"))
    assert other.token is not None
    skipped = await take(pool, request(lock, "live"))
    assert (skipped.token, skipped.queued, skipped.held_by_replay) == (None, False, False)
    assert skipped.held_for == "other-schedule@2026-11-30T04:00:00Z"
    assert await waiters(pool, lock) == []


async def test_replays_get_a_freed_lease_in_arrival_order(pool: asyncpg.Pool) -> None:
    lock = "schedule:q3"
    holding = await take(pool, request(lock, "replay-0", replay=True, wait_for_any=True))
    first = request(lock, "replay-b", replay=True, wait_for_any=True)
    second = request(lock, "replay-a", replay=True, wait_for_any=True)
    assert (await take(pool, first)).queued
    assert (await take(pool, second)).queued
    await release(pool, lock, holding.token)
    # However often the later one polls, the earlier one gets the lease first.
    for _ in range(3):
        assert (await take(pool, second)).token is None
    assert (await take(pool, first)).token is not None


async def test_a_waiter_that_stopped_polling_stops_blocking_the_queue(pool: asyncpg.Pool) -> None:
    lock = "schedule:q4"
    holding = await take(pool, request(lock, "replay-0", replay=True, wait_for_any=True))
    assert (await take(pool, request(lock, "dead-live", wait_for_any=True))).queued
    async with pool.acquire() as conn:
        await conn.execute(
            "UPDATE cronwarden.lock_waiters SET expires_at = now() - interval '1 second' "
            "WHERE waiter = 'dead-live'"
        )
    await release(pool, lock, holding.token)
    assert (await take(pool, request(lock, "replay-1", replay=True))).token is not None


async def test_taking_a_per_key_lease_sweeps_the_schedules_released_ones(
    pool: asyncpg.Pool,
) -> None:
    # allow_all takes one lease per fire time: released ones must not pile up, one per fire.
    for n in range(3):
        got = await take(pool, request(f"key:sw@{n}", "old", schedule_id="sw"))
        await release(pool, f"key:sw@{n}", got.token)
    running = await take(pool, request("key:sw@running", "run", schedule_id="sw"))
    assert running.token is not None
    await age_leases(pool, "sw")
    async with pool.acquire() as conn:
        new = await locks.acquire(
            conn,
            name="key:sw@9",
            holder="new",
            ttl_seconds=60,
            logical_key="sw@9",
            schedule_id="sw",
            sweep_released=True,
        )
    assert new.token is not None
    rows = await fetch(
        pool, "SELECT name FROM cronwarden.locks WHERE schedule_id = 'sw' ORDER BY 1"
    )
    # The held one stays, however old: it is a run (a retry may still take it over).
    assert [r["name"] for r in rows] == ["key:sw@9", "key:sw@running"]


async def test_the_per_key_sweep_takes_the_places_of_dead_waiters_with_the_leases(
    pool: asyncpg.Pool,
) -> None:
    # A replay queued at a per-fire-time lease and died there: nobody takes that lease again
    # once its key is done, so its place would outlive the swept lease for ever.
    held = await take(pool, request("key:pw@1", "live", schedule_id="pw"))
    queued = await take(
        pool, request("key:pw@1", "dead", schedule_id="pw", replay=True, wait_for_any=True)
    )
    assert queued.queued
    await release(pool, "key:pw@1", held.token)
    await age_leases(pool, "pw")
    async with pool.acquire() as conn:
        await conn.execute(
            "UPDATE cronwarden.lock_waiters SET expires_at = now() - interval '2 minutes'"
            " WHERE name = 'key:pw@1'"
        )
    new = await take(pool, request("key:pw@2", "next", schedule_id="pw", per_key=True))
    assert new.token is not None
    assert await lock_row(pool, "key:pw@1") is None
    assert await waiters(pool, "key:pw@1") == []


async def test_a_live_fire_refused_by_a_replay_that_took_the_lease_meanwhile_waits_for_it(
    pool: asyncpg.Pool,
) -> None:
    lock = "schedule:q5"
    first = await take(pool, request(lock, "replay-1", replay=True, wait_for_any=True))
    second = request(lock, "replay-2", replay=True, wait_for_any=True)
    assert (await take(pool, second)).queued
    await release(pool, lock, first.token)
    live = request(lock, "live")
    async with pool.acquire() as replay_conn, pool.acquire() as live_conn:
        # The queued replay's poll takes the freed lease; until its statement commits it holds
        # the lock row. The live fire's first poll starts meanwhile: its snapshot shows the
        # lease free and nobody ahead, so it waits on the row, then is refused by the replay.
        tx = replay_conn.transaction()
        await tx.start()
        got = await take_on(replay_conn, second)
        assert got.token is not None
        pid = live_conn.get_server_pid()
        polling = asyncio.create_task(take_on(live_conn, live))
        await wait_for(
            lambda: blocked_on_a_lock(pool, pid), timeout=10, what="the live poll to wait"
        )
        await tx.commit()
        refused = await asyncio.wait_for(polling, timeout=10)
    # Refused by a replay, it waits for it (a replay never costs a live fire), and says so.
    assert (refused.token, refused.queued, refused.held_by_replay) == (None, True, True)
    assert refused.held_for == second.logical_key
    assert await waiters(pool, lock) == ["live"]


async def test_a_live_fire_refused_by_a_replay_creating_the_lease_row_waits_for_it(
    pool: asyncpg.Pool,
) -> None:
    # As above, on a lease whose row the replay creates: no read of the live poll's snapshot
    # shows that row, so the live fire asks again and queues behind the replay.
    lock = "schedule:q9"
    async with pool.acquire() as replay_conn:
        tx = replay_conn.transaction()
        await tx.start()
        first = await take_on(replay_conn, request(lock, "replay", replay=True))
        assert first.token is not None
        live = asyncio.create_task(
            acquire_lease(pool, request(lock, "live", wait_seconds=60), log=LOG)
        )
        await wait_for(
            lambda: anyone_blocked_on_a_lock(pool), timeout=10, what="the live poll to wait"
        )
        await tx.commit()
    await wait_for(lambda: waiters(pool, lock), timeout=10, what="the live fire to queue")
    await release(pool, lock, first.token)
    got = await asyncio.wait_for(live, timeout=10)
    assert got.token is not None


async def test_a_queued_run_that_finds_its_key_done_leaves_the_queue(pool: asyncpg.Pool) -> None:
    lock = "shared-q6"
    holding = await take(pool, request(lock, "replay-0", replay=True))
    buffered = request(lock, "buffered", wait_for_any=True)
    assert (await take(pool, buffered)).queued
    await commit_key(pool, buffered.logical_key)
    assert (await take(pool, buffered)).already_done
    assert await waiters(pool, lock) == []
    # No ghost ahead: a live skip fire of a schedule sharing the lock takes the freed lease.
    await release(pool, lock, holding.token)
    assert (await take(pool, request(lock, "live"))).token is not None


async def test_an_attempt_temporal_retried_keeps_no_place_in_the_queue(
    pool: asyncpg.Pool,
) -> None:
    lock = "shared-q7"
    holding = await take(pool, request(lock, "other"))
    first = request(lock, "wf/run/1", attempt=1, wait_for_any=True)
    assert (await take(pool, first)).queued
    await release(pool, lock, holding.token)
    # Temporal declared attempt 1 dead and retried it: the retry takes the lease.
    retry = await take(pool, dataclasses.replace(first, attempt=2))
    assert retry.token is not None
    assert await waiters(pool, lock) == []
    # Attempt 1 is in fact alive (a partitioned worker) and keeps polling: no place for it.
    late = await take(pool, first)
    assert (late.token, late.queued) == (None, False)
    assert await waiters(pool, lock) == []
    await release(pool, lock, retry.token)
    assert (await take(pool, request(lock, "live"))).token is not None


async def test_an_earlier_attempt_neither_refreshes_nor_removes_its_retrys_place(
    pool: asyncpg.Pool,
) -> None:
    lock = "shared-q8"
    await take(pool, request(lock, "other"))
    first = request(lock, "wf/run/1", attempt=1, wait_for_any=True)
    assert (await take(pool, first)).queued
    assert (await take(pool, dataclasses.replace(first, attempt=2))).queued
    assert not (await take(pool, first)).queued
    async with pool.acquire() as conn:
        # Attempt 1 giving up leaves its own place only, not the retry's.
        await locks.leave_queue(conn, name=lock, waiter="wf/run/1", attempt=1)
    rows = await fetch(pool, "SELECT attempt FROM cronwarden.lock_waiters WHERE name = $1", lock)
    assert [r["attempt"] for r in rows] == [2]


async def test_an_earlier_attempt_never_takes_a_lease_its_retry_released(
    pool: asyncpg.Pool,
) -> None:
    lock = "shared-q9"
    retry = await take(pool, request(lock, "wf/run/1", attempt=2))
    await release(pool, lock, retry.token)
    late = await take(pool, request(lock, "wf/run/1", attempt=1))
    assert late.token is None and not late.queued


async def test_an_earlier_attempt_never_takes_the_lease_ahead_of_its_queued_retry(
    pool: asyncpg.Pool,
) -> None:
    lock = "shared-q10"
    held = await take(pool, request(lock, "other"))
    retry = request(lock, "wf/run/1", attempt=2, wait_for_any=True)
    assert (await take(pool, retry)).queued
    await release(pool, lock, held.token)
    late = await take(pool, dataclasses.replace(retry, attempt=1))
    assert late.token is None and not late.queued
    # The retry keeps its place, and the lease is its to take.
    assert await waiters(pool, lock) == ["wf/run/1"]
    assert (await take(pool, retry)).token is not None


async def test_a_lease_row_deleted_while_an_acquire_waits_to_lock_it_is_made_again_and_taken(
    pool: asyncpg.Pool,
) -> None:
    # A per-key sweep of another fire deleting an old released row, between the acquire's
    # insert (which found the row and did nothing) and its lock of it.
    name = "key:gone@1"
    async with pool.acquire() as conn:
        await conn.execute(
            "INSERT INTO cronwarden.locks (name, holder, attempt, token, expires_at, acquired_at,"
            " schedule_id) VALUES ($1, NULL, 1, 0, now() - interval '5 minutes',"
            " now() - interval '5 minutes', 'gone')",
            name,
        )
    sweeper = await pool.acquire()
    try:
        await sweeper.execute("BEGIN")
        await sweeper.execute("SELECT 1 FROM cronwarden.locks WHERE name = $1 FOR UPDATE", name)
        async with pool.acquire() as conn:
            pid = conn.get_server_pid()
            # The statement store/locks.py sends, with a lock timeout long enough to wait here.
            waiting = asyncio.ensure_future(
                conn.fetchrow(
                    "SELECT * FROM cronwarden.acquire_lease($1, $2, 60, $3, 1, 'gone', NULL, 0,"
                    " 5, false, true, 30000)",
                    name,
                    "live",
                    "gone@1",
                )
            )

            async def blocked() -> bool:
                return await blocked_on_a_lock(pool, pid)

            await wait_for(blocked, timeout=10, what="the acquire waiting to lock the row")
            await sweeper.execute("DELETE FROM cronwarden.locks WHERE name = $1", name)
            await sweeper.execute("COMMIT")
            got = await waiting
    finally:
        await pool.release(sweeper)
    assert got["token"] is not None, dict(got)


async def test_the_per_key_sweep_leaves_schedule_and_shared_leases_alone(
    pool: asyncpg.Pool,
) -> None:
    # The last run holding `schedule:ks` and the shared lock was schedule ks's, but they are
    # not per-key leases: they stay, whichever schedule last held them.
    for name in ("schedule:ks", "shared-ks", "key:ks@2026-11-30T04:00:00Z"):
        got = await take(pool, request(name, "old", schedule_id="ks"))
        await release(pool, name, got.token)
    await age_leases(pool, "ks")
    new = await take(
        pool, request("key:ks@2026-11-30T05:00:00Z", "new", schedule_id="ks", per_key=True)
    )
    assert new.token is not None
    rows = await fetch(
        pool, "SELECT name FROM cronwarden.locks WHERE schedule_id = 'ks' ORDER BY 1"
    )
    assert [r["name"] for r in rows] == ["key:ks@2026-11-30T05:00:00Z", "schedule:ks", "shared-ks"]


async def test_two_per_key_acquires_sweeping_each_others_old_leases_never_deadlock(
    pool: asyncpg.Pool,
) -> None:
    one, two = "key:dl@2026-11-30T04:00:00Z", "key:dl@2026-11-30T05:00:00Z"
    for name in (one, two):
        got = await take(pool, request(name, "old", schedule_id="dl"))
        await release(pool, name, got.token)
    await age_leases(pool, "dl")
    async with pool.acquire() as first, pool.acquire() as second:
        # First takes `two` back (a late run of that key) and is on its way to sweep `one`;
        # second takes `one` back and sweeps meanwhile. Without SKIP LOCKED each waits for the
        # row the other holds.
        tx = first.transaction()
        await tx.start()
        again = await take_on(first, request(two, "again", schedule_id="dl"))
        assert again.token is not None
        pid = second.get_server_pid()
        sweeping = asyncio.create_task(
            take_on(second, request(one, "again", schedule_id="dl", per_key=True))
        )

        async def done_or_blocked() -> bool:
            return sweeping.done() or await blocked_on_a_lock(pool, pid)

        await wait_for(done_or_blocked, timeout=10, what="the second sweep to end or wait")
        # The rest of first's statement: its sweep reaching `one`.
        await first.execute("SELECT 1 FROM cronwarden.locks WHERE name = $1 FOR UPDATE", one)
        await tx.commit()
        got = await asyncio.wait_for(sweeping, timeout=10)
    assert got.token is not None


# --- cancellations ---------------------------------------------------------------------


async def test_a_cancellation_after_the_acquire_statement_landed_releases_the_lease(
    pool: asyncpg.Pool, monkeypatch: pytest.MonkeyPatch
) -> None:
    lock = "schedule:c1"
    landed = asyncio.Event()
    answer = asyncio.Event()
    real_acquire = locks.acquire

    async def answer_late(conn: Any, **kwargs: Any) -> locks.Acquisition:
        # The lease is taken on the server; its token is still on its way to the worker (the
        # result on the wire, the connection going back to the pool) when the cancel strikes.
        got = await real_acquire(conn, **kwargs)
        landed.set()
        await answer.wait()
        return got

    monkeypatch.setattr(locks, "acquire", answer_late)
    acquiring = asyncio.create_task(acquire_lease(pool, request(lock, "run"), log=LOG))
    await asyncio.wait_for(landed.wait(), timeout=10)
    row = await lock_row(pool, lock)
    assert row is not None and row["holder"] == "run"

    acquiring.cancel()
    answer.set()
    with pytest.raises(asyncio.CancelledError):
        await acquiring
    row = await lock_row(pool, lock)
    assert row is not None and row["holder"] is None


async def test_a_cancellation_as_the_wait_winds_down_never_loses_a_lease_just_taken(
    pool: asyncpg.Pool, monkeypatch: pytest.MonkeyPatch
) -> None:
    lock = "schedule:c4"
    holding = await take(pool, request(lock, "other", replay=True))
    stopping = asyncio.Event()
    stopped = asyncio.Event()

    async def slow_to_stop(heartbeat: Any) -> None:
        # The wait's Temporal heartbeats take a moment to stop: the moment the cancel strikes.
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            stopping.set()
            await stopped.wait()
            raise

    monkeypatch.setattr(lease, "_beat", slow_to_stop)
    waiting = asyncio.create_task(
        acquire_lease(pool, request(lock, "live", wait_seconds=60), log=LOG, heartbeat=lambda: None)
    )
    await wait_for(lambda: waiters(pool, lock), timeout=10, what="the live fire to queue")
    await release(pool, lock, holding.token)
    await asyncio.wait_for(stopping.wait(), timeout=10)
    waiting.cancel()
    stopped.set()
    try:
        got: locks.Acquisition | None = await waiting
    except asyncio.CancelledError:
        got = None
    row = await lock_row(pool, lock)
    assert row is not None
    # The lease is in the caller's hands (its token came back) or released, never held by
    # nobody until its TTL.
    assert row["holder"] is None or (got is not None and got.token == row["token"])


async def test_a_cancellation_while_queued_leaves_the_queue(pool: asyncpg.Pool) -> None:
    lock = "schedule:c2"
    holding = await take(pool, request(lock, "other"))
    assert holding.token is not None
    waiting = asyncio.create_task(
        acquire_lease(pool, request(lock, "run", wait_for_any=True, wait_seconds=60), log=LOG)
    )
    await wait_for(lambda: waiters(pool, lock), timeout=10, what="the run to queue")
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    assert await waiters(pool, lock) == []
    row = await lock_row(pool, lock)
    assert row is not None and row["holder"] == "other"


async def test_a_waiting_run_gets_the_lease_once_it_is_released(pool: asyncpg.Pool) -> None:
    lock = "schedule:c3"
    holding = await take(pool, request(lock, "other", replay=True))
    waiting = asyncio.create_task(
        acquire_lease(pool, request(lock, "live", wait_seconds=60), log=LOG)
    )
    await wait_for(lambda: waiters(pool, lock), timeout=10, what="the live fire to queue")
    await release(pool, lock, holding.token)
    got = await asyncio.wait_for(waiting, timeout=10)
    assert got.token is not None
    assert await waiters(pool, lock) == []
