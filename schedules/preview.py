"""The next fire times of a definition, as Temporal itself evaluates its spec.

Temporal answers "when would this spec fire" only for a schedule that exists
(ListScheduleMatchingTimes), so the preview creates a scratch copy, paused and with an action id
of its own, asks, and deletes it. The scratch copy carries no cronwarden memo: `apply --prune`,
backfill and the monitor never take it for one of ours, even if the delete is lost.

A scratch copy is a write to Temporal, so three rules bound them:

- Always deleted. The id is chosen before the create is sent, so a create that Temporal
  committed but whose answer never arrived (a deadline, a cancelled command) is still deleted
  by id; the delete is shielded from the cancellation and a copy already gone is fine.
- Swept. A copy whose delete was lost anyway (the process killed between the two calls) carries
  the prefix and the note below; `sweep_scratch` deletes those older than `SWEEP_AGE` (the
  monitor runs it, see monitor/grids.py).
- Budgeted. Inside `scratch_budget(n)` at most `n` copies are made, the next raises
  `ScratchBudgetSpent` before anything is sent: the status page's background grid refresh
  makes its writes per period under one.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from contextvars import ContextVar
from dataclasses import replace
from datetime import UTC, datetime, timedelta

from google.protobuf.timestamp_pb2 import Timestamp
from temporalio.api.workflowservice.v1 import ListScheduleMatchingTimesRequest
from temporalio.client import (
    Client,
    Schedule,
    ScheduleActionStartWorkflow,
    ScheduleSpec,
    ScheduleState,
)
from temporalio.service import RPCError, RPCStatusCode

from cronwarden.logs import get_logger
from cronwarden.schedules.mapping import to_temporal
from cronwarden.schedules.model import ScheduleDefinition
from cronwarden.schedules.zones import compile_window_around
from cronwarden.times import utc_text
from cronwarden.workflows.scheduled_run import WORKFLOW_NAME

PREVIEW_COUNT = 3
PREVIEW_PREFIX = "cronwarden-preview-"
SCRATCH_NOTE = "cronwarden scratch copy: evaluates a spec"
"""The note every scratch copy is paused with: with the prefix, what the sweep looks for."""
SWEEP_AGE = timedelta(minutes=30)
"""A scratch copy older than this is a leftover: the longest command that holds one (a plan
paging through a long window) is done well within it."""
DELETE_TIMEOUT = 10.0
"""Longest the delete of a scratch copy may take, cancellation or not."""
# Temporal's calendar ends with 2100; a spec with no fire before then has none at all.
_HORIZON = datetime(2101, 1, 1, tzinfo=UTC)

log = get_logger("cronwarden.schedules")


@asynccontextmanager
async def scratch_schedule(
    client: Client,
    defn: ScheduleDefinition,
    *,
    task_queue: str,
    window: tuple[datetime, datetime] | None = None,
) -> AsyncIterator[str]:
    """A paused copy of `defn` under an id of its own, deleted on leaving; yields its id.

    The copy has no jitter: Temporal's matching times (and next action times) are the jittered
    ones, seeded per schedule, while logical keys name the nominal slot. Without jitter the copy
    answers exactly the slots the keys are built from.

    A zoned definition is compiled for `window` (its UTC entries cover whole years around it);
    by default for the years `apply` compiles now."""
    if window is not None:
        window = compile_window_around(*window)
    schedule = to_temporal(defn, task_queue=task_queue, window=window)
    async with _scratch(client, schedule) as scratch_id:
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


class ScratchBudgetSpent(Exception):
    """The scratch copies allowed by the enclosing `scratch_budget` are all made."""


class ScratchBudget:
    def __init__(self, limit: int) -> None:
        self.left = limit
        self.made = 0

    def take(self) -> None:
        if self.left <= 0:
            raise ScratchBudgetSpent(f"no scratch schedule left in this budget ({self.made} made)")
        self.left -= 1
        self.made += 1


# Context, not an argument: backfill's plan makes the copies several calls down, and tasks it
# starts (its prefetch) copy the context, so they draw on the same budget object.
_budget: ContextVar[ScratchBudget | None] = ContextVar("cronwarden_scratch_budget", default=None)


@contextlib.contextmanager
def scratch_budget(limit: int) -> Iterator[ScratchBudget]:
    """At most `limit` scratch copies inside the block (also in the tasks it starts)."""
    budget = ScratchBudget(limit)
    token = _budget.set(budget)
    try:
        yield budget
    finally:
        _budget.reset(token)


@asynccontextmanager
async def _scratch(client: Client, schedule: Schedule) -> AsyncIterator[str]:
    budget = _budget.get()
    if budget is not None:
        budget.take()
    scratch_id = f"{PREVIEW_PREFIX}{uuid.uuid4().hex}"
    assert isinstance(schedule.action, ScheduleActionStartWorkflow)
    # Paused and under an id of its own: even a copy that outlived its delete could not start
    # a run, let alone one whose workflow id collides with the real schedule's. Without jitter,
    # whatever the original had: the copy answers nominal slots only.
    schedule = replace(
        schedule,
        spec=replace(schedule.spec, jitter=None),
        action=replace(schedule.action, id=scratch_id),
        state=ScheduleState(paused=True, note=SCRATCH_NOTE),
    )
    try:
        # Inside the try: once the create is sent, Temporal may commit it even if its answer
        # never reaches us (cancelled, timed out, the connection cut), so the delete by id runs
        # whatever became of the create.
        await client.create_schedule(scratch_id, schedule)
        yield scratch_id
    finally:
        await _delete_surely(client, scratch_id)


async def _delete_surely(client: Client, scratch_id: str) -> None:
    """Delete the copy even while the caller is being cancelled: the delete runs in a task of
    its own, shielded, and is waited for (bounded by DELETE_TIMEOUT) before the cancellation
    goes on. A copy that is not there (its create never landed) is fine."""
    deletion = asyncio.ensure_future(_delete(client, scratch_id))
    cancelled: asyncio.CancelledError | None = None
    while not deletion.done():
        try:
            await asyncio.shield(deletion)
        except asyncio.CancelledError as exc:
            # Keep waiting: leaving now would leave the copy behind when the delete is lost
            # with the loop (a CLI interrupted, asyncio.run cancelling what is left).
            cancelled = exc
        except Exception:
            break  # logged by `_delete`; the sweep removes the copy later
    if cancelled is not None:
        raise cancelled


async def _delete(client: Client, scratch_id: str) -> None:
    try:
        async with asyncio.timeout(DELETE_TIMEOUT):
            await client.get_schedule_handle(scratch_id).delete()
    except RPCError as exc:
        if exc.status == RPCStatusCode.NOT_FOUND:
            return
        log.warning("schedule.scratch-delete-failed", scratch_id=scratch_id, error=str(exc))
        raise
    except TimeoutError:
        log.warning("schedule.scratch-delete-failed", scratch_id=scratch_id, error="timed out")
        raise


async def sweep_scratch(
    client: Client, *, now: datetime, older_than: timedelta = SWEEP_AGE
) -> list[str]:
    """Delete the scratch copies left behind (prefix, paused, the scratch note) created before
    `now - older_than`; their ids. Younger ones may be in use by a running command. Only the
    candidates are described (for their creation time): normally there are none."""
    candidates = [
        entry.id
        async for entry in await client.list_schedules()
        if entry.id.startswith(PREVIEW_PREFIX)
        and entry.schedule is not None
        and entry.schedule.state.paused
        and entry.schedule.state.note == SCRATCH_NOTE
    ]
    swept = []
    for scratch_id in candidates:
        try:
            desc = await client.get_schedule_handle(scratch_id).describe()
        except RPCError as exc:
            if exc.status == RPCStatusCode.NOT_FOUND:
                continue  # deleted meanwhile (the list lags): its command cleaned up
            raise
        if desc.info.created_at <= now - older_than:
            await _delete(client, scratch_id)
            swept.append(scratch_id)
    if swept:
        log.info("schedule.scratch-swept", count=len(swept), scratch_ids=swept[:10])
    return swept


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
