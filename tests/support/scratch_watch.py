"""Which scratch schedules (schedules/preview.py) exist in Temporal, and which ever did.

A schedule runs as a system workflow whose id is `temporal-sys-scheduler:` + the schedule id;
visibility keeps that workflow after the schedule is deleted, so a scratch copy created and
deleted between two looks is still seen. Visibility lags a write a little: `settled` writes a
marker schedule and waits until visibility shows it, after which every earlier create shows too.
"""

from __future__ import annotations

import uuid
from dataclasses import replace

from temporalio.client import Client, ScheduleState

from cronwarden.schedules.mapping import to_temporal
from cronwarden.schedules.model import ScheduleDefinition
from cronwarden.schedules.preview import PREVIEW_PREFIX
from tests.support.waiting import wait_for

_SCHEDULERS = "TemporalNamespaceDivision = 'TemporalScheduler'"
_SYSTEM_PREFIX = "temporal-sys-scheduler:"


async def scratch_ever(client: Client) -> set[str]:
    """Every scratch schedule id visibility has seen created, deleted since or not."""
    ids = set()
    async for execution in client.list_workflows(_SCHEDULERS):
        schedule_id = execution.id.removeprefix(_SYSTEM_PREFIX)
        if schedule_id.startswith(PREVIEW_PREFIX):
            ids.add(schedule_id)
    return ids


async def scratch_now(client: Client) -> set[str]:
    """The scratch schedule ids Temporal's schedule list shows now."""
    return {s.id async for s in await client.list_schedules() if s.id.startswith(PREVIEW_PREFIX)}


async def settled(client: Client) -> None:
    """Until visibility has caught up with every schedule created before this call."""
    marker = f"visibility-marker-{uuid.uuid4().hex[:12]}"
    defn = ScheduleDefinition.model_validate({"id": marker, "job": "probe", "every": "1h"})
    schedule = to_temporal(defn, task_queue="visibility-marker")
    handle = await client.create_schedule(
        marker, replace(schedule, state=ScheduleState(paused=True, note="marker"))
    )
    try:

        async def seen() -> bool:
            query = f"{_SCHEDULERS} AND WorkflowId = '{_SYSTEM_PREFIX}{marker}'"
            return bool([e async for e in client.list_workflows(query)])

        await wait_for(seen, timeout=30, what="visibility to show the marker schedule")
    finally:
        await handle.delete()
