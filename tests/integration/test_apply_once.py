"""`schedules apply` once per release: a re-apply settles what the schedule list shows unchanged
without a describe, still finds what was edited outside cronwarden by the rule it documents,
and an older file never overwrites the one in force unless forced. RPCs are counted at the
client's edge (bench/rpc_calls.py), on real Temporal and Postgres."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path

import asyncpg
import pytest
import pytest_asyncio
from temporalio.client import (
    Client,
    ScheduleActionStartWorkflow,
    ScheduleIntervalSpec,
    ScheduleSpec,
    ScheduleUpdate,
    ScheduleUpdateInput,
)

from bench.rpc_calls import counting_rpcs
from cronwarden.embedded import EmbeddedTemporal
from cronwarden.schedules import schedule_list
from cronwarden.schedules.apply import (
    CREATED,
    UNCHANGED,
    UPDATED,
    apply_definitions,
    describe_or_none,
    file_digest,
)
from cronwarden.schedules.inventory import action_memo
from cronwarden.schedules.lives import delete_schedule
from cronwarden.schedules.mapping import DIGEST_MEMO, definition_digest
from cronwarden.schedules.model import ScheduleDefinition
from tests.support.cleanup import delete_schedules
from tests.support.cli import cli
from tests.support.database import fetch
from tests.support.schedules import FAR_CRON, new_id, write_schedules_file, yearly_definition
from tests.support.waiting import wait_for

pytestmark = pytest.mark.integration


@pytest_asyncio.fixture(loop_scope="session")
async def counted_client(temporal_server: EmbeddedTemporal) -> Client:
    """A client of the test's own, so the count holds this test's calls only."""
    return await Client.connect(temporal_server.address)


@pytest_asyncio.fixture(loop_scope="session")
async def cleanup(client: Client) -> AsyncIterator[list[str]]:
    """Ids to delete after the test."""
    ids: list[str] = []
    yield ids
    await delete_schedules(client, ids)


@pytest_asyncio.fixture(loop_scope="session")
async def yearly(
    counted_client: Client, pool: asyncpg.Pool, task_queue: str, cleanup: list[str]
) -> ScheduleDefinition:
    """One schedule applied, firing once a year (never during the test)."""
    defn = yearly_definition(new_id("once"))
    cleanup.append(defn.id)
    await apply_definitions(counted_client, pool, [defn], task_queue=task_queue)
    return defn


async def listed_spec_differs(client: Client, schedule_id: str, digest: str) -> bool:
    """Whether the (eventually consistent) list shows the schedule with another spec now."""
    listing = await schedule_list.read_listing(client)
    shown = listing.get(schedule_id)
    return shown is not None and shown.listed_digest != digest


async def test_a_spec_edited_outside_cronwarden_with_its_memo_kept_is_found_and_put_back(
    counted_client: Client, pool: asyncpg.Pool, task_queue: str, cleanup: list[str]
) -> None:
    defs = [yearly_definition(new_id("kept")) for _ in range(3)]
    cleanup.extend(d.id for d in defs)
    await apply_definitions(counted_client, pool, defs, task_queue=task_queue)
    edited = defs[1]
    handle = counted_client.get_schedule_handle(edited.id)
    before = schedule_list.described_listed_digest(await handle.describe())

    # An SDK edit keeps every memo: the action memo still carries the file's digest, which
    # is all a describe-and-compare apply looked at.
    async def to_every_fifty_minutes(inp: ScheduleUpdateInput) -> ScheduleUpdate:
        schedule = inp.description.schedule
        schedule.spec = ScheduleSpec(intervals=[ScheduleIntervalSpec(every=timedelta(minutes=50))])
        return ScheduleUpdate(schedule=schedule)

    await handle.update(to_every_fifty_minutes)
    assert (await action_memo(counted_client, await handle.describe()))[
        DIGEST_MEMO
    ] == definition_digest(edited, task_queue=task_queue)
    await wait_for(
        lambda: listed_spec_differs(counted_client, edited.id, before),
        timeout=30,
        what="the list to show the edited spec",
    )

    with counting_rpcs(counted_client) as calls:
        again = await apply_definitions(counted_client, pool, defs, task_queue=task_queue)

    assert [c.action for c in again] == [UNCHANGED, UPDATED, UNCHANGED]
    # Only the edited one is described (by the plan, then by the update's own attempt and its
    # check), and only it is written.
    assert calls.writes == {"update_schedule": 1}, calls
    assert calls["describe_schedule"] == 3, calls
    restored = await handle.describe()
    assert not restored.schedule.spec.intervals
    assert schedule_list.described_listed_digest(restored) == before


async def test_an_edit_of_only_the_action_outside_cronwarden_is_found_by_verify(
    counted_client: Client, pool: asyncpg.Pool, task_queue: str, yearly: ScheduleDefinition
) -> None:
    defn = yearly
    handle = counted_client.get_schedule_handle(defn.id)

    # As `temporal schedule update` or the UI would: the action replaced (another task queue,
    # no memo), the spec given again as it was. The list shows nothing of the action.
    async def elsewhere(inp: ScheduleUpdateInput) -> ScheduleUpdate:
        schedule = inp.description.schedule
        assert isinstance(schedule.action, ScheduleActionStartWorkflow)
        schedule.action = ScheduleActionStartWorkflow(
            schedule.action.workflow, id=defn.id, task_queue="somewhere-else"
        )
        return ScheduleUpdate(schedule=schedule)

    await handle.update(elsewhere)

    # The documented rule: the list alone does not see it ...
    plain = await apply_definitions(counted_client, pool, [defn], task_queue=task_queue)
    assert [c.action for c in plain] == [UNCHANGED]
    # ... a verifying apply describes every schedule and puts the file's definition back.
    with counting_rpcs(counted_client) as calls:
        verified = await apply_definitions(
            counted_client, pool, [defn], task_queue=task_queue, verify=True
        )
    assert [c.action for c in verified] == [UPDATED]
    assert calls.writes == {"update_schedule": 1}, calls
    action = (await handle.describe()).schedule.action
    assert isinstance(action, ScheduleActionStartWorkflow)
    assert action.task_queue == task_queue
    # Described and recorded again: the next apply needs the list alone.
    with counting_rpcs(counted_client) as after:
        assert [
            c.action
            for c in await apply_definitions(counted_client, pool, [defn], task_queue=task_queue)
        ] == [UNCHANGED]
    assert set(after) == {"list_schedules"}, after


async def test_a_schedule_deleted_through_cronwarden_is_created_again_by_the_next_apply(
    client: Client, pool: asyncpg.Pool, task_queue: str, yearly: ScheduleDefinition
) -> None:
    defn = yearly
    await delete_schedule(client, pool, defn.id)

    # The list may still show the schedule a moment after its delete; the history's delete
    # row sends it to a describe, which finds it gone.
    again = await apply_definitions(client, pool, [defn], task_queue=task_queue)
    assert [c.action for c in again] == [CREATED]
    assert await describe_or_none(client, defn.id) is not None


async def test_a_schedule_without_a_record_is_described_once_then_listed(
    counted_client: Client, pool: asyncpg.Pool, task_queue: str, yearly: ScheduleDefinition
) -> None:
    """A schedule applied before this release recorded anything (or an apply that lost its
    rows): described once, recorded, and from then on settled by the list."""
    defn = yearly
    async with pool.acquire() as conn:
        await conn.execute(
            "DELETE FROM cronwarden.applied_schedules WHERE schedule_id = $1", defn.id
        )

    with counting_rpcs(counted_client) as first:
        await apply_definitions(counted_client, pool, [defn], task_queue=task_queue)
    assert first["describe_schedule"] == 1, first
    with counting_rpcs(counted_client) as second:
        await apply_definitions(counted_client, pool, [defn], task_queue=task_queue)
    assert set(second) == {"list_schedules"}, second


def schedules_file(tmp_path: Path, sid: str, cron: str) -> Path:
    return write_schedules_file(
        tmp_path, f"schedules:\n  - id: {sid}\n    job: probe\n    cron: '{cron}'\n"
    )


async def applied_files(pool: asyncpg.Pool, task_queue: str) -> list[tuple[str, bool]]:
    rows = await fetch(
        pool,
        "SELECT file_digest, forced FROM cronwarden.applied_files WHERE task_queue = $1"
        " ORDER BY sequence",
        task_queue,
    )
    return [(r["file_digest"], r["forced"]) for r in rows]


async def test_an_older_file_after_a_newer_one_is_refused_and_force_applies_it(
    tmp_path: Path,
    cli_env: dict[str, str],
    client: Client,
    pool: asyncpg.Pool,
    task_queue: str,
    cleanup: list[str],
) -> None:
    sid = new_id("release")
    cleanup.append(sid)
    old = schedules_file(tmp_path, sid, FAR_CRON)
    new = schedules_file(tmp_path, sid, "0 4 1 1 *")
    assert (await cli(cli_env, "schedules", "apply", str(old))).code == 0
    assert (await cli(cli_env, "schedules", "apply", str(new))).code == 0
    handle = client.get_schedule_handle(sid)
    in_force = await handle.describe()
    recorded = await applied_files(pool, task_queue)
    assert len(recorded) == 2

    refused = await cli(cli_env, "schedules", "apply", str(old))

    assert refused.code == 2, refused
    assert "another file has been applied since" in refused.stderr, refused.stderr
    assert "--force" in refused.stderr
    # Nothing written: Temporal holds the newer file's definition, untouched, and nothing is
    # recorded.
    after = await handle.describe()
    assert after.info.last_updated_at == in_force.info.last_updated_at
    assert (await action_memo(client, after))[DIGEST_MEMO] == (await action_memo(client, in_force))[
        DIGEST_MEMO
    ]
    assert await applied_files(pool, task_queue) == recorded

    # A rollback says so: forced, and recorded as forced.
    forced = await cli(cli_env, "schedules", "apply", "--force", "--json", str(old))
    assert forced.code == 0, forced
    assert [c["action"] for c in json.loads(forced.stdout)["changes"]] == ["updated"]
    rolled_back = await applied_files(pool, task_queue)
    assert rolled_back[:2] == recorded
    assert rolled_back[2] == (recorded[0][0], True)

    # The file in force applied again is a no-op, recorded once.
    again = await cli(cli_env, "schedules", "apply", "--json", str(old))
    assert again.code == 0, again
    assert [c["action"] for c in json.loads(again.stdout)["changes"]] == ["unchanged"]
    assert await applied_files(pool, task_queue) == rolled_back
    # And now the newer file is the superseded one.
    assert (await cli(cli_env, "schedules", "apply", str(new))).code == 2


async def test_a_file_that_only_moves_and_comments_its_entries_is_the_same_file() -> None:
    a = yearly_definition("a-1")
    b = yearly_definition("b-1", args={"n": 1})
    queue = f"tq-{uuid.uuid4().hex}"
    assert file_digest([a, b], task_queue=queue) == file_digest([b, a], task_queue=queue)
    assert file_digest([a, b], task_queue=queue) != file_digest([a], task_queue=queue)
    assert file_digest([a], task_queue=queue) != file_digest([a], task_queue=queue + "x")
