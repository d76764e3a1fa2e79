"""The spec fields on a real Temporal: a list of crons, start_at/end_at, skip calendars and
jitter, as Temporal evaluates them; what a jittered run carries; and the monitor: a schedule past
its end_at is finished, not absent, and an excluded time is not a late one."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
import pytest
from temporalio.client import Client
from temporalio.worker import Worker

from cronwarden.activities.contract import logical_key
from cronwarden.backfill.audit import audit
from cronwarden.backfill.plan import load_managed, matching_times, plan_window
from cronwarden.backfill.window import Window
from cronwarden.monitor.scan import heartbeat_problem
from cronwarden.schedules.apply import apply_definitions
from cronwarden.schedules.mapping import definition_digest
from cronwarden.schedules.model import ScheduleDefinition
from cronwarden.workflows.scheduled_run import SCHEDULED_START_TIME
from tests.support.database import fetch
from tests.support.waiting import wait_for

pytestmark = pytest.mark.integration


def definition(schedule_id: str, **fields: Any) -> ScheduleDefinition:
    base: dict[str, Any] = {
        "id": schedule_id,
        "job": "probe",
        "catchup_window": "1m",
        "heartbeat_grace": "1s",
        "lock_ttl": "10s",
        "timeout": "30s",
    }
    return ScheduleDefinition.model_validate({**base, **fields})


def at(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


async def test_temporal_fires_the_crons_inside_the_period_and_skips_the_exclusions(
    client: Client, pool: asyncpg.Pool, task_queue: str, schedule_id: str
) -> None:
    defn = definition(
        schedule_id,
        cron=["0 9 * * mon-fri", "30 12 * * sat"],
        start_at="2030-12-20T00:00:00Z",
        end_at="2031-01-03T00:00:00Z",
        exclude=[
            "2030-12-25",
            {"month": "jan", "day_of_month": 1},
            {"day_of_week": "mon", "hour": 9},
        ],
    )
    await apply_definitions(client, pool, [defn], task_queue=task_queue)
    try:
        pages = matching_times(
            client, schedule_id, Window(at("2030-12-01T00:00:00"), at("2031-02-01T00:00:00"))
        )
        times = [datetime.fromtimestamp(s, UTC) async for page in pages for s in page]
    finally:
        await client.get_schedule_handle(schedule_id).delete()
    assert times == [
        at("2030-12-20T09:00:00"),  # Friday, the first day of the period
        at("2030-12-21T12:30:00"),  # Saturday: the second expression
        # Monday 23rd: 09:00 on Mondays is excluded
        at("2030-12-24T09:00:00"),
        # Wednesday 25th: the excluded date
        at("2030-12-26T09:00:00"),
        at("2030-12-27T09:00:00"),
        at("2030-12-28T12:30:00"),
        # Monday 30th: excluded; 1 January: excluded (every year)
        at("2030-12-31T09:00:00"),
        at("2031-01-02T09:00:00"),
        # Friday 3 January 09:00 is after end_at
    ]


async def test_under_jitter_the_id_and_the_key_carry_the_nominal_time_and_the_run_starts_later(
    client: Client, pool: asyncpg.Pool, task_queue: str, worker: Worker, schedule_id: str
) -> None:
    await apply_definitions(
        client, pool, [definition(schedule_id, every="10s", jitter="8s")], task_queue=task_queue
    )
    handle = client.get_schedule_handle(schedule_id)
    seen: dict[str, dict[str, Any]] = {}

    async def a_jittered_run() -> bool:
        rows = await fetch(
            pool, "SELECT * FROM cronwarden.outbox WHERE schedule_id = $1", schedule_id
        )
        for row in rows:
            if row["workflow_id"] in seen:
                continue
            desc = await client.get_workflow_handle(row["workflow_id"]).describe()
            seen[row["workflow_id"]] = {
                "fire_time": row["fire_time"],
                "logical_key": row["logical_key"],
                "scheduled_start": desc.typed_search_attributes.get(SCHEDULED_START_TIME),
                "started": desc.start_time,
            }
        # Jitter is a hash of the nominal time: wait for a run it delayed by a second or more.
        return any(r["started"] - r["fire_time"] >= timedelta(seconds=1) for r in seen.values())

    try:
        await wait_for(a_jittered_run, timeout=90, what="a run started a second after its slot")
        described = await handle.describe()
        recent = described.info.recent_actions
        # The plan a backfill replays from names the same nominal slots: every committed run is
        # done, and nothing off the 10 s grid is expected (a jittered time would be a key of its
        # own, and its replay a second application of the job).
        last = max(r["fire_time"] for r in seen.values())
        window = Window(described.info.created_at, last).clamped_to(described.info.created_at)
        planned = await plan_window(client, pool, schedule_id, window)
        committed_in_window = await pool.fetchval(
            "SELECT count(*) FROM cronwarden.outbox WHERE schedule_id = $1 AND fire_time <= $2",
            schedule_id,
            last,
        )
    finally:
        await handle.delete()
    grid = range(
        int(window.start.timestamp()) + (-int(window.start.timestamp())) % 10,
        int(last.timestamp()) + 1,
        10,
    )
    assert planned.expected == len(grid)
    assert planned.done == committed_in_window >= len(seen)
    assert all(t.timestamp() % 10 == 0 for t in planned.missing_times())

    for workflow_id, run in seen.items():
        nominal: datetime = run["fire_time"]
        # The slot is on the 10 s grid, before jitter; the workflow id, the search attribute and
        # the logical key all carry it, and the run started at or after it.
        assert nominal.timestamp() % 10 == 0
        assert workflow_id == f"{schedule_id}-{nominal:%Y-%m-%dT%H:%M:%SZ}"
        assert run["scheduled_start"] == nominal
        assert run["logical_key"] == logical_key(schedule_id, nominal)
        assert run["started"] >= nominal
    # Temporal's own record of the action carries the jittered time, not the slot: it is not a
    # key, and nothing of ours reads it.
    jittered = {
        a.action.workflow_id: a.scheduled_at  # type: ignore[attr-defined]
        for a in recent
        if a.action.workflow_id in seen  # type: ignore[attr-defined]
    }
    assert any(jittered[w] != seen[w]["fire_time"] for w in jittered)


async def beat(pool: asyncpg.Pool, schedule_id: str) -> dict[str, Any]:
    rows = await fetch(
        pool, "SELECT * FROM cronwarden.heartbeats WHERE schedule_id = $1", schedule_id
    )
    return dict(rows[0])


async def test_a_schedule_past_its_end_at_expects_nothing_and_never_pages(
    client: Client, pool: asyncpg.Pool, task_queue: str, worker: Worker, schedule_id: str
) -> None:
    end_at = datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=7)
    defn = definition(schedule_id, every="2s", end_at=end_at.isoformat())
    await apply_definitions(client, pool, [defn], task_queue=task_queue)
    handle = client.get_schedule_handle(schedule_id)

    async def finished() -> dict[str, Any] | None:
        row = await beat(pool, schedule_id)
        done = row["last_fire_time"] is not None and row["last_fire_time"] > end_at - timedelta(
            seconds=2
        )
        return row if done and row["next_expected_at"] is None else None

    try:
        row = await wait_for(finished, timeout=60, what="the last fire to leave nothing expected")
    finally:
        await handle.delete()
    assert row is not None
    assert row["last_fire_time"] <= end_at
    # A day later the schedule is finished, not overdue.
    assert heartbeat_problem(row, end_at + timedelta(days=1)) is None


async def test_an_excluded_time_is_not_expected_so_it_is_never_late(
    client: Client, pool: asyncpg.Pool, task_queue: str, worker: Worker, schedule_id: str
) -> None:
    # Every 2 seconds, except the seconds between the tens: it fires at :00, :10, :20, ...
    defn = definition(
        schedule_id,
        cron="*/2 * * * * * *",
        exclude=[{"second": "2-8,12-18,22-28,32-38,42-48,52-58"}],
    )
    await apply_definitions(client, pool, [defn], task_queue=task_queue)
    handle = client.get_schedule_handle(schedule_id)

    async def committed_twice() -> dict[str, Any] | None:
        rows = await fetch(
            pool, "SELECT count(*) AS n FROM cronwarden.outbox WHERE schedule_id = $1", schedule_id
        )
        return await beat(pool, schedule_id) if rows[0]["n"] >= 2 else None

    try:
        row = await wait_for(committed_twice, timeout=60, what="two committed fires")
    finally:
        await handle.delete()
    assert row is not None
    last: datetime = row["last_fire_time"]
    assert last.second % 10 == 0
    # The next slot after the excluded seconds, not the next 2 s step: with a grace of 1 s, a
    # deadline at +2 s would page while nothing is due.
    assert row["next_expected_at"] == last + timedelta(seconds=10)
    assert heartbeat_problem(row, last + timedelta(seconds=6)) is None


async def test_backfill_plan_and_audit_judge_each_part_of_a_window_by_the_spec_in_force_then(
    client: Client, pool: asyncpg.Pool, task_queue: str, schedule_id: str
) -> None:
    every_three_hours = definition(schedule_id, cron="0 */3 * * *")
    every_four_at_half = definition(schedule_id, cron="30 */4 * * *")
    await apply_definitions(client, pool, [every_three_hours], task_queue=task_queue)
    await apply_definitions(client, pool, [every_four_at_half], task_queue=task_queue)
    handle = client.get_schedule_handle(schedule_id)
    try:
        history = await fetch(
            pool,
            "SELECT * FROM cronwarden.definition_history WHERE schedule_id = $1 "
            "ORDER BY applied_at",
            schedule_id,
        )
        digests = [
            definition_digest(d, task_queue=task_queue)
            for d in (every_three_hours, every_four_at_half)
        ]
        assert [r["definition_digest"] for r in history] == digests
        # Recorded at Temporal's own time for each write.
        assert history[-1]["applied_at"] == (await handle.describe()).info.last_updated_at

        # Move both applies to a fixed day (the live schedule keeps the second spec): the first
        # took effect the evening before, the second at 12:00:00.5, so the first still decided
        # the 12:00 fire.
        async with pool.acquire() as conn:
            for row, applied_at in zip(
                history, [at("2029-12-31T23:00:00"), at("2030-01-01T12:00:00.500000")], strict=True
            ):
                await conn.execute(
                    "UPDATE cronwarden.definition_history SET applied_at = $3 "
                    "WHERE schedule_id = $1 AND applied_at = $2",
                    schedule_id,
                    row["applied_at"],
                    applied_at,
                )
            # One fire of the first spec ran.
            await conn.execute(
                "INSERT INTO cronwarden.outbox (logical_key, schedule_id, fire_time, attempt, "
                "fencing_token, worker, args_digest) VALUES ($1, $2, $3, 1, 1, 'test', 'x')",
                logical_key(schedule_id, at("2030-01-01T06:00:00")),
                schedule_id,
                at("2030-01-01T06:00:00"),
            )
        window = Window(at("2030-01-01T00:00:00"), at("2030-01-01T23:59:59"))
        planned = await plan_window(client, pool, schedule_id, window)
        report = await audit(client, pool, await load_managed(client, schedule_id), window)
    finally:
        await handle.delete()
    assert list(planned.missing_times()) == [
        at("2030-01-01T00:00:00"),
        at("2030-01-01T03:00:00"),
        # 06:00 ran
        at("2030-01-01T09:00:00"),
        at("2030-01-01T12:00:00"),
        # the second spec from 12:00:01 on
        at("2030-01-01T12:30:00"),
        at("2030-01-01T16:30:00"),
        at("2030-01-01T20:30:00"),
    ]
    assert (planned.expected, planned.done) == (8, 1)
    assert (report.expected, report.committed, report.committed_off_spec) == (8, 1, 0)


async def test_the_first_recorded_update_of_an_older_schedule_keeps_what_it_replaced(
    client: Client, pool: asyncpg.Pool, task_queue: str, schedule_id: str
) -> None:
    first = definition(schedule_id, cron="0 */3 * * *")
    await apply_definitions(client, pool, [first], task_queue=task_queue)
    handle = client.get_schedule_handle(schedule_id)
    try:
        # As if applied before definitions were recorded.
        async with pool.acquire() as conn:
            await conn.execute(
                "DELETE FROM cronwarden.definition_history WHERE schedule_id = $1", schedule_id
            )
        second = definition(schedule_id, cron="30 */4 * * *")
        await apply_definitions(client, pool, [second], task_queue=task_queue)
        info = (await handle.describe()).info
    finally:
        await handle.delete()
    history = await fetch(
        pool,
        "SELECT * FROM cronwarden.definition_history WHERE schedule_id = $1 ORDER BY applied_at",
        schedule_id,
    )
    assert [(r["applied_at"], r["definition_digest"]) for r in history] == [
        (info.created_at, definition_digest(first, task_queue=task_queue)),
        (info.last_updated_at, definition_digest(second, task_queue=task_queue)),
    ]
    assert history[0]["definition"]["cron"] == "0 */3 * * *"
