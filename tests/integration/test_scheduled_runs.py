"""Schedules firing for real on the dev server, through the worker and the guard."""

from __future__ import annotations

import itertools
from datetime import datetime
from pathlib import Path

import asyncpg
import pytest
from temporalio.client import Client
from temporalio.worker import Worker

from cronwarden.activities.contract import format_fire_time, logical_key
from cronwarden.schedules.apply import apply_definitions
from tests.support.database import fetch
from tests.support.schedules import definition
from tests.support.waiting import wait_for

pytestmark = pytest.mark.integration


async def test_each_fire_commits_one_outbox_row_one_effect_and_a_heartbeat(
    client: Client, pool: asyncpg.Pool, task_queue: str, worker: Worker, schedule_id: str
) -> None:
    defn = definition(schedule_id)
    await apply_definitions(client, pool, [defn], task_queue=task_queue)
    handle = client.get_schedule_handle(schedule_id)
    try:
        rows = await wait_for(
            lambda: _outbox(pool, schedule_id, at_least=3),
            timeout=30,
            what="three committed fires",
        )
    finally:
        await handle.delete()

    effects = await fetch(pool, "SELECT logical_key, count(*) AS n FROM test_effects GROUP BY 1")
    effect_counts = {r["logical_key"]: r["n"] for r in effects}
    for row in rows:
        fire: datetime = row["fire_time"]
        # The workflow id is Temporal's: schedule id + the nominal fire time it chose.
        assert row["workflow_id"] == f"{schedule_id}-{format_fire_time(fire)}"
        assert row["logical_key"] == logical_key(schedule_id, fire)
        assert effect_counts.get(row["logical_key"]) == 1
        assert row["args_digest"] == defn.args_digest()
    fires = sorted(r["fire_time"] for r in rows)
    assert all((b - a).total_seconds() % 2 == 0 for a, b in itertools.pairwise(fires))

    beat = (
        await fetch(pool, "SELECT * FROM cronwarden.heartbeats WHERE schedule_id = $1", schedule_id)
    )[0]
    latest = max(rows, key=lambda r: r["fire_time"])
    assert beat["last_fire_time"] >= latest["fire_time"]
    assert beat["last_success_at"] is not None
    assert beat["next_expected_at"] > beat["last_fire_time"]
    assert beat["last_error"] is None


async def test_the_nominal_fire_time_is_the_one_temporal_scheduled(
    client: Client, pool: asyncpg.Pool, task_queue: str, worker: Worker, schedule_id: str
) -> None:
    await apply_definitions(client, pool, [definition(schedule_id)], task_queue=task_queue)
    handle = client.get_schedule_handle(schedule_id)
    try:
        await wait_for(lambda: _outbox(pool, schedule_id, at_least=2), timeout=30, what="2 fires")
        recent = (await handle.describe()).info.recent_actions
    finally:
        await handle.delete()
    committed = {
        r["workflow_id"]: r["fire_time"]
        for r in await fetch(
            pool, "SELECT * FROM cronwarden.outbox WHERE schedule_id = $1", schedule_id
        )
    }
    matched = 0
    for action in recent:
        wf_id = action.action.workflow_id  # type: ignore[attr-defined]
        if wf_id in committed:
            assert committed[wf_id] == action.scheduled_at.replace(microsecond=0)
            matched += 1
    assert matched >= 1


async def test_skip_overlap_never_runs_a_slow_schedule_twice_at_once(
    client: Client,
    pool: asyncpg.Pool,
    task_queue: str,
    worker: Worker,
    schedule_id: str,
    tmp_path: Path,
) -> None:
    # The first run waits at a gate on a 2 s schedule until Temporal has skipped a fire behind
    # it: the overlap happens every time, however fast or slow the machine is.
    gate = tmp_path / "gate"
    defn = definition(schedule_id, overlap="skip", job="gated", args={"gate": str(gate)})
    await apply_definitions(client, pool, [defn], task_queue=task_queue)
    handle = client.get_schedule_handle(schedule_id)
    try:

        async def skipped() -> int:
            return (await handle.describe()).info.num_actions_skipped_overlap

        try:
            assert await wait_for(skipped, timeout=30, what="skipped-overlap count") >= 1
        finally:
            gate.touch()
        await wait_for(lambda: _outbox(pool, schedule_id, at_least=2), timeout=30, what="2 runs")
    finally:
        await handle.delete()
    effects = await fetch(
        pool, "SELECT started_at, finished_at FROM test_effects ORDER BY started_at"
    )
    assert len(effects) >= 2
    for earlier, later in itertools.pairwise(effects):
        assert later["started_at"] >= earlier["finished_at"], "two runs overlapped"


async def _outbox(pool: asyncpg.Pool, schedule_id: str, *, at_least: int) -> list[asyncpg.Record]:
    rows = await fetch(
        pool,
        "SELECT * FROM cronwarden.outbox WHERE schedule_id = $1 ORDER BY fire_time",
        schedule_id,
    )
    return rows if len(rows) >= at_least else []


async def test_a_run_failing_after_its_retries_pauses_a_pause_on_failure_schedule(
    client: Client, pool: asyncpg.Pool, task_queue: str, worker: Worker, schedule_id: str
) -> None:
    defn = definition(
        schedule_id, pause_on_failure=True, max_attempts=1, args={"fail_attempts": 99}
    )
    await apply_definitions(client, pool, [defn], task_queue=task_queue)
    handle = client.get_schedule_handle(schedule_id)
    try:

        async def paused() -> bool:
            return (await handle.describe()).schedule.state.paused

        assert await wait_for(paused, timeout=30, what="the schedule to pause itself")
    finally:
        await handle.delete()
    beat = await fetch(
        pool, "SELECT last_error FROM cronwarden.heartbeats WHERE schedule_id = $1", schedule_id
    )
    assert "probe failing on purpose" in beat[0]["last_error"]
    assert await _outbox(pool, schedule_id, at_least=1) == []
