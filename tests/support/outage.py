"""A schedule whose every fire is missed: applied by cronwarden, then paused in Temporal at once
(by the test, not by an operator: no heartbeat row records it), its runs terminated. Every fire
time from its creation on has no outbox record until a backfill gives it one."""

from __future__ import annotations

from datetime import UTC, datetime

import asyncpg
from temporalio.client import (
    Client,
    ScheduleActionExecutionStartWorkflow,
    ScheduleDescription,
    ScheduleHandle,
)
from temporalio.service import RPCError

from cronwarden.schedules.apply import apply_definitions
from cronwarden.schedules.model import ScheduleDefinition
from tests.support.waiting import wait_for


async def apply_paused(
    client: Client, pool: asyncpg.Pool, task_queue: str, defn: ScheduleDefinition
) -> tuple[ScheduleHandle, datetime]:
    """Apply `defn` and pause the schedule at once, no run of it left; its creation time."""
    await apply_definitions(client, pool, [defn], task_queue=task_queue)
    handle = client.get_schedule_handle(defn.id)
    await pause_when_taken(handle)
    description = await terminate_running(client, handle)
    return handle, description.info.created_at


async def terminate_running(client: Client, handle: ScheduleHandle) -> ScheduleDescription:
    """End every run the schedule has in flight (a run waiting for a worker that never comes);
    the schedule's description, read before."""
    description = await handle.describe()
    for action in description.info.running_actions:
        if isinstance(action, ScheduleActionExecutionStartWorkflow):
            await client.get_workflow_handle(action.workflow_id).terminate()
    return description


def even_slots(after: datetime, until: datetime) -> list[datetime]:
    """The `every: 2s` slots strictly after `after`, up to `until`: Temporal aligns intervals to
    the epoch."""
    first = int(after.timestamp()) + 1
    first += first % 2
    return [datetime.fromtimestamp(s, UTC) for s in range(first, int(until.timestamp()) + 1, 2)]


async def pause_when_taken(handle: ScheduleHandle, *, timeout: float = 15.0) -> None:
    """Pause a schedule just created. Right after a delete of the same id, Temporal can still
    route the first signal to the old life's finished scheduler ("workflow execution already
    completed"): asked again until the new one takes it."""

    async def paused() -> bool:
        try:
            await handle.pause(note="test: every fire missed")
        except RPCError as exc:
            if "already completed" not in exc.message:
                raise
            return False
        return True

    await wait_for(paused, timeout=timeout, what="the re-created schedule to take its pause")
