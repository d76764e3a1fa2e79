"""`backfill run`: replay chosen fire times of a schedule through the normal guarded run.

A replay starts `ScheduledRunWorkflow` directly with the schedule's own action input plus
`fire_time`, under the workflow id `{schedule_id}~replay-{fire time}`, a form no schedule's own
run id (`{schedule_id}-{fire time}`) can take (schedules/run_ids.py): a manual start that takes
an id a schedule will generate can wedge that schedule (temporalio/temporal#10579). The id reuse
policy is ALLOW_DUPLICATE, so Temporal does not dedupe replays of a key that already closed: the
guard does (outbox check, lease, ON CONFLICT in the commit), and a replay of a committed key
reports `already-done`.

Every run of one schedule takes the same lease (`schedule:{id}` or its shared lock; per key for
allow_all), so a schedule's replays apply one at a time whatever the concurrency: concurrency
only overlaps Temporal's round trips with the job of the replay holding the lease. A replay that
finds the lease held waits in its queue (activities/lease.py), behind every live fire and the
replays queued before it, until `lock_wait` has passed for that key; only then is it reported
`overlap-locked`.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta

from temporalio.client import Client, WorkflowFailureError, WorkflowHandle
from temporalio.common import WorkflowIDReusePolicy
from temporalio.exceptions import WorkflowAlreadyStartedError
from temporalio.service import RPCError

from cronwarden.activities.contract import (
    ALREADY_DONE,
    OVERLAP_LOCKED,
    RAN,
    RunOutcome,
    format_fire_time,
    logical_key,
)
from cronwarden.backfill.plan import ManagedSchedule
from cronwarden.logs import get_logger
from cronwarden.schedules.run_ids import replay_workflow_id
from cronwarden.workflows.scheduled_run import WORKFLOW_NAME

REPLAYED = "replayed"
FAILED = "failed"
OUTCOMES = (REPLAYED, ALREADY_DONE, OVERLAP_LOCKED, FAILED)

FIRST_RETRY_DELAY = 0.25
MAX_RETRY_DELAY = 5.0

log = get_logger("cronwarden.backfill")


@dataclass(frozen=True)
class ReplayResult:
    logical_key: str
    workflow_id: str
    outcome: str
    """`replayed`, `already-done`, `overlap-locked` or `failed`."""
    detail: str | None = None


@dataclass
class Summary:
    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(OUTCOMES, 0))
    failures: list[ReplayResult] = field(default_factory=list)

    def add(self, result: ReplayResult) -> None:
        self.counts[result.outcome] += 1
        if result.outcome == FAILED:
            self.failures.append(result)


async def replay_one(
    client: Client, schedule: ManagedSchedule, fire_time: datetime, *, lock_wait: float
) -> ReplayResult:
    key = logical_key(schedule.schedule_id, fire_time)
    workflow_id = replay_workflow_id(schedule.schedule_id, fire_time)
    inp = replace(schedule.run_input, fire_time=format_fire_time(fire_time), replay=True)
    bound = log.bind(schedule_id=schedule.schedule_id, logical_key=key, workflow_id=workflow_id)
    give_up_at = time.monotonic() + lock_wait
    delay = FIRST_RETRY_DELAY
    while True:
        # The run waits for the lease inside its activity, in the lease's queue (live fires
        # first, replays in arrival order), for what is left of `lock_wait`.
        left = max(give_up_at - time.monotonic(), 0.0)
        try:
            handle, attached = await _start_or_attach(
                client, schedule, replace(inp, lock_wait_seconds=left), workflow_id, lock_wait
            )
            outcome = await handle.result()
        except Exception as exc:
            # A failed run, a refused start, a dropped connection: this key fails, the other
            # replays go on, and the summary counts it.
            detail = _error_detail(exc)
            bound.warning("replay.failed", error=detail)
            return ReplayResult(key, workflow_id, FAILED, detail)
        left = give_up_at - time.monotonic()
        if outcome.outcome == OVERLAP_LOCKED and left > 0:
            # The run's wait was cut short (a retried attempt, a run we attached to): try again
            # for the rest of `lock_wait`, never giving up before it has passed.
            await asyncio.sleep(min(delay * random.uniform(0.5, 1.0), left))
            delay = min(delay * 2, MAX_RETRY_DELAY)
            continue
        result = _classify(key, workflow_id, outcome, attached=attached)
        bound.info(f"replay.{result.outcome}", detail=result.detail)
        return result


async def replay_all(
    client: Client,
    schedule: ManagedSchedule,
    fire_times: Iterable[datetime],
    *,
    concurrency: int,
    lock_wait: float,
    on_result: Callable[[ReplayResult], None] | None = None,
) -> Summary:
    """Replay each fire time once, at most `concurrency` at a time, waiting for every result."""
    summary = Summary()
    pending = iter(fire_times)

    async def worker() -> None:
        # One shared iterator: each worker takes the next fire time when it is free, so at most
        # `concurrency` replays are in flight and none is started twice.
        for fire_time in pending:
            result = await replay_one(client, schedule, fire_time, lock_wait=lock_wait)
            summary.add(result)
            if on_result is not None:
                on_result(result)

    async with asyncio.TaskGroup() as group:
        for _ in range(max(1, concurrency)):
            group.create_task(worker())
    return summary


async def _start_or_attach(
    client: Client,
    schedule: ManagedSchedule,
    inp: object,
    workflow_id: str,
    lock_wait: float = 0.0,
) -> tuple[WorkflowHandle[object, RunOutcome], bool]:
    timeout = schedule.execution_timeout
    try:
        handle: WorkflowHandle[object, RunOutcome] = await client.start_workflow(
            WORKFLOW_NAME,
            inp,
            id=workflow_id,
            task_queue=schedule.task_queue,
            # The schedule's bound on a run, plus the replay's own wait for the lease.
            execution_timeout=timeout + timedelta(seconds=lock_wait) if timeout else None,
            id_reuse_policy=WorkflowIDReusePolicy.ALLOW_DUPLICATE,
            result_type=RunOutcome,
        )
        return handle, False
    except WorkflowAlreadyStartedError:
        # A replay of this very key is running (a second `backfill run` at the same time): wait
        # for its result instead of failing. Starting our own would only end `overlap-locked`
        # or `already-done` behind it, and attaching reports what actually happened.
        return client.get_workflow_handle(workflow_id, result_type=RunOutcome), True


def _classify(key: str, workflow_id: str, outcome: RunOutcome, *, attached: bool) -> ReplayResult:
    if outcome.outcome == RAN:
        if attached:
            # Another backfill's replay ran it: done, but not by us.
            return ReplayResult(key, workflow_id, ALREADY_DONE, "replayed by a concurrent run")
        return ReplayResult(key, workflow_id, REPLAYED)
    if outcome.outcome == ALREADY_DONE:
        detail = "; ".join(outcome.notes) or None
        return ReplayResult(key, workflow_id, ALREADY_DONE, detail)
    if outcome.outcome == OVERLAP_LOCKED:
        return ReplayResult(
            key, workflow_id, OVERLAP_LOCKED, f"lease held by {outcome.held_by or 'another run'}"
        )
    return ReplayResult(key, workflow_id, FAILED, f"unexpected outcome {outcome.outcome!r}")


def _error_detail(exc: Exception) -> str:
    if isinstance(exc, RPCError):
        return f"Temporal refused the replay ({exc.status.name}): {exc.message}"
    if not isinstance(exc, WorkflowFailureError):
        return f"{type(exc).__name__}: {exc}"
    # The innermost cause is the job's own error (or the guard's), not "activity failed".
    cause: BaseException | None = exc.cause
    messages = []
    while cause is not None:
        messages.append(str(cause))
        cause = cause.__cause__
    return messages[-1] if messages else str(exc)
