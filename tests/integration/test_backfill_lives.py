"""Backfill on real servers knows which fires nobody wanted: a fire inside an operator's pause is
held, not missing; the time between two lives of a schedule id (deleted, then created again) had
no fire due; and a deleted schedule's missed fires can still be planned and audited."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import asyncpg
import pytest
from temporalio.client import Client

from cronwarden.activities.contract import logical_key
from cronwarden.schedules import operations
from cronwarden.store.pause_history import Pause
from tests.support.cli import cli, cli_json, iso
from tests.support.database import committed_times, fetch
from tests.support.outage import apply_paused, even_slots, terminate_running
from tests.support.schedules import definition
from tests.support.servers import in_process_worker
from tests.support.waiting import clock_past, wait_for

pytestmark = pytest.mark.integration


def _keys(schedule_id: str, times: list[datetime]) -> list[str]:
    return [logical_key(schedule_id, t) for t in times]


async def _pauses(pool: asyncpg.Pool, schedule_id: str) -> list[Pause]:
    rows = await fetch(
        pool,
        "SELECT paused_at, resumed_at, reason FROM cronwarden.pause_history "
        "WHERE schedule_id = $1 ORDER BY paused_at",
        schedule_id,
    )
    return [Pause(r["paused_at"], r["resumed_at"], r["reason"]) for r in rows]


async def _wait_past(when: datetime) -> None:
    await wait_for(lambda: clock_past(when), timeout=30, what=f"the clock past {when}")


async def test_fires_inside_an_operator_pause_are_held_not_missing_and_replayed_only_if_asked(
    client: Client, pool: asyncpg.Pool, task_queue: str, schedule_id: str, cli_env: dict[str, str]
) -> None:
    # An outage from the start (the test's own pause in Temporal: no heartbeat row records it),
    # an operator's pause in the middle of it, the outage again after the operator unpaused.
    handle, created_at = await apply_paused(client, pool, task_queue, definition(schedule_id))
    try:
        await _wait_past(created_at + timedelta(seconds=5))
        await operations.pause(client, pool, schedule_id, reason="ledger migration")
        [pause] = await _pauses(pool, schedule_id)
        await _wait_past(pause.paused_at + timedelta(seconds=6))
        await operations.unpause(client, pool, schedule_id)
        await handle.pause(note="test: the outage goes on")
        await terminate_running(client, handle)
        [pause] = await _pauses(pool, schedule_id)
        assert pause.reason == "ledger migration" and pause.resumed_at is not None
        await _wait_past(pause.resumed_at + timedelta(seconds=5))
        end = datetime.now(UTC).replace(microsecond=0) - timedelta(seconds=1)
        slots = even_slots(created_at, end)
        held = [t for t in slots if pause.paused_at <= t <= pause.resumed_at]
        lost = [t for t in slots if t not in held]
        assert len(held) >= 2 and len(lost) >= 4, (held, lost)

        window = ["--start", iso(created_at), "--end", iso(end)]
        planned = await cli_json(cli_env, "backfill", "plan", schedule_id, *window)
        assert planned["missing_keys"] == _keys(schedule_id, lost)
        assert planned["paused_fires"] == len(held)
        assert planned["pauses"] == [pause.as_json()]
        audited = await cli_json(cli_env, "audit", schedule_id, "--since", iso(created_at))
        assert audited["paused_keys"][: len(held)] == _keys(schedule_id, held)
        assert not set(audited["missing_keys"]) & set(_keys(schedule_id, held))
        text = await cli(cli_env, "backfill", "plan", schedule_id, *window)
        assert f"paused {len(held)}" in text.stdout and "(ledger migration)" in text.stdout

        # The outage ends; what the operator held stays held.
        await handle.unpause()
        async with in_process_worker(client, pool, task_queue):
            ran = await cli_json(cli_env, "backfill", "run", schedule_id, *window, "--yes")
            assert ran["summary"]["replayed"] == len(lost)
            in_window = [t for t in await committed_times(pool, schedule_id) if t <= end]
            assert in_window == lost
            # Asked for, the held fires are replayed too, once.
            ran = await cli_json(
                cli_env, "backfill", "run", schedule_id, *window, "--yes", "--include-paused"
            )
            assert ran["summary"]["replayed"] == len(held)
            assert ran["summary"]["already-done"] == 0
        in_window = [t for t in await committed_times(pool, schedule_id) if t <= end]
        assert in_window == slots
    finally:
        await handle.delete()


async def test_a_deleted_id_is_planned_from_its_history_and_a_new_life_plans_nothing_between(
    client: Client, pool: asyncpg.Pool, task_queue: str, schedule_id: str, cli_env: dict[str, str]
) -> None:
    _, created_at = await apply_paused(client, pool, task_queue, definition(schedule_id))
    await _wait_past(created_at + timedelta(seconds=6))
    await operations.delete(client, pool, schedule_id)
    [deleted] = await fetch(
        pool,
        "SELECT applied_at FROM cronwarden.definition_history WHERE schedule_id = $1 AND deleted",
        schedule_id,
    )
    deleted_at = deleted["applied_at"]
    first_life = even_slots(created_at, deleted_at)
    assert len(first_life) >= 3

    # Deleted: still planned and audited from its history, never replayed. (Past the delete's
    # second, so that the window has a part after it.)
    await _wait_past(deleted_at + timedelta(seconds=2))
    window = ["--start", iso(created_at - timedelta(minutes=1)), "--end", "now"]
    planned = await cli_json(cli_env, "backfill", "plan", schedule_id, *window)
    assert planned["missing_keys"] == _keys(schedule_id, first_life)
    assert planned["judged_by"][-1]["source"] == "deleted"
    audited = await cli_json(cli_env, "audit", schedule_id, "--since", "1h")
    assert audited["deleted"] is True and audited["temporal"] is None
    assert list(audited["missing_keys"]) == _keys(schedule_id, first_life)
    refused = await cli(cli_env, "backfill", "run", schedule_id, *window, "--yes")
    assert refused.code == 2, refused
    assert refused.stderr.startswith(f"error: schedule '{schedule_id}' was deleted at "), refused
    assert "nothing replayed" in refused.stderr
    unknown = await cli(cli_env, "backfill", "plan", f"{schedule_id}-never", *window)
    assert unknown.code == 1 and unknown.stderr.startswith("error: no schedule"), unknown

    # Created again: both lives are planned, each by its own history, and the gap not at all.
    await _wait_past(deleted_at + timedelta(seconds=5))
    handle, recreated_at = await apply_paused(client, pool, task_queue, definition(schedule_id))
    try:
        await _wait_past(recreated_at + timedelta(seconds=5))
        end = datetime.now(UTC).replace(microsecond=0) - timedelta(seconds=1)
        second_life = even_slots(recreated_at, end)
        window = ["--start", iso(created_at - timedelta(minutes=1)), "--end", iso(end)]
        planned = await cli_json(cli_env, "backfill", "plan", schedule_id, *window)
        assert planned["missing_keys"] == _keys(schedule_id, first_life + second_life)
        assert [j["source"] for j in planned["judged_by"]] == ["history", "deleted", "history"]
        assert planned["window"]["start"] > iso(created_at - timedelta(seconds=1))
    finally:
        await handle.delete()
