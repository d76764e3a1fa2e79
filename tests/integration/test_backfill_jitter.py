"""Backfill and audit of jittered schedules on real servers: plans name nominal fire times only,
whatever definition history exists, and a fire is not missing before its jitter has run out."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import asyncpg
import pytest
from temporalio.client import Client, ScheduleActionExecutionStartWorkflow, ScheduleHandle
from temporalio.worker import Worker

from cronwarden.activities.contract import logical_key
from cronwarden.backfill.audit import audit
from cronwarden.backfill.plan import load_managed, plan
from cronwarden.backfill.replay import REPLAYED, replay_all, replay_one
from cronwarden.backfill.window import Window
from cronwarden.schedules.apply import apply_definitions
from tests.support.cli import cli_json, iso
from tests.support.database import fetch
from tests.support.schedules import definition
from tests.support.waiting import clock_past, wait_for

pytestmark = pytest.mark.integration


async def _applied_and_paused(
    client: Client, pool: asyncpg.Pool, task_queue: str, schedule_id: str, **fields: str
) -> tuple[ScheduleHandle, datetime]:
    """The schedule applied and paused at once, no run of it left: every fire time from its
    creation on has no outbox record unless the test gives it one. Its creation time."""
    defn = definition(schedule_id, **fields)
    await apply_definitions(client, pool, [defn], task_queue=task_queue)
    handle = client.get_schedule_handle(schedule_id)
    await handle.pause(note="test: no live fire")
    description = await handle.describe()
    for action in description.info.running_actions:
        if isinstance(action, ScheduleActionExecutionStartWorkflow):
            await client.get_workflow_handle(action.workflow_id).terminate()
    return handle, description.info.created_at


async def _effects(pool: asyncpg.Pool, schedule_id: str) -> dict[str, int]:
    rows = await fetch(
        pool,
        "SELECT logical_key, count(*) AS n FROM test_effects WHERE logical_key LIKE $1 GROUP BY 1",
        f"{schedule_id}@%",
    )
    return {r["logical_key"]: r["n"] for r in rows}


async def _committed(pool: asyncpg.Pool, schedule_id: str) -> set[datetime]:
    rows = await fetch(
        pool, "SELECT fire_time FROM cronwarden.outbox WHERE schedule_id = $1", schedule_id
    )
    return {r["fire_time"] for r in rows}


def _grid(created_at: datetime, every: int, count: int) -> list[datetime]:
    """The first `count` slots of `every: {every}s` after `created_at`: Temporal aligns
    intervals to the epoch, and a schedule fires only strictly after its creation."""
    first = int(created_at.timestamp()) + 1
    first += -first % every
    return [datetime.fromtimestamp(first + i * every, UTC) for i in range(count)]


async def test_a_jittered_schedule_without_history_is_planned_at_its_nominal_times_once(
    client: Client,
    pool: asyncpg.Pool,
    task_queue: str,
    schedule_id: str,
    worker: Worker,
) -> None:
    # Jitter as wide as the interval: a fire's start falls anywhere before the next slot, so a
    # jittered time lands on its own slot's second only by chance (1 in 4 for each fire).
    handle, created_at = await _applied_and_paused(
        client, pool, task_queue, schedule_id, every="4s", jitter="4s"
    )
    try:
        # The history row is gone, as for a create whose history write failed or a schedule
        # older than the history: the live schedule's spec is all there is to judge by.
        await pool.execute(
            "DELETE FROM cronwarden.definition_history WHERE schedule_id = $1", schedule_id
        )
        slots = _grid(created_at, 4, 6)
        end = slots[-1]
        await wait_for(
            lambda: clock_past(end + timedelta(seconds=5)), timeout=60, what="the slots to pass"
        )
        schedule = await load_managed(client, schedule_id)
        # One fire committed, as a live run would have: it must never be applied again.
        assert (await replay_one(client, schedule, slots[2], lock_wait=10)).outcome == REPLAYED
        done = await _committed(pool, schedule_id)
        missing = [t for t in slots if t not in done]
        # What `backfill plan` computes and prints with --json.
        p = await plan(client, pool, schedule, Window(created_at - timedelta(minutes=1), end))
        planned = p.counts_json() | {"missing_keys": p.missing_keys()}
        assert planned["missing_keys"] == [logical_key(schedule_id, t) for t in missing]
        assert (planned["expected"], planned["done"]) == (len(slots), len(slots) - len(missing))
        # The whole window was judged without a history row, and the plan says so.
        [part] = planned["judged_by"]
        assert (part["source"], part["applied_at"], part["jitter_seconds"]) == ("live", None, 4)
        assert (part["start"], part["end"]) == (planned["window"]["start"], iso(end))
        assert any("no recorded definition" in line for line in p.notes())

        # What `backfill run` does with it: each missing time replayed through the guard.
        summary = await replay_all(client, schedule, p.missing_times(), concurrency=2, lock_wait=10)
        assert summary.counts[REPLAYED] == len(missing)
    finally:
        await handle.delete()
    # One effect per fire, under its nominal key, and none under any other key.
    assert await _effects(pool, schedule_id) == {logical_key(schedule_id, t): 1 for t in slots}


async def test_a_jittered_fire_is_not_missing_before_its_jitter_has_run_out(
    client: Client,
    pool: asyncpg.Pool,
    task_queue: str,
    schedule_id: str,
    worker: Worker,
    cli_env: dict[str, str],
) -> None:
    # A jitter far longer than the test: every slot that passes during it may still start (the
    # rule is the spec's jitter, whatever Temporal would actually draw).
    jitter = timedelta(minutes=5)
    handle, created_at = await _applied_and_paused(
        client, pool, task_queue, schedule_id, every="2s", jitter="5m"
    )
    try:
        slots = _grid(created_at, 2, 3)
        await wait_for(lambda: clock_past(slots[-1]), timeout=30, what="three slots to pass")
        schedule = await load_managed(client, schedule_id)
        window = Window(created_at, datetime.now(UTC).replace(microsecond=0))
        expected = {int(t.timestamp()) for t in slots}

        planned = await plan(client, pool, schedule, window)
        audited = await audit(client, pool, schedule, window)
        # Their nominal times have passed, their jitter has not: not missing, awaiting it.
        assert len(planned.missing) == len(audited.missing) == 0
        assert expected <= set(planned.awaiting_jitter) == set(audited.awaiting_jitter.seconds)
        assert planned.expected == audited.expected == len(planned.awaiting_jitter)
        assert audited.as_json()["awaiting_jitter"] == planned.expected

        # The commands agree, and a run up to now replays nothing.
        report = await cli_json(cli_env, "audit", schedule_id, "--since", iso(created_at))
        assert report["missing"] == 0
        assert report["missing_keys"] == []
        p = await plan(client, pool, schedule, Window(created_at, datetime.now(UTC)))
        summary = await replay_all(client, schedule, p.missing_times(), concurrency=2, lock_wait=10)
        assert summary.counts[REPLAYED] == 0

        # Once the jitter has run out (judged at a later `now`), the same fires are missing.
        later = window.end + jitter + timedelta(seconds=1)
        late_plan = await plan(client, pool, schedule, window, now=later)
        late_audit = await audit(client, pool, schedule, window, now=later)
    finally:
        await handle.delete()
    assert list(late_plan.missing) == list(planned.awaiting_jitter)
    assert list(late_audit.missing.seconds) == list(planned.awaiting_jitter)
    assert len(late_plan.awaiting_jitter) == len(late_audit.awaiting_jitter) == 0
    assert await _effects(pool, schedule_id) == {}
