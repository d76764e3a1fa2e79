"""The lease's queue on real servers: live fires before replays, replays in arrival order, no
lease or queue place left behind by a cancellation, lease skips recorded, allow_all overlapping."""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import json
import time
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
import pytest
import pytest_asyncio
from temporalio.client import Client, ScheduleHandle
from temporalio.worker import Worker

from activities import lease
from activities.lease import LeaseRequest, acquire_lease
from cronwarden.logs import get_logger
from schedules.apply import apply_definitions
from schedules.backfill import load_managed, plan
from schedules.replay import FAILED, REPLAYED, replay_all
from schedules.window import Window
from store import locks
from tests.integration.conftest import REPO_ROOT, cronwarden_argv, fetch, wait_for
from tests.support.schedules import definition

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


# --- on real schedules -------------------------------------------------------------------


async def cli_text(env: dict[str, str], *args: str) -> str:
    proc = await asyncio.create_subprocess_exec(
        *cronwarden_argv("--log-json", *args),
        env=env,
        cwd=REPO_ROOT,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), timeout=120)
    assert proc.returncode == 0, err.decode()
    return out.decode()


async def cli_json(env: dict[str, str], *args: str) -> Any:
    return json.loads(await cli_text(env, *args, "--json"))


def iso(value: datetime) -> str:
    return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


async def committed_times(pool: asyncpg.Pool, schedule_id: str) -> list[datetime]:
    rows = await fetch(
        pool,
        "SELECT fire_time FROM cronwarden.outbox WHERE schedule_id = $1 ORDER BY 1",
        schedule_id,
    )
    return [r["fire_time"] for r in rows]


async def effects_per_key(pool: asyncpg.Pool, schedule_id: str) -> dict[str, int]:
    rows = await fetch(
        pool,
        "SELECT logical_key, count(*) AS n FROM test_effects WHERE logical_key LIKE $1 GROUP BY 1",
        f"{schedule_id}@%",
    )
    return {r["logical_key"]: r["n"] for r in rows}


async def clock_past(moment: datetime) -> bool:
    return datetime.now(UTC) > moment


async def nothing_running(handle: ScheduleHandle) -> bool:
    return not (await handle.describe()).info.running_actions


@pytest_asyncio.fixture(loop_scope="session")
async def schedule(client: Client, schedule_id: str) -> AsyncIterator[tuple[str, ScheduleHandle]]:
    handle = client.get_schedule_handle(schedule_id)
    try:
        yield schedule_id, handle
    finally:
        await handle.delete()


async def test_a_backfill_while_the_schedule_fires_costs_no_live_fire(
    client: Client,
    pool: asyncpg.Pool,
    task_queue: str,
    worker: Worker,
    schedule: tuple[str, ScheduleHandle],
) -> None:
    # Every 3 s, a job a third of that: the replays keep the lease busy back to back, so every
    # live fire during the backfill finds a replay holding it.
    schedule_id, handle = schedule
    defn = definition(schedule_id, every="3s", args={"sleep": 1.0}, overlap="skip")
    await apply_definitions(client, pool, [defn], task_queue=task_queue)
    await handle.pause(note="test: the outage")
    created_at = (await handle.describe()).info.created_at
    outage_end = created_at + timedelta(seconds=30)
    await wait_for(lambda: clock_past(outage_end), timeout=40, what="the outage")
    # Under load the unpause lands seconds after outage_end: every fire up to the moment it was
    # sent fell in the pause and belongs to the backfill. A fire inside the unpause call itself
    # may go either way; it is the test's own doing, so the final check leaves it out.
    unpause_sent = datetime.now(UTC)
    await handle.unpause()
    unpause_done = datetime.now(UTC)

    managed = await load_managed(client, schedule_id)
    missed = await plan(
        client, pool, managed, Window(created_at, unpause_sent.replace(microsecond=0))
    )
    assert len(missed.missing) >= 9
    started = datetime.now(UTC)
    summary = await replay_all(client, managed, missed.missing_times(), concurrency=4, lock_wait=60)
    finished = datetime.now(UTC)
    assert summary.counts[REPLAYED] == len(missed.missing), summary.failures

    # One more live fire after the backfill, then freeze and let the last run finish.
    await wait_for(
        lambda: _committed_after(pool, schedule_id, finished),
        timeout=30,
        what="a live fire after the backfill",
    )
    await handle.pause(note="test: freeze the window")
    await wait_for(lambda: nothing_running(handle), timeout=30, what="the last run to end")
    done = await committed_times(pool, schedule_id)
    live_during = [t for t in done if started <= t <= finished]
    assert live_during, "no live fire fell inside the backfill: the test proved nothing"

    managed = await load_managed(client, schedule_id)
    after = await plan(client, pool, managed, Window(created_at, max(done)))
    lost = [t for t in after.missing_times() if not unpause_sent < t <= unpause_done]
    assert lost == []
    counts = await effects_per_key(pool, schedule_id)
    assert len(counts) == len(done)
    assert set(counts.values()) == {1}


async def _committed_after(pool: asyncpg.Pool, schedule_id: str, moment: datetime) -> bool:
    return any(t > moment for t in await committed_times(pool, schedule_id))


@pytest.mark.parametrize("overlap", ["skip", "buffer_one"])
async def test_fifty_replays_of_a_one_second_job_all_run_in_one_backfill(
    client: Client,
    pool: asyncpg.Pool,
    task_queue: str,
    worker: Worker,
    schedule: tuple[str, ScheduleHandle],
    overlap: str,
) -> None:
    schedule_id, handle = schedule
    defn = definition(schedule_id, every="1s", args={"sleep": 1.0}, overlap=overlap)
    await apply_definitions(client, pool, [defn], task_queue=task_queue)
    await handle.pause(note="test: the outage")
    created_at = (await handle.describe()).info.created_at
    end = created_at + timedelta(seconds=51)
    await wait_for(lambda: clock_past(end), timeout=65, what="the outage")

    managed = await load_managed(client, schedule_id)
    missed = await plan(client, pool, managed, Window(created_at, end.replace(microsecond=0)))
    assert len(missed.missing) >= 50
    began = time.monotonic()
    # The CLI's defaults: 4 replays in flight, 60 s of lock wait each.
    summary = await replay_all(client, managed, missed.missing_times(), concurrency=4, lock_wait=60)
    wall = time.monotonic() - began
    # Reported, not asserted (performance is for bench/): compare with len(missing) seconds.
    print(f"\nbackfill of {len(missed.missing)} x 1 s ({overlap}): {wall:.1f} s")
    assert summary.counts[FAILED] == 0, summary.failures
    assert summary.counts[REPLAYED] == len(missed.missing)
    counts = await effects_per_key(pool, schedule_id)
    assert len(counts) == len(missed.missing)
    assert set(counts.values()) == {1}


async def test_a_live_fire_skipped_at_a_shared_lease_is_recorded_and_shown_with_the_holder(
    client: Client,
    pool: asyncpg.Pool,
    task_queue: str,
    worker: Worker,
    schedule: tuple[str, ScheduleHandle],
    cli_env: dict[str, str],
) -> None:
    schedule_id, handle = schedule
    lock = f"shared-{schedule_id}"
    other_key = "other-schedule@2026-11-30T04:00:00Z"
    async with pool.acquire() as conn:
        # Another schedule sharing the lock holds it throughout (a long run of its job).
        held = await locks.acquire(
            conn, name=lock, holder="other", ttl_seconds=300, logical_key=other_key
        )
    assert held.token is not None
    await apply_definitions(
        client, pool, [definition(schedule_id, every="2s", lock=lock)], task_queue=task_queue
    )
    created_at = (await handle.describe()).info.created_at

    async def skipped() -> dict[str, Any] | None:
        rows = await fetch(
            pool, "SELECT * FROM cronwarden.heartbeats WHERE schedule_id = $1", schedule_id
        )
        return dict(rows[0]) if rows and rows[0]["lease_skips"] >= 1 else None

    beat = await wait_for(skipped, timeout=30, what="a fire skipped at the lease")
    assert beat is not None
    await handle.pause(note="test: freeze")
    await wait_for(lambda: nothing_running(handle), timeout=30, what="the last run to end")
    assert beat["last_lease_skip_holder"] == other_key
    assert beat["last_success_at"] is None

    status = await cli_json(cli_env, "status")
    row = next(r for r in status["schedules"] if r["schedule_id"] == schedule_id)
    assert row["skipped_lease"] >= 1
    assert row["last_lease_skip"]["holder"] == other_key
    described = await cli_json(cli_env, "schedules", "describe", schedule_id)
    assert described["heartbeat"]["skipped_lease"] >= 1
    assert described["heartbeat"]["last_lease_skip"]["holder"] == other_key
    audited = await cli_json(cli_env, "audit", schedule_id, "--since", iso(created_at))
    last = audited["lease"]["last_skip"]
    assert audited["lease"]["skipped_total"] >= 1
    assert last["holder"] == other_key
    assert audited["skipped_lease_keys"] == [last["logical_key"]]
    assert last["logical_key"] in audited["missing_keys"]

    # The human forms say it too, with the holder.
    assert "at the lease)" in await cli_text(cli_env, "status")
    described_text = await cli_text(cli_env, "schedules", "describe", schedule_id)
    assert f"(lease held by {other_key})" in described_text
    audit_text = await cli_text(cli_env, "audit", schedule_id, "--since", iso(created_at))
    assert f"  skipped {last['logical_key']} (lease held by {other_key})" in audit_text


async def test_allow_all_runs_a_job_slower_than_its_period_concurrently(
    client: Client,
    pool: asyncpg.Pool,
    task_queue: str,
    worker: Worker,
    schedule: tuple[str, ScheduleHandle],
) -> None:
    schedule_id, handle = schedule
    # Each run takes 3 s, one starts every second: only overlapping runs commit every key.
    defn = definition(
        schedule_id, every="1s", job="slow-read", args={"sleep": 3.0}, overlap="allow_all"
    )
    await apply_definitions(client, pool, [defn], task_queue=task_queue)

    async def four_in_a_row() -> bool:
        times = await committed_times(pool, schedule_id)
        run = 1
        for earlier, later in itertools.pairwise(times):
            run = run + 1 if later - earlier == timedelta(seconds=1) else 1
            if run >= 4:
                return True
        return False

    await wait_for(four_in_a_row, timeout=40, what="four consecutive fires committed")
    await handle.pause(note="test: freeze")
    await wait_for(lambda: nothing_running(handle), timeout=30, what="the last runs to end")
    rows = await fetch(
        pool, "SELECT lease_skips FROM cronwarden.heartbeats WHERE schedule_id = $1", schedule_id
    )
    assert rows[0]["lease_skips"] == 0
    # Each run's lease is named for its logical key, so it names the schedule too.
    names = await fetch(
        pool, "SELECT name, logical_key FROM cronwarden.locks WHERE schedule_id = $1", schedule_id
    )
    assert names and all(r["name"] == f"key:{r['logical_key']}" for r in names)
