"""Every run of the soak as Temporal recorded it, and the live fires a replay cost.

A run is a replay when no schedule started it: Temporal tags each run a schedule starts with
`TemporalScheduledById`, and a `backfill run` start has no such tag. That holds whatever form
replay workflow ids take, so the soak never parses ids. A live run `overlap-locked` names the
logical key that held the lease (`RunOutcome.held_by`); when a replay of that key was running at
the same time, the replay cost that live fire.
"""

from __future__ import annotations

import asyncio
import re
from dataclasses import dataclass
from datetime import datetime

from temporalio.client import (
    Client,
    WorkflowExecution,
    WorkflowExecutionStatus,
    WorkflowFailureError,
)
from temporalio.common import SearchAttributeKey

from cronwarden.activities.contract import OVERLAP_LOCKED, RunOutcome, logical_key, parse_fire_time
from cronwarden.backfill.replay import _error_detail
from cronwarden.workflows.scheduled_run import (
    SCHEDULED_START_TIME,
    WORKFLOW_NAME,
    ScheduledRunInput,
)

SCHEDULED_BY_ID = SearchAttributeKey.for_keyword("TemporalScheduledById")
# How a buffer_one fire that waited out its timeout names the holder (workflows/scheduled_run.py).
_HELD_BY = re.compile(r"held by (\S+) for longer than")
_LOOKUPS_AT_ONCE = 8


@dataclass(frozen=True)
class Run:
    workflow_id: str
    schedule_id: str
    logical_key: str
    replay: bool
    started: datetime
    closed: datetime | None
    status: str
    """Temporal's execution status, lower case (`completed`, `failed`, ...)."""
    outcome: str | None = None
    """For a completed run: `ran`, `already-done` or `overlap-locked`."""
    held_by: str | None = None
    """The logical key that held the lease, for a run that did not get it."""
    error: str | None = None

    def overlaps(self, other: Run) -> bool:
        """Both were running at some moment (a run still open runs until now)."""
        return (self.closed is None or other.started <= self.closed) and (
            other.closed is None or self.started <= other.closed
        )


async def collect_runs(client: Client, task_queue: str) -> list[Run]:
    """Every run of `ScheduledRunWorkflow` on the soak's task queue, with its result."""
    query = f"WorkflowType = '{WORKFLOW_NAME}' AND TaskQueue = '{task_queue}'"
    executions = [e async for e in client.list_workflows(query)]
    limit = asyncio.Semaphore(_LOOKUPS_AT_ONCE)

    async def one(execution: WorkflowExecution) -> Run:
        async with limit:
            return await _run(client, execution)

    return list(await asyncio.gather(*(one(e) for e in executions)))


def lost_to_replays(runs: list[Run]) -> list[Run]:
    """Live runs that did not run because a replay held their lease: skipped (`overlap-locked`)
    or, under buffer_one, failed after waiting their whole timeout behind it."""
    replays = [r for r in runs if r.replay]
    return [
        live
        for live in runs
        if not live.replay
        and live.held_by is not None
        and live.outcome != "ran"
        # A replay of this very key: the key is applied (by the replay), nothing is lost.
        and live.held_by != live.logical_key
        and any(r.logical_key == live.held_by and r.overlaps(live) for r in replays)
    ]


async def _run(client: Client, execution: WorkflowExecution) -> Run:
    scheduled_by = execution.typed_search_attributes.get(SCHEDULED_BY_ID)
    if scheduled_by:
        fire_time = execution.typed_search_attributes.get(SCHEDULED_START_TIME)
        assert fire_time is not None, f"{execution.id} has no TemporalScheduledStartTime"
        schedule_id, key = scheduled_by, logical_key(scheduled_by, fire_time)
    else:
        inp = await _input(client, execution)
        assert inp.fire_time, f"replay {execution.id} has no fire time in its input"
        schedule_id = inp.schedule_id
        key = logical_key(schedule_id, parse_fire_time(inp.fire_time))
    status = execution.status.name.lower() if execution.status else "unknown"
    run = Run(
        workflow_id=execution.id,
        schedule_id=schedule_id,
        logical_key=key,
        replay=not scheduled_by,
        started=execution.start_time,
        closed=execution.close_time,
        status=status,
    )
    if execution.status == WorkflowExecutionStatus.COMPLETED:
        handle = client.get_workflow_handle(
            execution.id, run_id=execution.run_id, result_type=RunOutcome
        )
        outcome = await handle.result()
        held_by = outcome.held_by if outcome.outcome == OVERLAP_LOCKED else None
        return _with(run, outcome=outcome.outcome, held_by=held_by)
    if execution.status == WorkflowExecutionStatus.FAILED:
        error = await _failure(client, execution)
        match = _HELD_BY.search(error)
        return _with(run, error=error, held_by=match.group(1) if match else None)
    return run


def _with(run: Run, **fields: str | None) -> Run:
    return Run(**{**run.__dict__, **fields})


async def _input(client: Client, execution: WorkflowExecution) -> ScheduledRunInput:
    handle = client.get_workflow_handle(execution.id, run_id=execution.run_id)
    history = await handle.fetch_history()
    started = history.events[0].workflow_execution_started_event_attributes
    [inp] = await client.data_converter.decode(list(started.input.payloads), [ScheduledRunInput])
    assert isinstance(inp, ScheduledRunInput)
    return inp


async def _failure(client: Client, execution: WorkflowExecution) -> str:
    """The innermost cause of a failed run (the guard's or the workflow's own error)."""
    handle = client.get_workflow_handle(execution.id, run_id=execution.run_id)
    try:
        await handle.result()
    except WorkflowFailureError as exc:
        # Worded the way `backfill run` reports a failed replay.
        return _error_detail(exc)
    return "failed, but its result could be read"
