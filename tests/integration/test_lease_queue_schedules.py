"""The lease's queue under real schedules: a backfill beside live fires costs no live fire,
fifty replays of one schedule all run, a fire skipped at a shared lease is recorded and shown,
and allow_all runs overlap. (The queue's order statement by statement is test_lease_queue.py.)"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import asyncpg
import pytest
import pytest_asyncio
from temporalio.client import Client, ScheduleHandle
from temporalio.worker import Worker

from cronwarden.activities.contract import logical_key
from cronwarden.backfill.plan import load_managed, plan
from cronwarden.backfill.replay import FAILED, REPLAYED, replay_all
from cronwarden.backfill.window import Window
from cronwarden.schedules.apply import apply_definitions
from cronwarden.store import locks
from tests.support.cli import cli, cli_json, iso
from tests.support.database import committed_times, fetch
from tests.support.runs import queued_at
from tests.support.schedules import definition
from tests.support.waiting import wait_for

pytestmark = pytest.mark.integration


async def cli_text(env: dict[str, str], *args: str) -> str:
    result = await cli(env, *args, timeout=120)
    assert result.code == 0, result.stderr
    return result.stdout


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
    created_at = (await handle.describe()).info.created_at.replace(microsecond=0)
    # The subject is the backfill beside live fires, not which fires an outage misses: ten
    # missed keys are named directly, from a minute before the schedule existed.
    missing = [created_at - timedelta(seconds=s) for s in range(60, 30, -3)]
    managed = await load_managed(client, schedule_id)
    started = datetime.now(UTC)
    summary = await replay_all(client, managed, missing, concurrency=4, lock_wait=60)
    finished = datetime.now(UTC)
    assert summary.counts[REPLAYED] == len(missing) == 10, summary.failures

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

    # Every live fire since the schedule's creation is committed: none was lost to a replay.
    managed = await load_managed(client, schedule_id)
    after = await plan(client, pool, managed, Window(created_at, max(done)))
    assert list(after.missing_times()) == []
    counts = await effects_per_key(pool, schedule_id)
    assert len(counts) == len(done)
    assert set(counts.values()) == {1}
    # ... and every replayed key has its one record and its one effect.
    assert {logical_key(schedule_id, t) for t in missing} <= counts.keys()
    assert set(missing) <= set(done)


async def _committed_after(pool: asyncpg.Pool, schedule_id: str, moment: datetime) -> bool:
    return any(t > moment for t in await committed_times(pool, schedule_id))


HOLD_SECONDS = 0.3
LOCK_WAIT = 8


@pytest.mark.parametrize("overlap", ["skip", "buffer_one"])
async def test_fifty_replays_queued_at_one_lease_all_run_in_one_backfill(
    client: Client,
    pool: asyncpg.Pool,
    task_queue: str,
    worker: Worker,
    schedule: tuple[str, ScheduleHandle],
    overlap: str,
    tmp_path: Path,
) -> None:
    schedule_id, handle = schedule
    # The first replay to take the lease waits at a gate until the three others in flight are
    # queued behind it: the queue is certainly in use, whatever the machine's speed. Then each
    # replay holds the lease HOLD_SECONDS: the fifty take far longer than one replay's lock wait,
    # so a wait counted from the backfill's start instead of the replay's own fails the late ones.
    # Hourly: no live fire between the apply and the pause can take a key or the lease.
    gate = tmp_path / "gate"
    args = {"gate": str(gate), "hold_seconds": HOLD_SECONDS}
    defn = definition(schedule_id, every="1h", job="gated", args=args, overlap=overlap)
    await apply_definitions(client, pool, [defn], task_queue=task_queue)
    await handle.pause(note="test: the outage")
    # The subject is the lease's queue, not which fires an outage misses: the fifty missed keys
    # are named directly (a minute before the schedule existed, so no live fire is among them)
    # instead of waiting out fifty seconds of a real outage.
    created_at = (await handle.describe()).info.created_at.replace(microsecond=0)
    missing = [created_at - timedelta(seconds=s) for s in range(60, 10, -1)]
    managed = await load_managed(client, schedule_id)
    began = time.monotonic()
    # The CLI's 4 replays in flight; a lock wait well under the whole backfill's length.
    replaying = asyncio.create_task(
        replay_all(client, managed, missing, concurrency=4, lock_wait=LOCK_WAIT)
    )
    lease = f"schedule:{schedule_id}"
    try:
        await wait_for(
            lambda: queued_at(pool, lease, at_least=3),
            timeout=60,
            what="three replays queued behind the first",
        )
    except BaseException:
        replaying.cancel()
        raise
    finally:
        gate.touch()
    summary = await replaying
    wall = time.monotonic() - began
    # Reported, not asserted (performance is for bench/).
    print(f"\nbackfill of {len(missing)} keys ({overlap}): {wall:.1f} s")
    assert summary.counts[FAILED] == 0, summary.failures
    assert summary.counts[REPLAYED] == len(missing) == 50
    assert len(missing) * HOLD_SECONDS > LOCK_WAIT, "the lease was never held past a lock wait"
    counts = await effects_per_key(pool, schedule_id)
    assert sorted(counts) == sorted(logical_key(schedule_id, t) for t in missing)
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
