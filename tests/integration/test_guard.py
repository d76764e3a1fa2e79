"""The guard under duplicates, takeovers and failures: runs started directly (as replays are),
bypassing the schedule, so each test controls exactly which executions of a key exist."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import asyncpg
import pytest
from temporalio.client import Client, WorkflowFailureError, WorkflowHandle
from temporalio.exceptions import ActivityError
from temporalio.worker import Worker

from cronwarden.activities.contract import (
    ALREADY_DONE,
    OVERLAP_LOCKED,
    RAN,
    logical_key,
)
from cronwarden.activities.guard import GuardedRun
from cronwarden.activities.jobs import REGISTRY, JobRegistry
from cronwarden.schedules.apply import apply_definitions
from cronwarden.schedules.status import build_rows
from cronwarden.store import heartbeats, locks
from cronwarden.store.runs import CommitRecord, commit_run
from cronwarden.workflows.scheduled_run import ScheduledRunInput, ScheduledRunWorkflow
from tests.support.database import fetch
from tests.support.runs import (
    FIRE,
    add_heartbeat_row,
    args_digest,
    effects,
    failure_type,
    lease_holder,
    start_run,
)
from tests.support.schedules import yearly_definition
from tests.support.servers import in_process_worker
from tests.support.waiting import wait_for

pytestmark = pytest.mark.integration


async def outbox_rows(pool: asyncpg.Pool, key: str) -> int:
    rows = await fetch(
        pool, "SELECT count(*) AS n FROM cronwarden.outbox WHERE logical_key = $1", key
    )
    return int(rows[0]["n"])


async def take_over(pool: asyncpg.Pool, lock: str) -> int:
    """Expire the current lease and take it as someone else, as a worker whose holder stalled
    past its TTL would see happen; returns the intruder's token."""
    async with pool.acquire() as conn:
        await conn.execute(
            "UPDATE cronwarden.locks SET expires_at = now() - interval '1 second' WHERE name = $1",
            lock,
        )
        intruder = await locks.acquire(
            conn, name=lock, holder="intruder", ttl_seconds=60, logical_key="intruder@x"
        )
    assert intruder.token is not None
    return intruder.token


async def test_twenty_concurrent_executions_of_one_key_apply_once(
    client: Client, pool: asyncpg.Pool, task_queue: str, worker: Worker, schedule_id: str
) -> None:
    handles = await asyncio.gather(
        *(start_run(client, task_queue, schedule_id, args={"sleep": 0.5}) for _ in range(20))
    )
    outcomes = await asyncio.gather(*(h.result() for h in handles))
    kinds = [o.outcome for o in outcomes]
    key = logical_key(schedule_id, FIRE)
    assert kinds.count(RAN) == 1, kinds
    assert set(kinds) <= {RAN, ALREADY_DONE, OVERLAP_LOCKED}
    assert await outbox_rows(pool, key) == 1
    assert await effects(pool, key) == 1


async def test_a_committed_key_reports_already_done_without_running_again(
    client: Client, pool: asyncpg.Pool, task_queue: str, worker: Worker, schedule_id: str
) -> None:
    first = await (await start_run(client, task_queue, schedule_id)).result()
    second = await (await start_run(client, task_queue, schedule_id)).result()
    assert (first.outcome, second.outcome) == (RAN, ALREADY_DONE)
    assert second.args_mismatch is False
    assert await effects(pool, logical_key(schedule_id, FIRE)) == 1


async def test_a_key_done_with_other_args_is_reported_not_rerun(
    client: Client, pool: asyncpg.Pool, task_queue: str, worker: Worker, schedule_id: str
) -> None:
    await (await start_run(client, task_queue, schedule_id, args={"sleep": 0})).result()
    again = await (await start_run(client, task_queue, schedule_id, args={"sleep": 0.1})).result()
    assert again.outcome == ALREADY_DONE
    assert again.args_mismatch is True
    assert await effects(pool, logical_key(schedule_id, FIRE)) == 1


async def test_a_holder_whose_lease_was_taken_over_cannot_commit(
    client: Client,
    pool: asyncpg.Pool,
    task_queue: str,
    worker: Worker,
    schedule_id: str,
    tmp_path: Path,
) -> None:
    # The job waits at a gate until the lease has been taken: the takeover always lands while
    # the holder runs. TTL 120 s: no renewal (every 40 s) happens before the gate opens, so it
    # is the commit's fencing check (not the renewal) that must refuse the stale holder.
    gate = tmp_path / "gate"
    handle = await start_run(
        client,
        task_queue,
        schedule_id,
        job="gated",
        args={"gate": str(gate)},
        lock_ttl=120,
        max_attempts=1,
    )
    lock = f"schedule:{schedule_id}"
    held = await lease_holder(pool, lock)
    intruder = await take_over(pool, lock)
    assert intruder > held["token"]
    gate.touch()

    with pytest.raises(WorkflowFailureError) as failed:
        await handle.result()
    assert failure_type(failed.value) == "LeaseLost"
    key = logical_key(schedule_id, FIRE)
    assert await outbox_rows(pool, key) == 0
    assert await effects(pool, key) == 0
    # The intruder's lease is untouched by the stale holder's attempt to release.
    rows = await fetch(pool, "SELECT holder, token FROM cronwarden.locks WHERE name = $1", lock)
    assert (rows[0]["holder"], rows[0]["token"]) == ("intruder", intruder)


async def test_the_renewal_notices_a_lost_lease_and_stops_the_job(
    client: Client,
    pool: asyncpg.Pool,
    task_queue: str,
    worker: Worker,
    schedule_id: str,
    tmp_path: Path,
) -> None:
    # The gate never opens: only the renewal (every 2 s) noticing the takeover ends the job.
    # Were it blind or slow, the job would give up waiting after 12 s and fail as JobFailed.
    handle = await start_run(
        client,
        task_queue,
        schedule_id,
        job="gated",
        args={"gate": str(tmp_path / "never-opened"), "wait_seconds": 12},
        lock_ttl=6,
        max_attempts=1,
    )
    lock = f"schedule:{schedule_id}"
    await lease_holder(pool, lock)
    await take_over(pool, lock)
    with pytest.raises(WorkflowFailureError) as failed:
        await handle.result()
    assert failure_type(failed.value) == "LeaseLost"
    assert await effects(pool, logical_key(schedule_id, FIRE)) == 0


async def test_a_job_longer_than_its_lease_keeps_it_by_renewing(
    client: Client, pool: asyncpg.Pool, task_queue: str, worker: Worker, schedule_id: str
) -> None:
    outcome = await (
        await start_run(client, task_queue, schedule_id, args={"sleep": 8}, lock_ttl=5)
    ).result()
    assert outcome.outcome == RAN
    assert outcome.attempt == 1
    assert await effects(pool, logical_key(schedule_id, FIRE)) == 1


async def test_a_failing_job_is_retried_and_applies_once(
    client: Client, pool: asyncpg.Pool, task_queue: str, worker: Worker, schedule_id: str
) -> None:
    outcome = await (
        await start_run(client, task_queue, schedule_id, args={"fail_attempts": 1})
    ).result()
    assert (outcome.outcome, outcome.attempt) == (RAN, 2)
    assert await effects(pool, logical_key(schedule_id, FIRE)) == 1


async def test_a_job_failing_every_attempt_fails_the_run_and_records_the_error(
    client: Client, pool: asyncpg.Pool, task_queue: str, worker: Worker, schedule_id: str
) -> None:
    async with pool.acquire() as conn:
        await add_heartbeat_row(conn, schedule_id)
    handle = await start_run(
        client, task_queue, schedule_id, args={"fail_attempts": 5}, max_attempts=2
    )
    with pytest.raises(WorkflowFailureError) as failed:
        await handle.result()
    assert failure_type(failed.value) == "JobFailed"
    beat = await fetch(
        pool, "SELECT last_error FROM cronwarden.heartbeats WHERE schedule_id = $1", schedule_id
    )
    assert "probe failing on purpose (attempt 2)" in beat[0]["last_error"]
    assert await outbox_rows(pool, logical_key(schedule_id, FIRE)) == 0


async def attempts_started(handle: WorkflowHandle[Any, Any]) -> list[int]:
    history = await handle.fetch_history()
    return [
        e.activity_task_started_event_attributes.attempt
        for e in history.events
        if e.HasField("activity_task_started_event_attributes")
    ]


async def test_bad_args_fail_without_retrying(
    client: Client, task_queue: str, worker: Worker, schedule_id: str
) -> None:
    handle = await start_run(
        client, task_queue, schedule_id, args={"sleep": "long"}, max_attempts=5
    )
    with pytest.raises(WorkflowFailureError) as failed:
        await handle.result()
    assert failure_type(failed.value) == "InvalidArgs"
    assert isinstance(failed.value.cause, ActivityError)
    assert await attempts_started(handle) == [1], "a final error must not be retried"


async def test_an_unknown_job_is_retried_and_fails_for_good_on_the_last_attempt(
    client: Client, pool: asyncpg.Pool, task_queue: str, schedule_id: str
) -> None:
    # A run started before per-job task queues: retries may land on another worker that has
    # the job (a rolling deploy); when none has it, the last attempt fails non-retryably.
    async with in_process_worker(client, pool, task_queue, before_job_queues=True):
        handle = await start_run(client, task_queue, schedule_id, job="no-such-job", max_attempts=2)
        with pytest.raises(WorkflowFailureError) as failed:
            await handle.result()
    assert failure_type(failed.value) == "UnknownJob"
    # Temporal records only the last attempt's start event: the run failed on attempt 2.
    assert await attempts_started(handle) == [2]


async def test_a_replay_of_a_done_key_on_a_worker_without_the_job_is_already_done(
    client: Client, pool: asyncpg.Pool, task_queue: str, worker: Worker, schedule_id: str
) -> None:
    first = await start_run(client, task_queue, schedule_id)
    assert (await first.result()).outcome == RAN
    registry = JobRegistry()
    registry.register(REGISTRY.get("noop-digest"))
    other_queue = f"{task_queue}-old"
    async with in_process_worker(client, pool, other_queue, registry, before_job_queues=True):
        again = await start_run(client, other_queue, schedule_id, max_attempts=1)
        assert (await again.result()).outcome == ALREADY_DONE
    beat = await fetch(
        pool, "SELECT last_error FROM cronwarden.heartbeats WHERE schedule_id = $1", schedule_id
    )
    assert not beat or beat[0]["last_error"] is None


async def test_buffer_one_waits_for_the_lease_instead_of_dropping_the_fire(
    client: Client, pool: asyncpg.Pool, task_queue: str, worker: Worker, schedule_id: str
) -> None:
    lock = f"schedule:{schedule_id}"
    async with pool.acquire() as conn:
        held = await locks.acquire(
            conn, name=lock, holder="other", ttl_seconds=60, logical_key="o@x"
        )
    assert held.token is not None
    handle = await start_run(client, task_queue, schedule_id, overlap="buffer_one")
    async with pool.acquire() as conn:
        await wait_for(
            lambda: _queued(pool, lock), timeout=10, what="the run to wait for the lease"
        )
        await locks.release(conn, name=lock, token=held.token)
    outcome = await handle.result()
    assert outcome.outcome == RAN
    assert await effects(pool, logical_key(schedule_id, FIRE)) == 1


async def _queued(pool: asyncpg.Pool, lock: str) -> bool:
    rows = await fetch(pool, "SELECT 1 FROM cronwarden.lock_waiters WHERE name = $1", lock)
    return bool(rows)


async def test_a_job_that_swallows_its_transaction_error_is_not_marked_done(
    client: Client, pool: asyncpg.Pool, task_queue: str, worker: Worker, schedule_id: str
) -> None:
    handle = await start_run(
        client, task_queue, schedule_id, job="swallow-tx-error", max_attempts=1
    )
    with pytest.raises(WorkflowFailureError) as failed:
        await handle.result()
    assert failure_type(failed.value) == "JobFailed"
    key = logical_key(schedule_id, FIRE)
    assert await outbox_rows(pool, key) == 0
    assert await effects(pool, key) == 0


async def test_a_result_json_cannot_carry_fails_without_retrying(
    client: Client, pool: asyncpg.Pool, task_queue: str, worker: Worker, schedule_id: str
) -> None:
    handle = await start_run(client, task_queue, schedule_id, job="nan-result", max_attempts=3)
    with pytest.raises(WorkflowFailureError) as failed:
        await handle.result()
    assert failure_type(failed.value) == "InvalidResult"
    assert await outbox_rows(pool, logical_key(schedule_id, FIRE)) == 0


async def test_buffer_one_fails_loudly_when_the_lease_stays_held_past_its_timeout(
    client: Client, pool: asyncpg.Pool, task_queue: str, worker: Worker, schedule_id: str
) -> None:
    async with pool.acquire() as conn:
        await add_heartbeat_row(conn, schedule_id)
        await locks.acquire(
            conn, name=f"schedule:{schedule_id}", holder="other", ttl_seconds=120, logical_key="o@x"
        )
    handle = await start_run(client, task_queue, schedule_id, overlap="buffer_one", timeout=4)
    with pytest.raises(WorkflowFailureError) as failed:
        await handle.result()
    assert failure_type(failed.value) == "OverlapTimeout"
    assert await effects(pool, logical_key(schedule_id, FIRE)) == 0
    # Counted once, as the failure it is: a buffer_one fire is not skipped at the lease, it
    # waits, and a wait that runs out fails the run (backfill lists the key).
    rows = await fetch(
        pool, "SELECT lease_skips FROM cronwarden.heartbeats WHERE schedule_id = $1", schedule_id
    )
    assert rows[0]["lease_skips"] == 0


async def test_a_lease_skip_that_could_not_be_recorded_is_retried_and_then_recorded(
    client: Client,
    pool: asyncpg.Pool,
    task_queue: str,
    worker: Worker,
    schedule_id: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async with pool.acquire() as conn:
        await add_heartbeat_row(conn, schedule_id)
        await locks.acquire(
            conn, name=f"schedule:{schedule_id}", holder="other", ttl_seconds=120, logical_key="o@x"
        )
    record = heartbeats.record_lease_skip
    calls = 0

    async def fails_once(conn: Any, **fields: Any) -> None:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise OSError("connection reset by peer")
        await record(conn, **fields)

    monkeypatch.setattr(heartbeats, "record_lease_skip", fails_once)
    outcome = await (await start_run(client, task_queue, schedule_id)).result()
    # Not "skipped" with nothing recorded: the first attempt failed, the retry recorded it.
    assert (outcome.outcome, outcome.attempt) == (OVERLAP_LOCKED, 2)
    beat = await fetch(
        pool,
        "SELECT lease_skips, last_lease_skip_holder FROM cronwarden.heartbeats"
        " WHERE schedule_id = $1",
        schedule_id,
    )
    assert (beat[0]["lease_skips"], beat[0]["last_lease_skip_holder"]) == (1, "o@x")


async def test_a_replay_with_a_fire_time_without_zone_fails_at_once(
    client: Client, task_queue: str, worker: Worker, schedule_id: str
) -> None:
    inp = ScheduledRunInput(schedule_id=schedule_id, job="probe", fire_time="2026-01-05T09:30:00")
    handle = await client.start_workflow(
        ScheduledRunWorkflow.run, inp, id=f"{schedule_id}~replay-naive", task_queue=task_queue
    )
    with pytest.raises(WorkflowFailureError) as failed:
        await asyncio.wait_for(handle.result(), timeout=20)
    assert failure_type(failed.value) == "NoFireTime"


async def test_a_commit_on_a_dropped_connection_is_retried_and_applies_once(
    client: Client,
    pool: asyncpg.Pool,
    task_queue: str,
    worker: Worker,
    schedule_id: str,
    database: str,
) -> None:
    handle = await start_run(
        client,
        task_queue,
        schedule_id,
        job="drop-connection-before-commit",
        args={"dsn": database},
    )
    outcome = await handle.result()
    assert (outcome.outcome, outcome.attempt) == (RAN, 2)
    key = logical_key(schedule_id, FIRE)
    rows = await fetch(pool, "SELECT attempt FROM cronwarden.outbox WHERE logical_key = $1", key)
    assert [r["attempt"] for r in rows] == [2]
    assert await effects(pool, key) == 1
    history = await handle.fetch_history()
    # Retries are not history events; the started event of the last attempt carries the
    # failure of the one before.
    started = [
        e.activity_task_started_event_attributes
        for e in history.events
        if e.HasField("activity_task_started_event_attributes")
    ]
    assert started[-1].last_failure.application_failure_info.type == "CommitFailed"


async def test_a_release_after_its_own_commit_is_not_taken_for_a_lost_lease(
    pool: asyncpg.Pool, schedule_id: str
) -> None:
    # A cancellation that arrives after COMMIT landed still releases: by then a later fire of
    # the schedule may hold the lock the commit freed, and the release finds its token.
    lock, key = f"schedule:{schedule_id}", logical_key(schedule_id, FIRE)
    async with pool.acquire() as conn:
        got = await locks.acquire(conn, name=lock, holder="run", ttl_seconds=60, logical_key=key)
        assert got.token is not None
        record = CommitRecord(
            lock_name=lock,
            token=got.token,
            logical_key=key,
            schedule_id=schedule_id,
            fire_time=FIRE,
            result=None,
            attempt=1,
            worker="w",
            args_digest=args_digest({}),
            workflow_id=None,
            run_id=None,
            grace=timedelta(seconds=60),
            write_heartbeat=False,
        )
        assert (await commit_run(conn, record)).recorded
        later = await locks.acquire(
            conn, name=lock, holder="later", ttl_seconds=60, logical_key=f"{schedule_id}@later"
        )
        assert later.token is not None
    guard = GuardedRun(pool=pool, registry=REGISTRY, client=None, worker_identity="w")
    assert await guard._release(record, None) is False
    assert not await guard._lost_at_release(record, "commit")
    # Before the commit phase, or with no commit of its own, the lease was taken.
    assert await guard._lost_at_release(record, "job")
    assert await guard._lost_at_release(replace(record, logical_key=f"{key}-other"), "commit")


# -- a replay never touches the live picture: its failures are its own


async def test_a_failing_replay_records_its_error_apart_from_the_live_schedules(
    client: Client, pool: asyncpg.Pool, task_queue: str, worker: Worker, schedule_id: str
) -> None:
    async with pool.acquire() as conn:
        await add_heartbeat_row(conn, schedule_id)
        before = await heartbeats.get(conn, schedule_id)
    assert before is not None
    key = logical_key(schedule_id, FIRE)
    handle = await start_run(
        client, task_queue, schedule_id, args={"fail_attempts": 5}, max_attempts=2, replay=True
    )
    with pytest.raises(WorkflowFailureError) as failed:
        await handle.result()
    assert failure_type(failed.value) == "JobFailed"
    async with pool.acquire() as conn:
        beat = await heartbeats.get(conn, schedule_id)
    assert beat is not None
    # Not the live schedule's error: `status`, the status page and overdue pages show that one.
    assert beat["last_error"] is None
    assert "probe failing on purpose (attempt 2)" in (beat["last_replay_error"] or "")
    assert beat["last_replay_error_key"] == key
    assert beat["last_replay_error_at"] is not None
    # Nor a change the monitor's stale-pause check would have to wait out.
    assert beat["updated_at"] == before["updated_at"]
    [row] = build_rows([], {schedule_id: beat}, now=datetime.now(UTC))
    assert row.as_json()["last_error"] is None
    assert row.as_json()["last_replay_error"]["logical_key"] == key

    # A replay of another key committing leaves the failure: that key is still not done.
    other = await start_run(
        client, task_queue, schedule_id, fire=FIRE + timedelta(hours=1), replay=True
    )
    assert (await other.result()).outcome == RAN
    async with pool.acquire() as conn:
        beat = await heartbeats.get(conn, schedule_id)
    assert beat is not None and beat["last_replay_error_key"] == key
    # The failed key committing clears it.
    again = await start_run(client, task_queue, schedule_id, replay=True)
    assert (await again.result()).outcome == RAN
    async with pool.acquire() as conn:
        beat = await heartbeats.get(conn, schedule_id)
    assert beat is not None
    assert (beat["last_replay_error"], beat["last_replay_error_key"]) == (None, None)
    assert beat["last_replay_error_at"] is None


async def test_a_replay_on_a_worker_without_the_job_fails_and_leaves_the_schedule_running(
    client: Client, pool: asyncpg.Pool, task_queue: str, schedule_id: str
) -> None:
    # The orphan path (runs started before per-job task queues) pauses a schedule whose live
    # fire lands on a worker without its job. A replay is no live fire (it may be started
    # against another deployment): it fails, with its error recorded as the replay's, and the
    # live schedule keeps running.
    await apply_definitions(client, pool, [yearly_definition(schedule_id)], task_queue=task_queue)
    schedule = client.get_schedule_handle(schedule_id)
    registry = JobRegistry()
    registry.register(REGISTRY.get("noop-digest"))
    other_queue = f"{task_queue}-old"
    try:
        async with in_process_worker(client, pool, other_queue, registry, before_job_queues=True):
            replay = await start_run(client, other_queue, schedule_id, max_attempts=1, replay=True)
            with pytest.raises(WorkflowFailureError) as failed:
                await replay.result()
        desc = await schedule.describe()
    finally:
        await schedule.delete()
    assert failure_type(failed.value) == "UnknownJob"
    assert desc.schedule.state.paused is False
    async with pool.acquire() as conn:
        beat = await heartbeats.get(conn, schedule_id)
    assert beat is not None
    assert beat["paused"] is False
    assert beat["last_error"] is None
    assert (beat["last_replay_error"] or "").startswith("unknown job 'probe'")
    assert beat["last_replay_error_key"] == logical_key(schedule_id, FIRE)
