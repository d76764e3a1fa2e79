"""What `schedules apply` sends to Temporal, counted at the client's edge (every RPC the
client sends, see bench/rpc_calls.py): a re-apply of an unchanged file reads the schedule list
once and writes nothing, and a change writes only the schedule that changed."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
import pytest
import pytest_asyncio
from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode

from bench.apply_scale import definitions
from bench.rpc_calls import counting_rpcs
from cronwarden.embedded import EmbeddedTemporal
from cronwarden.schedules import apply as apply_module
from cronwarden.schedules import schedule_list
from cronwarden.schedules.apply import (
    CREATED,
    UNCHANGED,
    UPDATED,
    ApplyIncomplete,
    apply_definitions,
)
from cronwarden.schedules.model import ScheduleDefinition
from cronwarden.store import heartbeats
from tests.support.database import fetch

pytestmark = pytest.mark.integration

COUNT = 30


@pytest_asyncio.fixture(loop_scope="session")
async def counted_client(temporal_server: EmbeddedTemporal) -> Client:
    """A client of the test's own, so the count holds this test's calls only."""
    return await Client.connect(temporal_server.address)


@pytest_asyncio.fixture(loop_scope="session")
async def many(counted_client: Client) -> AsyncIterator[list[ScheduleDefinition]]:
    defs = definitions(f"many-{uuid.uuid4().hex[:6]}", COUNT)
    yield defs
    for defn in defs:
        await counted_client.get_schedule_handle(defn.id).delete()


async def test_a_second_apply_with_no_change_makes_zero_write_calls_to_temporal(
    counted_client: Client, pool: asyncpg.Pool, task_queue: str, many: list[ScheduleDefinition]
) -> None:
    with counting_rpcs(counted_client) as first:
        created = await apply_definitions(counted_client, pool, many, task_queue=task_queue)
    assert [c.action for c in created] == [CREATED] * COUNT
    # The counter sees the writes: one create per schedule.
    assert first.writes == {"create_schedule": COUNT}
    # Read twice each: by the plan, and after its create for Temporal's time of the create (the
    # definition history's row is stamped with it, never with this host's clock). Their first
    # fires (in the rows, checked against a describe below) come from the schedule list, not
    # from a third describe. The list is eventually consistent: an entry it still lacks after
    # LIST_WAIT (a loaded server) is described, so a few more describes are the documented
    # fallback, one more per create is not.
    assert first["list_schedules"] >= 1, first
    assert 2 * COUNT <= first["describe_schedule"] < 2 * COUNT + COUNT // 2, first

    # A heartbeat row gone missing (the database was set up after the schedules) comes back;
    # the rows that exist keep what they hold.
    gone = many[0].id
    async with pool.acquire() as conn:
        await conn.execute("DELETE FROM cronwarden.heartbeats WHERE schedule_id = $1", gone)
        await conn.execute(
            "UPDATE cronwarden.heartbeats SET last_error = 'kept' WHERE schedule_id = $1",
            many[1].id,
        )

    with counting_rpcs(counted_client) as second:
        again = await apply_definitions(counted_client, pool, many, task_queue=task_queue)

    assert [c.action for c in again] == [UNCHANGED] * COUNT
    # One paged read of the schedule list and nothing else: no describe of any schedule, where
    # each used to be described (252 s for 10,000).
    assert second == {"list_schedules": await list_pages_count(counted_client)}, second
    assert [c.next_fire for c in again] == [c.next_fire for c in created]
    rows = await fetch(
        pool,
        "SELECT schedule_id, next_expected_at, last_error FROM cronwarden.heartbeats"
        " WHERE schedule_id = ANY($1::text[])",
        [gone, many[1].id],
    )
    by_id = {r["schedule_id"]: r for r in rows}
    assert by_id[gone]["next_expected_at"] == again[0].next_fire
    assert by_id[many[1].id]["last_error"] == "kept"


async def test_an_apply_that_changes_one_schedule_of_many_writes_only_that_one(
    counted_client: Client, pool: asyncpg.Pool, task_queue: str, many: list[ScheduleDefinition]
) -> None:
    await apply_definitions(counted_client, pool, many, task_queue=task_queue)
    changed = [*many]
    changed[7] = many[7].model_copy(update={"timeout": many[7].timeout * 2})

    with counting_rpcs(counted_client) as calls:
        result = await apply_definitions(counted_client, pool, changed, task_queue=task_queue)

    assert [c.schedule_id for c in result if c.action == UPDATED] == [many[7].id]
    assert result[7].changed_fields == ["timeout"]
    assert calls.writes == {"update_schedule": 1}, calls


async def list_pages_count(client: Client) -> int:
    """How many pages one read of the namespace's schedule list takes now."""
    return len([page async for page in schedule_list.list_pages(client)])


@contextmanager
def failing_create(client: Client, *, nth: int) -> Iterator[list[str]]:
    """The `nth` CreateSchedule `client` sends fails as an unavailable server would answer it
    (at the client's edge, as bench/rpc_calls.py counts); yields the ids Temporal did create."""
    service: Any = client.service_client
    original = service._rpc_call
    created: list[str] = []
    sent = 0

    async def call(rpc: str, req: Any, *args: Any, **kwargs: Any) -> Any:
        nonlocal sent
        if rpc == "create_schedule":
            sent += 1
            if sent == nth:
                raise RPCError("injected: server unavailable", RPCStatusCode.UNAVAILABLE, b"")
            response = await original(rpc, req, *args, **kwargs)
            created.append(req.schedule_id)
            return response
        return await original(rpc, req, *args, **kwargs)

    service._rpc_call = call
    try:
        yield created
    finally:
        del service._rpc_call


async def test_an_apply_stopped_by_a_failed_create_names_what_it_wrote_and_a_rerun_converges(
    counted_client: Client, pool: asyncpg.Pool, task_queue: str, many: list[ScheduleDefinition]
) -> None:
    ids = [d.id for d in many]
    with failing_create(counted_client, nth=7) as created, pytest.raises(ApplyIncomplete) as info:
        await apply_definitions(counted_client, pool, many, task_queue=task_queue)

    error = info.value
    # Exactly the schedules Temporal created, each with its rows; the failed one named with the
    # error; the rest named as never written. Together: the whole file, once.
    assert sorted(error.created) == sorted(created)
    assert len(error.failed) == 1 and error.failed[0] not in created
    assert error.updated == [] and error.unrecorded == []
    assert sorted(error.created + error.failed + error.not_applied) == sorted(ids)
    text = str(error)
    assert f"created ({len(created)}): " + ", ".join(error.created) in text
    # UNAVAILABLE does not say the server did not apply it.
    assert (
        f"failed (may have been written): {error.failed[0]} "
        "(Temporal refused the request (UNAVAILABLE)" in text
    )
    if error.not_applied:
        assert ", ".join(error.not_applied) in text
    recorded = await fetch(
        pool,
        "SELECT schedule_id FROM cronwarden.heartbeats WHERE schedule_id = ANY($1::text[])",
        ids,
    )
    assert sorted(r["schedule_id"] for r in recorded) == sorted(created)

    again = await apply_definitions(counted_client, pool, many, task_queue=task_queue)

    actions = {c.schedule_id: c.action for c in again}
    assert actions == {sid: UNCHANGED if sid in created else CREATED for sid in ids}
    for table in ("heartbeats", "definition_history"):
        rows = await fetch(
            pool,
            f"SELECT DISTINCT schedule_id FROM cronwarden.{table}"
            " WHERE schedule_id = ANY($1::text[])",
            ids,
        )
        assert sorted(r["schedule_id"] for r in rows) == sorted(ids), table


async def test_a_rerun_records_the_rows_a_written_schedule_misses(
    counted_client: Client, pool: asyncpg.Pool, task_queue: str, many: list[ScheduleDefinition]
) -> None:
    """An apply stopped between a schedule's write and its rows (the process killed, the
    database gone) leaves the schedule in Temporal without them: the next apply, finding it
    unchanged, records its definition and heartbeat, once."""
    await apply_definitions(counted_client, pool, many, task_queue=task_queue)
    lost = many[3].id
    async with pool.acquire() as conn:
        await conn.execute("DELETE FROM cronwarden.heartbeats WHERE schedule_id = $1", lost)
        await conn.execute("DELETE FROM cronwarden.definition_history WHERE schedule_id = $1", lost)

    for _ in range(2):
        again = await apply_definitions(counted_client, pool, many, task_queue=task_queue)
        assert {c.action for c in again} == {UNCHANGED}

    history = await fetch(
        pool,
        "SELECT definition_digest FROM cronwarden.definition_history WHERE schedule_id = $1",
        lost,
    )
    beat = await fetch(
        pool, "SELECT next_expected_at FROM cronwarden.heartbeats WHERE schedule_id = $1", lost
    )
    assert len(history) == 1
    assert beat[0]["next_expected_at"] == again[3].next_fire


@contextmanager
def after_create(client: Client, hook: Callable[[str], Awaitable[None]]) -> Iterator[None]:
    """Run `hook(schedule_id)` as each CreateSchedule `client` sends is answered."""
    service: Any = client.service_client
    original = service._rpc_call

    async def call(rpc: str, req: Any, *args: Any, **kwargs: Any) -> Any:
        response = await original(rpc, req, *args, **kwargs)
        if rpc == "create_schedule":
            await hook(req.schedule_id)
        return response

    service._rpc_call = call
    try:
        yield
    finally:
        del service._rpc_call


LONG_AGO = datetime(2001, 1, 1, tzinfo=UTC)


async def test_each_create_records_its_rows_at_once_and_its_first_fire_only_where_none_was_set(
    counted_client: Client,
    pool: asyncpg.Pool,
    task_queue: str,
    many: list[ScheduleDefinition],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A run committing, a concurrent apply or `schedules pause` right after a create finds
    the schedule's rows; the first fire filled in afterwards overwrites none of them."""
    ids = [d.id for d in many]
    paused, ran, moved = ids[0], ids[1], ids[2]
    rows_seen: dict[str, Any] = {}

    async def pause_first(schedule_id: str) -> None:
        if schedule_id == paused:
            async with pool.acquire() as conn:
                await heartbeats.pause(conn, schedule_id=paused, reason="right after create")

    real_first_fires = apply_module.first_fires

    async def first_fires(client: Client, schedule_ids: list[str]) -> dict[str, Any]:
        async with pool.acquire() as conn:
            rows = await conn.fetch(
                "SELECT schedule_id, next_expected_at FROM cronwarden.heartbeats"
                " WHERE schedule_id = ANY($1::text[])",
                ids,
            )
            rows_seen.update({r["schedule_id"]: r["next_expected_at"] for r in rows})
            # A fire of `ran` committed (it set the deadline after it); an apply of another
            # definition of `moved` recorded its own.
            await conn.execute(
                "UPDATE cronwarden.heartbeats SET next_expected_at = $2 WHERE schedule_id = $1",
                ran,
                LONG_AGO,
            )
            await conn.execute(
                "UPDATE cronwarden.heartbeats SET definition_digest = 'other'"
                " WHERE schedule_id = $1",
                moved,
            )
        return await real_first_fires(client, schedule_ids)

    monkeypatch.setattr(apply_module, "first_fires", first_fires)
    with after_create(counted_client, pause_first):
        created = await apply_definitions(counted_client, pool, many, task_queue=task_queue)

    # Every row was there, with no deadline yet, before the first fires were read.
    assert rows_seen == dict.fromkeys(ids)
    rows = await fetch(
        pool,
        "SELECT schedule_id, next_expected_at, paused FROM cronwarden.heartbeats"
        " WHERE schedule_id = ANY($1::text[])",
        ids,
    )
    by_id = {r["schedule_id"]: r for r in rows}
    assert by_id[paused]["paused"], "a pause recorded after the create was cleared"
    assert by_id[ran]["next_expected_at"] == LONG_AGO
    assert by_id[moved]["next_expected_at"] is None
    for change in created:
        if change.schedule_id not in (ran, moved):
            assert change.next_fire is not None
            assert by_id[change.schedule_id]["next_expected_at"] == change.next_fire


async def test_an_apply_stopped_before_first_fires_leaves_the_rows_and_a_rerun_fills_them(
    counted_client: Client,
    pool: asyncpg.Pool,
    task_queue: str,
    many: list[ScheduleDefinition],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    ids = [d.id for d in many]

    async def list_down(client: Client, schedule_ids: list[str]) -> dict[str, Any]:
        raise RPCError("injected: list unavailable", RPCStatusCode.UNAVAILABLE, b"")

    monkeypatch.setattr(apply_module, "first_fires", list_down)
    with pytest.raises(ApplyIncomplete) as info:
        await apply_definitions(counted_client, pool, many, task_queue=task_queue)
    assert sorted(info.value.created) == sorted(ids)
    assert "created, first fire not yet expected by the monitor" in str(info.value)
    for table in ("heartbeats", "definition_history"):
        rows = await fetch(
            pool, f"SELECT schedule_id FROM cronwarden.{table} WHERE schedule_id = ANY($1)", ids
        )
        assert sorted(r["schedule_id"] for r in rows) == sorted(ids), table

    monkeypatch.undo()
    again = await apply_definitions(counted_client, pool, many, task_queue=task_queue)

    assert {c.action for c in again} == {UNCHANGED}
    rows = await fetch(
        pool,
        "SELECT schedule_id, next_expected_at FROM cronwarden.heartbeats"
        " WHERE schedule_id = ANY($1::text[])",
        ids,
    )
    expected = {c.schedule_id: c.next_fire for c in again}
    assert {r["schedule_id"]: r["next_expected_at"] for r in rows} == expected


async def test_a_rerun_repairs_a_heartbeat_left_with_another_definitions_deadline(
    counted_client: Client, pool: asyncpg.Pool, task_queue: str, many: list[ScheduleDefinition]
) -> None:
    """An update reached Temporal and its row transaction failed: the row still holds the old
    spec's digest, deadline and grace. The rerun finds the schedule unchanged and repairs all
    three."""
    await apply_definitions(counted_client, pool, many, task_queue=task_queue)
    stale = many[4]
    async with pool.acquire() as conn:
        await conn.execute(
            "UPDATE cronwarden.heartbeats SET definition_digest = 'old', next_expected_at = $2,"
            " grace = $3 WHERE schedule_id = $1",
            stale.id,
            LONG_AGO,
            stale.heartbeat_grace + timedelta(hours=1),
        )

    again = await apply_definitions(counted_client, pool, many, task_queue=task_queue)

    assert again[4].action == UNCHANGED
    beat = await fetch(
        pool,
        "SELECT next_expected_at, grace FROM cronwarden.heartbeats WHERE schedule_id = $1",
        stale.id,
    )
    assert beat[0]["next_expected_at"] == again[4].next_fire
    assert beat[0]["grace"] == stale.heartbeat_grace
