"""Scratch schedules (the paused copies `apply --dry-run` and `backfill plan` evaluate specs
with) never outlive their command: a create cancelled after Temporal carried it out is deleted
all the same, and the sweep removes old leftovers and nothing else."""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest
from temporalio.client import Client, ScheduleState
from temporalio.service import RPCError, RPCStatusCode

from cronwarden.embedded import EmbeddedTemporal
from cronwarden.schedules.mapping import to_temporal
from cronwarden.schedules.preview import (
    PREVIEW_PREFIX,
    SCRATCH_NOTE,
    ScratchBudgetSpent,
    next_fire_times,
    scratch_budget,
    scratch_schedule,
    sweep_scratch,
)
from tests.support.holding_proxy import HoldingProxy
from tests.support.schedules import definition
from tests.support.scratch_watch import scratch_ever, scratch_now
from tests.support.waiting import wait_for

pytestmark = pytest.mark.integration


async def exists(client: Client, schedule_id: str) -> bool:
    try:
        await client.get_schedule_handle(schedule_id).describe()
    except RPCError as exc:
        if exc.status == RPCStatusCode.NOT_FOUND:
            return False
        raise
    return True


async def test_a_scratch_create_cancelled_after_temporal_made_it_leaves_nothing_behind(
    client: Client, temporal_server: EmbeddedTemporal, schedule_id: str, task_queue: str
) -> None:
    proxy = HoldingProxy(temporal_server.host, temporal_server.port)
    await proxy.start()
    try:
        through_proxy = await Client.connect(proxy.address)
        before = await scratch_ever(client)
        # The create reaches Temporal; its answer does not reach the command, which is then
        # cancelled (a deadline, an interrupted CLI) while it waits for it.
        proxy.hold()
        preview = asyncio.create_task(
            next_fire_times(
                through_proxy,
                definition(schedule_id),
                task_queue=task_queue,
                now=datetime.now(UTC),
            )
        )

        async def created() -> set[str]:
            return await scratch_now(client) - before

        [scratch_id] = await wait_for(created, timeout=30, what="the scratch schedule created")
        assert not preview.done()
        preview.cancel()
        proxy.release()  # Temporal answers again: the delete by id can land
        with pytest.raises(asyncio.CancelledError):
            await preview
        assert not await exists(client, scratch_id)
    finally:
        await proxy.stop()


async def test_a_budget_refuses_the_copy_past_it_before_anything_is_sent(
    client: Client, schedule_id: str, task_queue: str
) -> None:
    before = await scratch_now(client)
    with scratch_budget(1) as budget:
        async with scratch_schedule(client, definition(schedule_id), task_queue=task_queue):
            pass
        with pytest.raises(ScratchBudgetSpent):
            async with scratch_schedule(client, definition(schedule_id), task_queue=task_queue):
                pass
    assert budget.made == 1
    assert await scratch_now(client) - before == set()


async def test_the_sweep_deletes_old_leftover_copies_and_nothing_else(
    client: Client, schedule_id: str, task_queue: str
) -> None:
    schedule = to_temporal(definition(schedule_id), task_queue=task_queue)
    tag = uuid.uuid4().hex[:8]
    ids = {
        "leftover": f"{PREVIEW_PREFIX}{tag}-left",
        # Same prefix, another note: not a copy cronwarden made.
        "other note": f"{PREVIEW_PREFIX}{tag}-other",
        # The scratch note without the prefix: not one either.
        "other id": f"kept-{tag}",
    }
    notes = {"leftover": SCRATCH_NOTE, "other note": "someone's own", "other id": SCRATCH_NOTE}
    for kind, sid in ids.items():
        await client.create_schedule(
            sid, replace(schedule, state=ScheduleState(paused=True, note=notes[kind]))
        )
    try:

        async def listed() -> bool:
            return {ids["leftover"], ids["other note"]} <= await scratch_now(client)

        await wait_for(listed, timeout=30, what="the schedules listed")
        # Young copies are left alone: a running command may be using them.
        assert ids["leftover"] not in await sweep_scratch(client, now=datetime.now(UTC))
        swept = await sweep_scratch(
            client, now=datetime.now(UTC) + timedelta(hours=1), older_than=timedelta(minutes=30)
        )
        assert ids["leftover"] in swept
        assert not await exists(client, ids["leftover"])
        assert await exists(client, ids["other note"]) and await exists(client, ids["other id"])
    finally:
        for sid in ids.values():
            if await exists(client, sid):
                await client.get_schedule_handle(sid).delete()
