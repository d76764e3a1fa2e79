"""The evidence `backfill/causes.py` judges slots by, gathered at a bounded cost whatever the
window: one paged visibility list of the schedule's runs over the span the slots cover, a
describe only of the runs in flight, one DescribeTaskQueue per queue asked about, and the
history of at most `DETAILED` failed runs. Nothing is read per slot.
"""

from __future__ import annotations

from array import array
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from temporalio.api.enums.v1 import EventType, PendingActivityState
from temporalio.api.workflowservice.v1 import DescribeNamespaceRequest
from temporalio.client import Client, ScheduleDescription, WorkflowExecutionStatus
from temporalio.common import SearchAttributeKey
from temporalio.service import RPCError

from cronwarden.activities.contract import UNKNOWN_JOB, UNKNOWN_JOB_HERE
from cronwarden.backfill.causes import (
    FAILED,
    NAMED,
    NO_WORKER_POLLING,
    NO_WORKER_WITH_JOB_CAUSE,
    RUNNING,
    WAITING_FOR_LEASE,
    Evidence,
    Run,
    RunDetail,
    slot_key,
)
from cronwarden.logs import get_logger
from cronwarden.schedules.health import held_by_operator
from cronwarden.schedules.pollers import queue_pollers
from cronwarden.schedules.run_ids import REPLAY_INFIX, replay_fire_time, scheduled_fire_time
from cronwarden.store import locks
from cronwarden.times import utc_text
from cronwarden.workflows.job_queues import NO_WORKER_WITH_JOB, job_task_queue
from cronwarden.workflows.scheduled_run import WORKFLOW_NAME

log = get_logger("cronwarden.causes")

SCHEDULED_BY_ID = SearchAttributeKey.for_keyword("TemporalScheduledById")

DETAILED = 20
"""Failed runs whose history is read (attempt, error); others are `failed` alone."""
DESCRIBED = 50
"""Open runs described (what each waits on); older open ones are `running` alone."""
MAX_LISTED = 10_000
"""Runs read from visibility for one window; slots before the runs read are judged `unknown`."""


async def list_runs(
    client: Client,
    schedule_id: str,
    *,
    start: datetime,
    end: datetime,
    limit: int = MAX_LISTED,
) -> tuple[list[Run], datetime | None]:
    """The schedule's runs (scheduled fires and replays) that started between `start` and
    `end`, oldest fire first: one paged visibility list. Past `limit`, the oldest are left out
    and the time from which the list is whole is returned."""
    query = (
        f"WorkflowType = '{WORKFLOW_NAME}' "
        f"AND ({SCHEDULED_BY_ID.name} = '{schedule_id}' "
        f"OR WorkflowId STARTS_WITH '{schedule_id}{REPLAY_INFIX}') "
        f"AND StartTime >= '{_rfc3339(start)}' AND StartTime <= '{_rfc3339(end)}'"
    )
    runs: list[Run] = []
    cut: datetime | None = None
    async for execution in client.list_workflows(query):
        scheduled_by = execution.typed_search_attributes.get(SCHEDULED_BY_ID)
        if scheduled_by == schedule_id:
            fire, replay = scheduled_fire_time(schedule_id, execution.id), False
        elif not scheduled_by:
            fire, replay = replay_fire_time(schedule_id, execution.id), True
        else:
            fire, replay = None, False
        if fire is None:
            continue
        if len(runs) >= limit:
            # Visibility lists newest first: what is left is older.
            cut = runs[-1].started
            break
        runs.append(
            Run(
                fire_s=int(fire.timestamp()),
                workflow_id=execution.id,
                run_id=execution.run_id,
                replay=replay,
                started=execution.start_time,
                closed=execution.close_time,
                status=(execution.status or WorkflowExecutionStatus.RUNNING).name.lower(),
            )
        )
    runs.sort(key=lambda r: (r.fire_s, r.started))
    return runs, cut


def _rfc3339(value: datetime) -> str:
    return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


async def describe_in_flight(
    client: Client,
    conn: Any,
    schedule_id: str,
    run: Run,
    *,
    task_queue: str,
    job: str,
    pollers: dict[tuple[str, bool], bool],
) -> RunDetail:
    """What an open run waits on: a worker for its workflow, one with its job, the lease, or
    nothing (running: worker, attempt, since). `pollers` caches one DescribeTaskQueue per
    queue for the whole window."""
    who = "replay" if run.replay else "run"
    try:
        described = await client.get_workflow_handle(run.workflow_id, run_id=run.run_id).describe()
    except RPCError as exc:
        log.warning("causes.describe-failed", workflow_id=run.workflow_id, error=str(exc))
        return RunDetail(RUNNING, f"{who} {run.workflow_id} running since {utc_text(run.started)}")
    pending = list(described.raw_description.pending_activities)
    if not pending:
        if not await _polled(client, pollers, task_queue, activity=False):
            return RunDetail(
                NO_WORKER_POLLING,
                f"{who} {run.workflow_id} waits: no worker polls the task queue '{task_queue}'; "
                "start a worker on it",
            )
        return RunDetail(RUNNING, f"{who} {run.workflow_id} starting since {utc_text(run.started)}")
    activity = pending[0]
    attempt = activity.attempt or 1
    if activity.state == PendingActivityState.PENDING_ACTIVITY_STATE_SCHEDULED:
        queue = job_task_queue(task_queue, job)
        if not await _polled(client, pollers, queue, activity=True):
            return RunDetail(
                NO_WORKER_WITH_JOB_CAUSE,
                f"{who} {run.workflow_id} waits: no polling worker has job '{job}' "
                f"(nothing polls '{queue}'); start a worker whose CRONWARDEN_JOBS registers it",
                attempt=attempt,
            )
    worker = activity.last_worker_identity or None
    since = (
        activity.last_started_time.ToDatetime(tzinfo=UTC)
        if activity.HasField("last_started_time")
        else run.started
    )
    holder = await locks.holder_for_waiter(conn, slot_key(schedule_id, run.fire_s))
    if holder is not None:
        return RunDetail(
            WAITING_FOR_LEASE,
            f"{who} {run.workflow_id} waits for the lease held by {holder}",
            attempt=attempt,
            worker=worker,
            since=since,
        )
    return RunDetail(
        RUNNING,
        f"{who} {run.workflow_id} running on {worker or 'a worker'}, attempt {attempt}, "
        f"since {utc_text(since)}",
        attempt=attempt,
        worker=worker,
        since=since,
    )


async def _polled(
    client: Client, pollers: dict[tuple[str, bool], bool], queue: str, *, activity: bool
) -> bool:
    known = pollers.get((queue, activity))
    if known is None:
        try:
            known = (await queue_pollers(client, queue, activity=activity)).polled
        except (RPCError, TimeoutError) as exc:
            # Temporal could not say: never read an outage as "no worker".
            log.warning("causes.pollers-failed", task_queue=queue, error=str(exc))
            known = True
        pollers[(queue, activity)] = known
    return known


async def failure_of(client: Client, run: Run, *, last_error: str | None) -> RunDetail:
    """A failed run's attempt and error, from its history (short: a run is a dozen events)."""
    who = "replay" if run.replay else "run"
    handle = client.get_workflow_handle(run.workflow_id, run_id=run.run_id)
    attempt = 0
    message: str | None = None
    failure_type: str | None = None
    try:
        async for event in handle.fetch_history_events():
            if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED:
                attempt = max(attempt, event.activity_task_started_event_attributes.attempt)
            elif event.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_FAILED:
                failure = event.workflow_execution_failed_event_attributes.failure
                while failure.HasField("cause"):
                    failure = failure.cause
                message = failure.message
                failure_type = failure.application_failure_info.type or None
    except RPCError as exc:
        log.warning("causes.history-failed", workflow_id=run.workflow_id, error=str(exc))
    if failure_type == NO_WORKER_WITH_JOB:
        return RunDetail(
            NO_WORKER_WITH_JOB_CAUSE,
            f"{who} {run.workflow_id} failed: no polling worker had its job ({message})",
        )
    if failure_type in (UNKNOWN_JOB, UNKNOWN_JOB_HERE):
        # A run of a release before per-job queues: it reached workers without its job.
        return RunDetail(
            NO_WORKER_WITH_JOB_CAUSE,
            f"{who} {run.workflow_id} failed on attempt {attempt or '?'}: unknown job ({message})",
            attempt=attempt or None,
        )
    error = message or last_error or run.status.replace("_", " ")
    if attempt:
        text = f"{who} {run.workflow_id} failed on attempt {attempt}: {error}"
    else:
        text = f"{who} {run.workflow_id} {run.status.replace('_', ' ')}: {error}"
    if last_error and message and last_error != message and not run.replay:
        text += f" (last error recorded: {last_error})"
    return RunDetail(FAILED, text, attempt=attempt or None)


async def gather(
    client: Client,
    conn: Any,
    *,
    schedule_id: str,
    description: ScheduleDescription | None,
    missing: array[int] | Sequence[int],
    in_flight: Sequence[int] = (),
    task_queue: str | None,
    job: str | None,
    overlap: str,
    lookback: timedelta,
    beat: dict[str, Any] | None,
    retained_from: datetime | None = None,
) -> Evidence:
    """The evidence for slots `missing` and `in_flight` (epoch seconds, ascending): the runs that
    started from `lookback` before the first of them to the last (one paged list), what the open
    runs wait on, and why the latest `DETAILED` failed runs failed."""
    slots = sorted(set(missing[:1]) | set(missing[-1:]) | set(in_flight))
    paused_note = None
    if description is not None and description.schedule.state.paused:
        note = description.schedule.state.note or ""
        paused_note = None if held_by_operator(note) else (note or "no note")
    if not slots:
        return Evidence(schedule_id, overlap, [], paused_note=paused_note)
    start = datetime.fromtimestamp(slots[0], UTC) - lookback
    if retained_from is not None:
        # Nothing older is left to list.
        start = max(start, retained_from - lookback)
    end = datetime.fromtimestamp(slots[-1], UTC) + timedelta(minutes=5)
    runs, cut = await list_runs(client, schedule_id, start=start, end=end)
    details: dict[str, RunDetail] = {}
    pollers: dict[tuple[str, bool], bool] = {}
    last_error = beat["last_error"] if beat else None
    wanted = set(missing) if len(missing) <= NAMED * 20 else None
    failed = [
        r
        for r in runs
        if r.closed is not None
        and r.status != "completed"
        and (wanted is None or r.fire_s in wanted)
    ]
    for run in failed[-DETAILED:]:
        details[run.workflow_id] = await failure_of(client, run, last_error=last_error)
    if task_queue is not None and job is not None:
        # The latest open runs: few but for an allow_all schedule nobody polls for.
        for run in [r for r in runs if r.closed is None][-DESCRIBED:]:
            details[run.workflow_id] = await describe_in_flight(
                client, conn, schedule_id, run, task_queue=task_queue, job=job, pollers=pollers
            )
    scheduled = [r for r in runs if not r.replay]
    latest = max(scheduled, key=lambda r: r.started, default=None)
    paused_since = (
        latest.closed
        if paused_note is not None
        and latest is not None
        and latest.closed is not None
        and latest.status != "completed"
        else None
    )
    return Evidence(
        schedule_id,
        overlap,
        runs,
        paused_since=paused_since,
        details=details,
        paused_note=paused_note,
        listed_from=cut,
        retained_from=retained_from,
        last_error=last_error,
        lease_skip={
            "logical_key": beat.get("last_lease_skip_key"),
            "holder": beat.get("last_lease_skip_holder"),
        }
        if beat
        else None,
    )


async def retention_start(client: Client, *, now: datetime) -> datetime | None:
    """The oldest time Temporal still keeps closed runs from (its namespace's retention)."""
    try:
        described = await client.workflow_service.describe_namespace(
            DescribeNamespaceRequest(namespace=client.namespace)
        )
    except RPCError as exc:
        log.warning("causes.namespace-failed", error=str(exc))
        return None
    ttl = described.config.workflow_execution_retention_ttl
    return now - ttl.ToTimedelta() if ttl.seconds or ttl.nanos else None
