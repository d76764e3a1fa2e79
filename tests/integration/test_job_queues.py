"""A run reaches only a worker that has its job: two real workers with different job sets poll
the same schedule task queue, as old and new pods do during a rolling release.

Worker A is deployed without `probe`, worker B with it. Before per-job activity queues, a run
of `probe` went to whichever worker polled first: on A it failed an attempt, and when every
attempt landed there the run failed and the schedule paused.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path

import asyncpg
import pytest
from temporalio.api.enums.v1 import PendingActivityState
from temporalio.client import (
    Client,
    ScheduleActionExecutionStartWorkflow,
    ScheduleHandle,
    WorkflowExecutionStatus,
    WorkflowFailureError,
)
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError, RPCStatusCode
from temporalio.worker import Worker

from cronwarden.activities.contract import RAN, logical_key
from cronwarden.activities.jobs import REGISTRY, JobRegistry
from cronwarden.backfill.plan import load_managed, plan
from cronwarden.backfill.replay import REPLAYED, replay_one
from cronwarden.backfill.window import Window
from cronwarden.schedules.apply import apply_definitions
from cronwarden.schedules.model import ScheduleDefinition
from cronwarden.schedules.pollers import job_pollers, jobs_without_worker, no_worker_cause
from cronwarden.schedules.run_ids import replay_workflow_id
from cronwarden.schedules.status import status_report
from cronwarden.worker_runtime import build_worker
from cronwarden.workflows.hand_back import HANDED_BACK
from cronwarden.workflows.job_queues import NO_WORKER_WITH_JOB
from tests.support.database import fetch
from tests.support.runs import FIRE, start_run
from tests.support.schedules import definition, every_two_seconds, yearly_definition
from tests.support.servers import in_process_worker
from tests.support.waiting import clock_past, wait_for

pytestmark = pytest.mark.integration

ROLLOUT_SECONDS = 40


def registry_of(*names: str) -> JobRegistry:
    registry = JobRegistry()
    for name in names:
        registry.register(REGISTRY.get(name))
    return registry


@asynccontextmanager
async def worker_on(
    client: Client, pool: asyncpg.Pool, task_queue: str, *jobs: str
) -> AsyncIterator[Worker]:
    """A worker process of its own (its own client: one client runs one worker per queue)."""
    own = await Client.connect(client.service_client.config.target_host)
    async with in_process_worker(own, pool, task_queue, registry_of(*jobs)) as worker:
        yield worker


async def waiting_for_a_worker(client: Client, workflow_id: str) -> bool:
    """The run's activity is scheduled and no worker has started it (its first attempt)."""
    try:
        described = await client.get_workflow_handle(workflow_id).describe()
    except RPCError as exc:
        if exc.status == RPCStatusCode.NOT_FOUND:
            return False  # not started yet
        raise
    pending = described.raw_description.pending_activities
    return bool(pending) and all(
        p.state == PendingActivityState.PENDING_ACTIVITY_STATE_SCHEDULED and p.attempt == 1
        for p in pending
    )


async def outbox(pool: asyncpg.Pool, schedule_id: str) -> list[asyncpg.Record]:
    return await fetch(
        pool,
        "SELECT logical_key, fire_time, attempt FROM cronwarden.outbox WHERE schedule_id = $1",
        schedule_id,
    )


async def heartbeat(pool: asyncpg.Pool, schedule_id: str) -> asyncpg.Record:
    [row] = await fetch(
        pool, "SELECT * FROM cronwarden.heartbeats WHERE schedule_id = $1", schedule_id
    )
    return row


async def test_a_live_fire_waits_for_a_worker_with_its_job_and_spends_no_attempt(
    client: Client, pool: asyncpg.Pool, task_queue: str, schedule_id: str
) -> None:
    # One attempt only: the fire that landed on a worker without the job used to fail at once.
    handle = await applied(client, pool, task_queue, yearly_definition(schedule_id, max_attempts=1))
    try:
        async with worker_on(client, pool, task_queue, "noop-digest"):
            workflow_id = await fired(handle)
            await wait_for(
                lambda: waiting_for_a_worker(client, workflow_id),
                timeout=30,
                what="the run waiting in probe's queue",
            )
            # What the monitor and status can say about it: nothing polls probe's queue.
            unpolled = await jobs_without_worker(
                client, task_queue=task_queue, jobs=["probe", "noop-digest", "probe"]
            )
            assert list(unpolled) == ["probe"]
            cause = no_worker_cause("probe", unpolled["probe"]) or ""
            assert cause.startswith("no worker has job 'probe'"), cause

            async with worker_on(client, pool, task_queue, "probe"):
                await wait_for(at_least(pool, schedule_id, 1), timeout=30, what="the commit")
                assert (await job_pollers(client, task_queue=task_queue, job="probe")).polled
                # With both workers up, more fires: every one goes to B at its first attempt.
                for _ in range(3):
                    # Two triggers in one second collide in Temporal: one per second.
                    second = datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=1)
                    await wait_for(
                        functools.partial(clock_past, second), timeout=5, what="the next second"
                    )
                    await handle.trigger()
                rows = await wait_for(
                    at_least(pool, schedule_id, 4), timeout=30, what="four committed fires"
                )
        desc = await handle.describe()
    finally:
        await handle.delete()
    assert [r["attempt"] for r in rows] == [1, 1, 1, 1]
    assert desc.schedule.state.paused is False
    assert (await heartbeat(pool, schedule_id))["last_error"] is None


async def test_a_replay_waits_for_a_worker_with_its_job_and_commits_there(
    client: Client, pool: asyncpg.Pool, task_queue: str, schedule_id: str
) -> None:
    await apply_definitions(
        client, pool, [yearly_definition(schedule_id, max_attempts=1)], task_queue=task_queue
    )
    try:
        schedule = await load_managed(client, schedule_id)
        async with worker_on(client, pool, task_queue, "noop-digest"):
            replay = asyncio.create_task(replay_one(client, schedule, FIRE, lock_wait=0))
            await wait_for(
                lambda: waiting_for_a_worker(client, replay_workflow_id(schedule_id, FIRE)),
                timeout=30,
                what="the replay waiting in probe's queue",
            )
            async with worker_on(client, pool, task_queue, "probe"):
                result = await asyncio.wait_for(replay, timeout=60)
        desc = await client.get_schedule_handle(schedule_id).describe()
    finally:
        await client.get_schedule_handle(schedule_id).delete()
    assert result.outcome == REPLAYED, result
    [row] = await outbox(pool, schedule_id)
    assert (row["logical_key"], row["attempt"]) == (logical_key(schedule_id, FIRE), 1)
    assert desc.schedule.state.paused is False


async def test_a_run_whose_job_no_worker_has_waits_its_timeout_then_fails_naming_the_job(
    client: Client, pool: asyncpg.Pool, task_queue: str, schedule_id: str
) -> None:
    # What became of the orphan pause: the run waits for a worker with the job, for its
    # timeout, without spending an attempt; then it fails saying so, Temporal's
    # pause_on_failure pauses the schedule, and the monitor keeps paging.
    handle = await applied(client, pool, task_queue, yearly_definition(schedule_id, timeout="3s"))
    try:
        async with worker_on(client, pool, task_queue, "noop-digest"):
            workflow_id = await fired(handle)
            with pytest.raises(WorkflowFailureError) as failed:
                await client.get_workflow_handle(workflow_id).result()
            await wait_for(paused(handle), timeout=30, what="pause_on_failure")
            history = await client.get_workflow_handle(workflow_id).fetch_history()
            # `status` names it for what it is: a schedule whose job no worker has.
            report = await status_report(client, pool, now=datetime.now(UTC))
            [row] = [r for r in report.rows if r.schedule_id == schedule_id]
            assert row.orphaned, row
    finally:
        await handle.delete()
    assert isinstance(failed.value.cause, ApplicationError)
    assert failed.value.cause.type == NO_WORKER_WITH_JOB
    assert failed.value.cause.message.startswith("no worker with job 'probe' took")
    started = [e for e in history.events if e.HasField("activity_task_started_event_attributes")]
    # Only the recording of the failure ran; the guarded activity never started.
    assert len(started) == 1
    [beat] = await fetch(
        pool,
        "SELECT paused, last_error FROM cronwarden.heartbeats WHERE schedule_id = $1",
        schedule_id,
    )
    assert beat["paused"] is False
    assert (beat["last_error"] or "").startswith("no worker with job 'probe' took"), beat


async def test_runs_on_every_job_queue_share_the_worker_s_max_concurrent_runs(
    client: Client, pool: asyncpg.Pool, task_queue: str, tmp_path: Path
) -> None:
    gate = tmp_path / "gate"
    marker = tmp_path / "marker"
    worker = build_worker(
        client=client,
        pool=pool,
        registry=registry_of("gated", "marks-start"),
        task_queue=task_queue,
        graceful_shutdown=timedelta(seconds=5),
        max_concurrent_runs=2,
    )
    async with worker:
        gated = [
            await start_run(
                client, task_queue, f"g{i}-{task_queue[-8:]}", job="gated", args={"gate": str(gate)}
            )
            for i in range(2)
        ]
        await wait_for(held_leases(pool, 2), timeout=30, what="both gated runs holding leases")
        other = await start_run(
            client,
            task_queue,
            f"m-{task_queue[-8:]}",
            job="marks-start",
            args={"marker": str(marker)},
        )
        # Both run slots are taken by `gated`: the run of the other job, on its own queue,
        # may reach the worker (its poller was already polling) but its job does not start.
        await wait_for(scheduled(client, other.id), timeout=30, what="the other run scheduled")
        await asyncio.sleep(3)  # a bounded look for something that must not happen
        assert not marker.exists()
        gate.touch()
        outcomes = [await h.result() for h in [*gated, other]]
    assert [o.outcome for o in outcomes] == [RAN, RAN, RAN]
    assert marker.exists()


async def test_a_rolling_release_with_two_job_sets_pauses_nothing_and_loses_nothing(
    client: Client, pool: asyncpg.Pool, task_queue: str
) -> None:
    # Old pods (A) have the old job, new pods (B) the new one; both poll the schedule's queue
    # side by side while a schedule of each job fires every 2 s.
    old_job, new_job = "noop-digest", "probe"
    ids = [f"old-{task_queue[-8:]}", f"new-{task_queue[-8:]}"]
    async with (
        worker_on(client, pool, task_queue, old_job),
        worker_on(client, pool, task_queue, new_job),
    ):
        await apply_definitions(
            client,
            pool,
            [definition(ids[0], job=old_job), definition(ids[1], job=new_job)],
            task_queue=task_queue,
        )
        try:
            created = {
                sid: (await client.get_schedule_handle(sid).describe()).info.created_at
                for sid in ids
            }
            end = max(created.values()) + timedelta(seconds=ROLLOUT_SECONDS)
            await wait_for(
                lambda: clock_past(end + timedelta(seconds=1)),
                timeout=ROLLOUT_SECONDS + 10,
                what="the rollout's end",
                interval=1,
            )
            for sid in ids:
                await wait_for(
                    committed_all(pool, sid, every_two_seconds(created[sid], end)),
                    timeout=30,
                    what=f"every fire of {sid} up to {end} committed",
                )
            states = [(await client.get_schedule_handle(s).describe()).schedule.state for s in ids]
            plans = [
                await plan(
                    client,
                    pool,
                    await load_managed(client, sid),
                    Window(created[sid] - timedelta(seconds=1), end),
                )
                for sid in ids
            ]
        finally:
            for sid in ids:
                await client.get_schedule_handle(sid).delete()

    assert [(s.paused, s.note) for s in states] == [(False, None), (False, None)]
    for sid, planned in zip(ids, plans, strict=True):
        expected = len(every_two_seconds(created[sid], end))
        assert (planned.expected, planned.done, list(planned.missing)) == (expected, expected, [])
        # No attempt was spent on the worker without the job.
        assert {r["attempt"] for r in await outbox(pool, sid)} == {1}, sid
    errors = await fetch(
        pool,
        "SELECT schedule_id, last_error FROM cronwarden.heartbeats "
        "WHERE schedule_id = ANY($1::text[]) AND last_error IS NOT NULL",
        ids,
    )
    assert errors == []
    twice = await fetch(
        pool,
        "SELECT logical_key FROM public.test_effects GROUP BY 1 HAVING count(*) > 1",
    )
    assert twice == []


async def applied(
    client: Client, pool: asyncpg.Pool, task_queue: str, defn: ScheduleDefinition
) -> ScheduleHandle:
    await apply_definitions(client, pool, [defn], task_queue=task_queue)
    return client.get_schedule_handle(defn.id)


async def fired(handle: ScheduleHandle) -> str:
    """Trigger the schedule; the workflow id of its run."""
    await handle.trigger()

    async def running() -> str:
        for action in (await handle.describe()).info.running_actions:
            assert isinstance(action, ScheduleActionExecutionStartWorkflow)
            return action.workflow_id
        return ""

    return await wait_for(running, timeout=30, what="the triggered run")


def paused(handle: ScheduleHandle) -> Callable[[], Awaitable[bool]]:
    async def check() -> bool:
        return (await handle.describe()).schedule.state.paused

    return check


def scheduled(client: Client, workflow_id: str) -> Callable[[], Awaitable[bool]]:
    """The run's activity is scheduled (pending), or the run is already over."""

    async def check() -> bool:
        described = await client.get_workflow_handle(workflow_id).describe()
        over = described.status != WorkflowExecutionStatus.RUNNING
        return over or bool(described.raw_description.pending_activities)

    return check


def held_leases(pool: asyncpg.Pool, n: int) -> Callable[[], Awaitable[bool]]:
    async def check() -> bool:
        rows = await fetch(
            pool, "SELECT 1 FROM cronwarden.locks WHERE expires_at > now() AND holder IS NOT NULL"
        )
        return len(rows) >= n

    return check


def at_least(
    pool: asyncpg.Pool, schedule_id: str, n: int
) -> Callable[[], Awaitable[list[asyncpg.Record]]]:
    async def check() -> list[asyncpg.Record]:
        rows = await outbox(pool, schedule_id)
        return rows if len(rows) >= n else []

    return check


def committed_all(
    pool: asyncpg.Pool, schedule_id: str, expected: set[datetime]
) -> Callable[[], Awaitable[bool]]:
    async def check() -> bool:
        return expected <= {r["fire_time"] for r in await outbox(pool, schedule_id)}

    return check


async def test_a_task_taken_beyond_the_budget_goes_back_without_spending_an_attempt(
    client: Client, pool: asyncpg.Pool, task_queue: str, tmp_path: Path
) -> None:
    # One run slot, held by a gated run. The probe queue's poller was already polling when the
    # slot filled, so it takes the probe's task beyond the budget. That task must not sit out
    # its attempt's start-to-close waiting for the slot (Temporal would time the attempt out
    # and spend it): it goes back, waits in the queue, and runs once the slot is free.
    gate = tmp_path / "gate"
    worker = build_worker(
        client=client,
        pool=pool,
        registry=registry_of("gated", "probe"),
        task_queue=task_queue,
        graceful_shutdown=timedelta(seconds=5),
        max_concurrent_runs=1,
    )
    async with worker:
        held = await start_run(
            client, task_queue, f"g-{task_queue[-8:]}", job="gated", args={"gate": str(gate)}
        )
        await wait_for(held_leases(pool, 1), timeout=30, what="the gated run holding its lease")
        extra = await start_run(
            client, task_queue, f"p-{task_queue[-8:]}", job="probe", timeout=4, max_attempts=1
        )

        async def went_back_or_ended() -> bool:
            events = (await client.get_workflow_handle(extra.id).fetch_history()).events
            return any(
                e.activity_task_failed_event_attributes.failure.application_failure_info.type
                == HANDED_BACK
                for e in events
                if e.HasField("activity_task_failed_event_attributes")
            ) or any(e.HasField("workflow_execution_failed_event_attributes") for e in events)

        await wait_for(went_back_or_ended, timeout=60, what="the probe's task handed back")
        gate.touch()
        outcomes = [await held.result(), await extra.result()]
    assert [o.outcome for o in outcomes] == [RAN, RAN]
    events = (await client.get_workflow_handle(extra.id).fetch_history()).events
    assert not [e for e in events if e.HasField("activity_task_timed_out_event_attributes")]
