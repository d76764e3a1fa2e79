"""Every slot without a commit says why, produced for real on real servers: a fire Temporal
skipped behind a slow run (and its count agrees with Temporal's), a run failing every attempt
and the pause_on_failure after it, a run no worker polls for, a run no polling worker has the
job of, an operator's pause (with the command that closes the gap), a trigger off the grid.

Before `backfill/causes.py`, `audit` and `backfill plan` listed these slots as missing with no
reason at all.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta

import asyncpg
import pytest
from temporalio.client import Client, ScheduleHandle

from cronwarden.activities.contract import logical_key
from cronwarden.activities.jobs import REGISTRY, JobRegistry
from cronwarden.backfill.audit import Audit, audit
from cronwarden.backfill.causes import (
    FAILED,
    NO_WORKER_POLLING,
    NO_WORKER_WITH_JOB_CAUSE,
    OFF_GRID,
    PAUSED_OPERATOR,
    PAUSED_TEMPORAL,
    SKIPPED_OVERLAP,
    Group,
)
from cronwarden.backfill.explain import gap_cause, slot_causes
from cronwarden.backfill.plan import load_managed
from cronwarden.backfill.window import Window
from cronwarden.schedules import operations
from cronwarden.schedules.apply import apply_definitions
from cronwarden.schedules.health import MISSING
from cronwarden.schedules.status import status_report
from tests.support.cli import cli, cli_json, iso
from tests.support.database import committed_times
from tests.support.outage import terminate_running
from tests.support.schedules import definition, new_id, yearly_definition
from tests.support.servers import in_process_worker
from tests.support.waiting import clock_past, wait_for

pytestmark = pytest.mark.integration


async def audited(client: Client, pool: asyncpg.Pool, schedule_id: str, end: datetime) -> Audit:
    """The audit of the schedule's whole life up to `end`."""
    schedule = await load_managed(client, schedule_id)
    window = Window(schedule.created_at.replace(microsecond=0), end.replace(microsecond=0))
    return await audit(client, pool, schedule, window, now=datetime.now(UTC))


def by_cause(result: Audit) -> dict[str, Group]:
    assert result.causes is not None
    return {g.cause: g for g in result.causes.groups}


def counter(handle: ScheduleHandle, name: str, at_least: int) -> Callable[[], Awaitable[bool]]:
    async def check() -> bool:
        return bool(getattr((await handle.describe()).info, name) >= at_least)

    return check


async def a_slot_boundary_passed(offset: float) -> None:
    """Sleep until `offset` seconds after an even second: no `every: 2s` fire is being taken."""
    now = datetime.now(UTC).timestamp()
    await asyncio.sleep((offset - now % 2) % 2)


async def test_a_fire_skipped_behind_a_slow_run_names_the_run_and_matches_temporals_count(
    client: Client, pool: asyncpg.Pool, task_queue: str, worker: object
) -> None:
    sid = new_id("cause-overlap")
    await apply_definitions(
        client, pool, [definition(sid, args={"sleep": 5})], task_queue=task_queue
    )
    handle = client.get_schedule_handle(sid)
    try:
        await wait_for(
            counter(handle, "num_actions_skipped_overlap", 2), timeout=40, what="two skips"
        )
        # Stopped half-way between two fires, so every fire up to `end` was taken (and counted).
        await a_slot_boundary_passed(1.0)
        end = datetime.now(UTC)
        await handle.pause(note="test: stop firing")
        skipped = (await handle.describe()).info.num_actions_skipped_overlap
        await terminate_running(client, handle)
        result = await audited(client, pool, sid, end)
    finally:
        await handle.delete()
    groups = by_cause(result)
    overlap = groups[SKIPPED_OVERLAP]
    assert overlap.count == skipped
    # The first slot's run (ended by the test) is the one the skips were behind.
    first = datetime.fromtimestamp(min(g.first_s for g in groups.values()), UTC)
    assert f"behind run {logical_key(sid, first)}" in overlap.text
    assert result.causes is not None
    [counted] = [t for t in result.causes.temporal if t["cause"] == SKIPPED_OVERLAP]
    assert counted == {
        "cause": SKIPPED_OVERLAP,
        "temporal": skipped,
        "named": skipped,
        "note": None,
        "agree": True,
    }


async def test_a_run_failing_every_attempt_says_on_which_attempt_and_why_then_the_pause(
    client: Client, pool: asyncpg.Pool, task_queue: str, worker: object
) -> None:
    sid = new_id("cause-failed")
    defn = definition(sid, args={"fail_attempts": 99}, max_attempts=2)
    await apply_definitions(client, pool, [defn], task_queue=task_queue)
    handle = client.get_schedule_handle(sid)
    try:

        async def paused() -> bool:
            return (await handle.describe()).schedule.state.paused

        await wait_for(paused, timeout=40, what="pause_on_failure")
        await asyncio.sleep(2.5)  # a fire comes and is held by the pause
        now = datetime.now(UTC)
        result = await audited(client, pool, sid, now)
        # What an overdue page would carry: the gap from the first slot on.
        created = (await handle.describe()).info.created_at
        gap = await gap_cause(client, pool, sid, since=created, now=now)
    finally:
        await handle.delete()
    groups = by_cause(result)
    assert "failed on attempt 2: probe failing on purpose (attempt 2)" in groups[FAILED].text
    assert groups[PAUSED_TEMPORAL].text.startswith("paused in Temporal: ")
    assert groups[PAUSED_TEMPORAL].first_s > groups[FAILED].first_s
    assert gap is not None
    assert gap["cause"] == FAILED
    assert gap["next_command"].endswith(" --include-paused")


async def test_a_run_no_worker_polls_for_says_so(
    client: Client, pool: asyncpg.Pool, task_queue: str
) -> None:
    sid = new_id("cause-nopoll")
    await apply_definitions(client, pool, [definition(sid)], task_queue=task_queue)
    handle = client.get_schedule_handle(sid)
    try:
        await wait_for(counter(handle, "num_actions_skipped_overlap", 1), timeout=30, what="a skip")
        result = await audited(client, pool, sid, datetime.now(UTC))
        # What the status page would show beside the slot.
        first = datetime.fromtimestamp(by_cause(result)[NO_WORKER_POLLING].first_s, UTC)
        per_slot = await slot_causes(client, pool, sid, [first], now=datetime.now(UTC))
    finally:
        await handle.pause()
        await terminate_running(client, handle)
        await handle.delete()
    assert per_slot[first]["cause"] == NO_WORKER_POLLING
    assert per_slot[first]["next_command"] is None
    groups = by_cause(result)
    assert f"no worker polls the task queue '{task_queue}'" in groups[NO_WORKER_POLLING].text
    assert groups[NO_WORKER_POLLING].count == 1
    assert SKIPPED_OVERLAP in groups
    assert result.causes is not None
    [waiting] = [c for c in result.causes.as_json() if c["cause"] == NO_WORKER_POLLING]
    assert waiting["in_flight"] is True
    assert waiting["next_command"] is None  # still open: a replay would only wait too


async def test_a_run_no_polling_worker_has_the_job_of_says_which_job(
    client: Client, pool: asyncpg.Pool, task_queue: str
) -> None:
    without_probe = JobRegistry()
    without_probe.register(REGISTRY.get("noop-digest"))
    sid = new_id("cause-nojob")
    async with in_process_worker(client, pool, task_queue, without_probe):
        await apply_definitions(client, pool, [definition(sid)], task_queue=task_queue)
        handle = client.get_schedule_handle(sid)
        try:

            async def running() -> bool:
                return bool((await handle.describe()).info.running_actions)

            await wait_for(running, timeout=30, what="a run")
            await asyncio.sleep(1)  # its workflow task is done: the activity waits
            result = await audited(client, pool, sid, datetime.now(UTC))
        finally:
            await handle.pause()
            await terminate_running(client, handle)
            await handle.delete()
    group = by_cause(result)[NO_WORKER_WITH_JOB_CAUSE]
    assert "no polling worker has job 'probe'" in group.text
    assert f"'{task_queue}/job/probe'" in group.text


async def test_an_operators_pause_gives_its_reason_and_the_command_that_closes_the_gap(
    client: Client,
    pool: asyncpg.Pool,
    task_queue: str,
    worker: object,
    cli_env: dict[str, str],
) -> None:
    sid = new_id("cause-paused")
    await apply_definitions(client, pool, [definition(sid)], task_queue=task_queue)
    handle = client.get_schedule_handle(sid)
    try:

        async def committed() -> list[datetime]:
            return await committed_times(pool, sid)

        await wait_for(committed, timeout=30, what="a commit")
        await operations.pause(client, pool, sid, reason="db migration")
        await asyncio.sleep(4.5)  # two fires held
        created = (await handle.describe()).info.created_at
        doc = await cli_json(
            cli_env, "backfill", "plan", sid, "--start", iso(created), "--end", "now"
        )
        text = await cli(cli_env, "audit", sid, "--since", iso(created))
    finally:
        await handle.delete()
    [held] = [c for c in doc["causes"] if c["cause"] == PAUSED_OPERATOR]
    assert held["text"] == "paused by an operator: db migration"
    assert text.code == 0, text.stderr
    assert "paused-operator: paused by an operator: db migration" in text.stdout
    assert f"    next: cronwarden backfill run {sid} --start " in text.stdout
    assert held["count"] >= 2
    assert held["next_command"] == (
        f"cronwarden backfill run {sid} --start {held['first'].split('@')[1]} "
        f"--end {held['last'].split('@')[1]} --include-paused --include-held"
    )


async def test_a_manual_trigger_is_named_off_the_grid(
    client: Client, pool: asyncpg.Pool, task_queue: str, worker: object
) -> None:
    sid = new_id("cause-trigger")
    await apply_definitions(client, pool, [yearly_definition(sid)], task_queue=task_queue)
    handle = client.get_schedule_handle(sid)
    try:
        # Audits start the second after the creation: trigger after it.
        created = (await handle.describe()).info.created_at
        await wait_for(lambda: clock_past(created + timedelta(seconds=1)), timeout=5, what="1s")
        triggered = await operations.trigger(client, sid)

        async def committed() -> list[datetime]:
            return await committed_times(pool, sid)

        await wait_for(committed, timeout=30, what="the trigger's commit")
        result = await audited(client, pool, sid, datetime.now(UTC))
    finally:
        await handle.delete()
    group = by_cause(result)[OFF_GRID]
    assert group.count == 1
    assert triggered.logical_key is not None
    assert result.causes is not None
    [doc] = [c for c in result.causes.as_json() if c["cause"] == OFF_GRID]
    assert doc["example_keys"] == [triggered.logical_key]
    assert doc["next_command"] is None


async def test_status_is_never_ok_beside_a_missing_slot_and_describe_says_why(
    client: Client,
    pool: asyncpg.Pool,
    task_queue: str,
    worker: object,
    cli_env: dict[str, str],
) -> None:
    sid = new_id("cause-status")
    fields = {
        "every": "10s",
        "max_attempts": 1,
        "pause_on_failure": False,
        "heartbeat_grace": "10s",
    }
    failing = definition(sid, args={"fail_attempts": 99}, **fields)
    await apply_definitions(client, pool, [failing], task_queue=task_queue)
    handle = client.get_schedule_handle(sid)
    try:

        async def failed_once() -> bool:
            query = f"WorkflowId STARTS_WITH '{sid}-' AND ExecutionStatus = 'Failed'"
            return [r async for r in client.list_workflows(query)] != []

        await wait_for(failed_once, timeout=30, what="a failed run")
        await apply_definitions(client, pool, [definition(sid, **fields)], task_queue=task_queue)

        async def committed() -> list[datetime]:
            return await committed_times(pool, sid)

        await wait_for(committed, timeout=30, what="a later commit")
        # Judged a minute on, when the failed slot has settled and the next fire is not due.
        report = await status_report(
            client, pool, now=min(await committed()) + timedelta(seconds=9)
        )
        described = await cli_json(cli_env, "schedules", "describe", sid)
    finally:
        await handle.delete()
    [row] = [r for r in report.rows if r.schedule_id == sid]
    assert row.health == MISSING
    assert len(row.missing) == 1
    assert row.causes is not None
    assert row.causes[0]["cause"] == FAILED
    assert row.causes[0]["next_command"].startswith(f"cronwarden backfill run {sid} --start ")
    [cause] = described["slot_causes"]["causes"]
    assert cause["cause"] == FAILED
    assert "failed on attempt 1: probe failing on purpose (attempt 1)" in cause["text"]
