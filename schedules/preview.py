"""The next fire times of a definition, as Temporal itself evaluates its spec.

Temporal answers "when would this spec fire" only for a schedule that exists
(ListScheduleMatchingTimes), so the preview creates a scratch copy, paused and with an action id
of its own, asks, and deletes it. The scratch copy carries no cronwarden memo: `apply --prune`,
backfill and the monitor never take it for one of ours, even if the delete is lost.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import replace
from datetime import UTC, datetime

from google.protobuf.timestamp_pb2 import Timestamp
from temporalio.api.workflowservice.v1 import ListScheduleMatchingTimesRequest
from temporalio.client import (
    Client,
    Schedule,
    ScheduleActionStartWorkflow,
    ScheduleSpec,
    ScheduleState,
)

from cronwarden.logs import get_logger
from cronwarden.schedules.mapping import to_temporal
from cronwarden.schedules.model import ScheduleDefinition
from cronwarden.times import utc_text
from cronwarden.workflows.scheduled_run import WORKFLOW_NAME

PREVIEW_COUNT = 3
PREVIEW_PREFIX = "cronwarden-preview-"
# Temporal's calendar ends with 2100; a spec with no fire before then has none at all.
_HORIZON = datetime(2101, 1, 1, tzinfo=UTC)

log = get_logger("cronwarden.schedules")


@asynccontextmanager
async def scratch_schedule(
    client: Client, defn: ScheduleDefinition, *, task_queue: str
) -> AsyncIterator[str]:
    """A paused copy of `defn` under an id of its own, deleted on leaving; yields its id.

    The copy has no jitter: Temporal's matching times (and next action times) are the jittered
    ones, seeded per schedule, while logical keys name the nominal slot. Without jitter the copy
    answers exactly the slots the keys are built from."""
    async with _scratch(client, to_temporal(defn, task_queue=task_queue)) as scratch_id:
        yield scratch_id


@asynccontextmanager
async def scratch_of_spec(
    client: Client, spec: ScheduleSpec, *, task_queue: str
) -> AsyncIterator[str]:
    """A paused schedule of `spec` (as a schedule's description gives it), without its jitter,
    deleted on leaving; yields its id. For a schedule whose definition was never recorded: its
    own spec is all there is, and asking the schedule itself would answer jittered times."""
    # The action is never started (the copy is paused): a bare one, with no payload to encode.
    schedule = Schedule(
        action=ScheduleActionStartWorkflow(WORKFLOW_NAME, id="scratch", task_queue=task_queue),
        spec=spec,
    )
    async with _scratch(client, schedule) as scratch_id:
        yield scratch_id


@asynccontextmanager
async def _scratch(client: Client, schedule: Schedule) -> AsyncIterator[str]:
    scratch_id = f"{PREVIEW_PREFIX}{uuid.uuid4().hex}"
    assert isinstance(schedule.action, ScheduleActionStartWorkflow)
    # Paused and under an id of its own: even a copy that outlived its delete could not start
    # a run, let alone one whose workflow id collides with the real schedule's. Without jitter,
    # whatever the original had: the copy answers nominal slots only.
    schedule = replace(
        schedule,
        spec=replace(schedule.spec, jitter=None),
        action=replace(schedule.action, id=scratch_id),
        state=ScheduleState(paused=True, note="cronwarden scratch copy: evaluates a spec"),
    )
    handle = await client.create_schedule(scratch_id, schedule)
    try:
        yield scratch_id
    finally:
        await handle.delete()


async def next_fire_times(
    client: Client,
    defn: ScheduleDefinition,
    *,
    task_queue: str,
    now: datetime,
    count: int = PREVIEW_COUNT,
) -> list[datetime]:
    """The first `count` nominal fire times after `now` (before jitter: the logical keys)."""
    async with scratch_schedule(client, defn, task_queue=task_queue) as scratch_id:
        response = await client.workflow_service.list_schedule_matching_times(
            ListScheduleMatchingTimesRequest(
                namespace=client.namespace,
                schedule_id=scratch_id,
                start_time=_timestamp(now),
                end_time=_timestamp(_HORIZON),
            )
        )
    times = [t.ToDatetime(tzinfo=UTC) for t in response.start_time[:count]]
    log.info("schedule.preview", schedule_id=defn.id, next_fires=[utc_text(t) for t in times])
    return times


def _timestamp(value: datetime) -> Timestamp:
    ts = Timestamp()
    ts.FromDatetime(value)
    return ts
