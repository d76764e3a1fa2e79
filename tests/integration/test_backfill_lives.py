"""Backfill on real servers knows which fires nobody wanted: a fire inside an operator's pause is
held, not missing; the time between two lives of a schedule id (deleted, then created again) had
no fire due; and a deleted schedule's missed fires can still be planned and audited."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime, timedelta

import asyncpg
import pytest
from temporalio.client import Client

from cronwarden.activities.contract import logical_key
from cronwarden.backfill.window import temporal_now
from cronwarden.schedules import operations
from cronwarden.schedules.apply import apply_definitions
from cronwarden.store import definitions, heartbeats
from cronwarden.store.pause_history import Pause
from tests.support.cli import cli, cli_json, iso
from tests.support.database import committed_times, fetch
from tests.support.outage import apply_paused, even_slots, pause_when_taken, terminate_running
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
                cli_env, "backfill", "run", schedule_id, *window, "--yes", "--include-held"
            )
            assert ran["summary"]["replayed"] == len(held)
            assert ran["summary"]["already-done"] == 0
            assert (ran["paused_fires"], ran["held_included"]) == (len(held), True)
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


async def test_include_paused_replays_what_a_standing_pause_did_not_hold(
    client: Client, pool: asyncpg.Pool, task_queue: str, schedule_id: str, cli_env: dict[str, str]
) -> None:
    # An outage, then an operator's pause that still stands: the outage's fires may be replayed
    # while it stands (--include-paused), the ones it holds only when asked (--include-held).
    handle, created_at = await apply_paused(client, pool, task_queue, definition(schedule_id))
    try:
        await _wait_past(created_at + timedelta(seconds=5))
        await operations.pause(client, pool, schedule_id, reason="ledger migration")
        [pause] = await _pauses(pool, schedule_id)
        await _wait_past(pause.paused_at + timedelta(seconds=5))
        end = datetime.now(UTC).replace(microsecond=0) - timedelta(seconds=1)
        slots = even_slots(created_at, end)
        held = [t for t in slots if t >= pause.paused_at]
        lost = [t for t in slots if t not in held]
        assert len(held) >= 2 and len(lost) >= 2, (held, lost)
        window = ["backfill", "run", schedule_id, "--start", iso(created_at), "--end", iso(end)]

        refused = await cli(cli_env, *window, "--yes")
        assert refused.code == 2 and "--include-held" in refused.stderr, refused
        async with in_process_worker(client, pool, task_queue):
            ran = await cli_json(cli_env, *window, "--yes", "--include-paused")
            assert ran["summary"]["replayed"] == len(lost)
            assert (ran["paused_fires"], ran["held_included"]) == (len(held), False)
            assert await committed_times(pool, schedule_id) == lost
            ran = await cli_json(cli_env, *window, "--yes", "--include-paused", "--include-held")
            assert ran["summary"]["replayed"] == len(held)
        assert await committed_times(pool, schedule_id) == slots
        # Still paused, as the operator left it.
        assert (await handle.describe()).schedule.state.paused
    finally:
        await handle.delete()


async def test_a_pause_made_while_replays_run_holds_the_ones_not_started(
    client: Client, pool: asyncpg.Pool, task_queue: str, schedule_id: str, cli_env: dict[str, str]
) -> None:
    defn = definition(schedule_id, args={"sleep": 1.0, "write": True})
    handle, created_at = await apply_paused(client, pool, task_queue, defn)
    try:
        await _wait_past(created_at + timedelta(seconds=13))
        end = datetime.now(UTC).replace(microsecond=0) - timedelta(seconds=1)
        slots = even_slots(created_at, end)
        await handle.unpause()
        args = ["backfill", "run", schedule_id, "--start", iso(created_at), "--end", iso(end)]
        async with in_process_worker(client, pool, task_queue):
            running = asyncio.ensure_future(
                cli(cli_env, *args, "--yes", "--json", "--concurrency", "1", timeout=120)
            )
            await wait_for(
                lambda: _any_committed(pool, schedule_id, end), timeout=30, what="a first replay"
            )
            await operations.pause(client, pool, schedule_id, reason="ledger migration")
            [pause] = await _pauses(pool, schedule_id)
            result = await running
        assert result.code == 1, result
        report = json.loads(result.stdout)
        skipped = report["skipped"]
        assert skipped and all("paused while the replays ran" in s["reason"] for s in skipped)
        assert report["summary"]["replayed"] + len(skipped) == len(slots)
        # One at a time: the replay in flight at the pause, or one whose check came just before
        # it, may still run; none after that.
        starts = await _replay_starts(pool, _keys(schedule_id, slots))
        started_after = [t for t in starts if t > pause.paused_at]
        assert len(started_after) <= 1, started_after
    finally:
        await handle.delete()


async def _any_committed(pool: asyncpg.Pool, schedule_id: str, end: datetime) -> bool:
    """A replay has committed: a key of the window (live fires commit after it)."""
    return any(t <= end for t in await committed_times(pool, schedule_id))


async def _replay_starts(pool: asyncpg.Pool, keys: list[str]) -> list[datetime]:
    """When each committed replay of these keys began its job (the probe's effect row)."""
    rows = await fetch(
        pool, "SELECT started_at FROM test_effects WHERE logical_key = ANY($1::text[])", keys
    )
    return [r["started_at"] for r in rows]


async def test_a_life_deleted_outside_cronwarden_plans_nothing_after_its_last_record(
    client: Client, pool: asyncpg.Pool, task_queue: str, schedule_id: str, cli_env: dict[str, str]
) -> None:
    # Deleted in Temporal's UI (no delete row), then applied again: when the first life ended
    # is not known, so nothing after its last record is planned, and no replay applies the old
    # definition in a time no schedule may have held.
    handle, created_at = await apply_paused(client, pool, task_queue, definition(schedule_id))
    await _wait_past(created_at + timedelta(seconds=5))
    await handle.delete()
    handle, recreated_at = await apply_paused(client, pool, task_queue, definition(schedule_id))
    try:
        await _wait_past(recreated_at + timedelta(seconds=5))
        end = datetime.now(UTC).replace(microsecond=0) - timedelta(seconds=1)
        window = ["--start", iso(created_at - timedelta(minutes=1)), "--end", iso(end)]
        planned = await cli_json(cli_env, "backfill", "plan", schedule_id, *window)
        assert planned["missing_keys"] == _keys(schedule_id, even_slots(recreated_at, end))
        # The first life's one row is its creation: nothing of it after that is planned.
        assert [j["source"] for j in planned["judged_by"]] == ["ended", "history"]
        text = await cli(cli_env, "backfill", "plan", schedule_id, *window)
        assert "not planned: the schedule's life before ended at an unrecorded time" in text.stdout
    finally:
        await handle.delete()


async def test_a_delete_row_the_live_schedule_outlived_is_ignored(
    client: Client, pool: asyncpg.Pool, task_queue: str, schedule_id: str, cli_env: dict[str, str]
) -> None:
    # A delete row later than the schedule's creation, with the schedule still there (a delete
    # that never reached Temporal): its missed fires are still missing, not "deleted".
    handle, created_at = await apply_paused(client, pool, task_queue, definition(schedule_id))
    try:
        await _wait_past(created_at + timedelta(seconds=3))
        async with pool.acquire() as conn:
            await definitions.record_deleted(conn, schedule_id, at=await temporal_now(client))
        await _wait_past(created_at + timedelta(seconds=8))
        end = datetime.now(UTC).replace(microsecond=0) - timedelta(seconds=1)
        window = ["--start", iso(created_at), "--end", iso(end)]
        planned = await cli_json(cli_env, "backfill", "plan", schedule_id, *window)
        assert planned["missing_keys"] == _keys(schedule_id, even_slots(created_at, end))
        assert [j["source"] for j in planned["judged_by"]] == ["history"]
    finally:
        await handle.delete()


async def test_a_recreation_whose_history_row_was_lost_is_judged_by_temporals_memo(
    client: Client, pool: asyncpg.Pool, task_queue: str, schedule_id: str, cli_env: dict[str, str]
) -> None:
    _, created_at = await apply_paused(client, pool, task_queue, definition(schedule_id))
    await _wait_past(created_at + timedelta(seconds=3))
    await operations.delete(client, pool, schedule_id)
    # Created again by an apply whose history write failed (Postgres down): no row says so.
    await apply_definitions(client, None, [definition(schedule_id)], task_queue=task_queue)
    handle = client.get_schedule_handle(schedule_id)
    await pause_when_taken(handle)
    recreated_at = (await terminate_running(client, handle)).info.created_at
    try:
        await _wait_past(recreated_at + timedelta(seconds=5))
        end = datetime.now(UTC).replace(microsecond=0) - timedelta(seconds=1)
        window = ["--start", iso(recreated_at + timedelta(seconds=1)), "--end", iso(end)]
        planned = await cli_json(cli_env, "backfill", "plan", schedule_id, *window)
        assert planned["missing_keys"] == _keys(schedule_id, even_slots(recreated_at, end))
        assert [j["source"] for j in planned["judged_by"]] == ["unrecorded"]
    finally:
        await handle.delete()


async def test_an_unpause_interrupted_between_its_writes_still_holds_the_fires_until_temporal(
    client: Client, pool: asyncpg.Pool, task_queue: str, schedule_id: str, cli_env: dict[str, str]
) -> None:
    handle, created_at = await apply_paused(client, pool, task_queue, definition(schedule_id))
    try:
        await operations.pause(client, pool, schedule_id, reason="ledger migration")
        await _wait_past(created_at + timedelta(seconds=3))
        # `schedules unpause` killed after its first write: the row's pause is lifted, Temporal
        # still holds the schedule, until the operator runs the command again.
        async with pool.acquire() as conn:
            await heartbeats.lift_pause(conn, schedule_id, next_expected_at=None)
        await _wait_past(created_at + timedelta(seconds=9))
        await operations.unpause(client, pool, schedule_id)
        await handle.pause(note="test: the outage goes on")
        await terminate_running(client, handle)
        [pause] = await _pauses(pool, schedule_id)
        assert pause.resumed_at is not None
        assert pause.resumed_at >= created_at + timedelta(seconds=9)
        end = pause.resumed_at.replace(microsecond=0) - timedelta(seconds=1)
        window = ["--start", iso(pause.paused_at + timedelta(seconds=1)), "--end", iso(end)]
        planned = await cli_json(cli_env, "backfill", "plan", schedule_id, *window)
        assert planned["missing_keys"] == []
        assert planned["paused_fires"] == len(even_slots(pause.paused_at, end)) >= 3
    finally:
        await handle.delete()


async def test_a_pause_just_after_a_jittered_slot_holds_it_even_in_a_window_ending_there(
    client: Client, pool: asyncpg.Pool, task_queue: str, schedule_id: str, cli_env: dict[str, str]
) -> None:
    # Slot t, a pause one second after it: t's start could be up to 3 s late, inside the pause,
    # so t is held, also when the window asked for ends at t itself.
    defn = definition(schedule_id, every="4s", jitter="3s")
    handle, created_at = await apply_paused(client, pool, task_queue, defn)
    try:
        slot = datetime.fromtimestamp((int(created_at.timestamp()) // 4 + 2) * 4, UTC)
        await _wait_past(slot + timedelta(seconds=1))
        await operations.pause(client, pool, schedule_id, reason="ledger migration")
        [pause] = await _pauses(pool, schedule_id)
        assert slot < pause.paused_at < slot + timedelta(seconds=3), (slot, pause)
        await _wait_past(slot + timedelta(seconds=5))
        window = ["--start", iso(slot - timedelta(seconds=1)), "--end", iso(slot)]
        planned = await cli_json(cli_env, "backfill", "plan", schedule_id, *window)
        assert (planned["missing_keys"], planned["paused_fires"]) == ([], 1), planned
    finally:
        await handle.delete()


async def test_a_pause_reissued_with_a_new_reason_keeps_the_new_one_in_its_history(
    client: Client, pool: asyncpg.Pool, task_queue: str, schedule_id: str
) -> None:
    handle, _ = await apply_paused(client, pool, task_queue, definition(schedule_id))
    try:
        await operations.pause(client, pool, schedule_id, reason="test run")
        await operations.pause(client, pool, schedule_id, reason="ledger migration (DO NOT RUN)")
        [pause] = await _pauses(pool, schedule_id)
        assert (pause.reason, pause.resumed_at) == ("ledger migration (DO NOT RUN)", None)
    finally:
        await handle.delete()
