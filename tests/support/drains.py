"""Helpers for runs cut by stopping workers: a schedule's triggered run, a lease held by a run
that is not the test's, and what Temporal recorded of a run's activities."""

from __future__ import annotations

from typing import Any

import asyncpg
from temporalio.api.enums.v1 import EventType
from temporalio.client import (
    Client,
    ScheduleActionExecutionStartWorkflow,
    ScheduleHandle,
    WorkflowHandle,
)

from cronwarden.activities.contract import RunOutcome
from cronwarden.store import locks
from tests.support.waiting import wait_for

COMPLETED = "completed"


async def triggered_run(
    client: Client, schedule: ScheduleHandle
) -> WorkflowHandle[Any, RunOutcome]:
    """Trigger `schedule`; a handle on the run it started."""
    await schedule.trigger()

    async def started() -> str:
        actions = (await schedule.describe()).info.running_actions
        ids = [
            a.workflow_id for a in actions if isinstance(a, ScheduleActionExecutionStartWorkflow)
        ]
        return ids[0] if ids else ""

    workflow_id = await wait_for(started, timeout=30, what=f"a run of {schedule.id}")
    return client.get_workflow_handle(workflow_id, result_type=RunOutcome)


async def hold_lease(pool: asyncpg.Pool, lock: str, *, ttl_seconds: float) -> int:
    """Take `lock` for a run that is not the test's; its fencing token, to release it with."""
    async with pool.acquire() as conn:
        got = await locks.acquire(
            conn, name=lock, holder="held-by-test", ttl_seconds=ttl_seconds, logical_key="test@key"
        )
    assert got.token is not None, f"{lock} is held already"
    return got.token


async def activity_attempts(handle: WorkflowHandle[Any, RunOutcome]) -> list[tuple[int, str]]:
    """(attempt, how it ended) of every activity the run started, as Temporal recorded them:
    COMPLETED, or the failure's type."""
    found: list[tuple[int, str]] = []
    attempt = 0
    async for event in handle.fetch_history_events():
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED:
            attempt = event.activity_task_started_event_attributes.attempt
        elif event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
            found.append((attempt, COMPLETED))
        elif event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_FAILED:
            failure = event.activity_task_failed_event_attributes.failure
            found.append((attempt, failure.application_failure_info.type))
    return found


async def scheduled_max_attempts(handle: WorkflowHandle[Any, RunOutcome]) -> list[int]:
    """The retry policy's maximum attempts of every activity the run scheduled, in order."""
    return [
        event.activity_task_scheduled_event_attributes.retry_policy.maximum_attempts
        async for event in handle.fetch_history_events()
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
    ]
