"""The run's commit where features meet: the cached next fire times, replays, a job that ends
its transaction itself, and the outbox conflict that must roll the job's writes back."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import asyncpg
import pytest
from temporalio.client import Client, WorkflowFailureError, WorkflowHandle
from temporalio.exceptions import ApplicationError

from cronwarden.activities.contract import (
    ALREADY_DONE,
    JOB_TIMED_OUT,
    RAN,
    TRANSACTION_ENDED,
    RunOutcome,
    logical_key,
)
from cronwarden.monitor.pauses import PauseCheck
from cronwarden.schedules.apply import apply_definitions
from cronwarden.schedules.describe import describe_json
from cronwarden.schedules.inventory import get_view
from cronwarden.schedules.mapping import definition_digest
from cronwarden.schedules.model import ScheduleDefinition
from cronwarden.schedules.status import build_rows
from cronwarden.store import heartbeats
from tests.support.database import fetch
from tests.support.runs import (
    WatchedDescribes,
    args_digest,
    count,
    heartbeat,
    lock_holder,
    start_guarded,
)
from tests.support.servers import in_process_worker
from tests.support.waiting import wait_for

pytestmark = pytest.mark.integration

PAST_FIRE = datetime(2026, 1, 5, 9, 30, tzinfo=UTC)


def definition(schedule_id: str, every: str) -> ScheduleDefinition:
    return ScheduleDefinition.model_validate(
        {
            "id": schedule_id,
            "job": "probe",
            "every": every,
            "catchup_window": "1m",
            "heartbeat_grace": "1m",
            "lock_ttl": "10s",
            "timeout": "30s",
        }
    )


def watched_client(client: Client, watched: WatchedDescribes) -> Client:
    return Client(client.service_client, namespace=client.namespace, interceptors=[watched])


async def start_job(
    client: Client, task_queue: str, schedule_id: str, job: str, args: dict[str, Any]
) -> WorkflowHandle[Any, RunOutcome]:
    """A live (not replay) run of PAST_FIRE's key with this job."""
    return await start_guarded(client, task_queue, schedule_id, PAST_FIRE, job=job, args=args)


async def committed_live(pool: asyncpg.Pool, schedule_id: str) -> int:
    rows = await fetch(
        pool, "SELECT count(*) AS n FROM cronwarden.outbox WHERE schedule_id = $1", schedule_id
    )
    return int(rows[0]["n"])


# -- 5. the next expected fire: cached, refreshed outside any transaction, never from a failure


async def test_a_schedule_firing_every_second_describes_once_per_ten_runs_outside_transactions(
    client: Client, pool: asyncpg.Pool, task_queue: str, schedule_id: str
) -> None:
    watched = WatchedDescribes(pool)
    async with in_process_worker(watched_client(client, watched), pool, task_queue):
        await apply_definitions(
            client, pool, [definition(schedule_id, "1s")], task_queue=task_queue
        )
        try:

            async def enough() -> bool:
                return await committed_live(pool, schedule_id) >= 21

            await wait_for(enough, timeout=120, what="21 committed live fires")
            await client.get_schedule_handle(schedule_id).pause()
        finally:
            await client.get_schedule_handle(schedule_id).delete()
    runs = await committed_live(pool, schedule_id)
    # One cold look-up, then one per batch of Temporal's next action times (10 per describe).
    assert watched.calls - 1 <= runs / 10, (watched.calls, runs)
    # The probe job writes through ctx.transaction(): no look-up waited inside it.
    assert watched.open_transactions and set(watched.open_transactions) == {0}


async def test_a_failed_look_up_takes_the_next_fire_from_still_valid_cached_times(
    client: Client, pool: asyncpg.Pool, task_queue: str, schedule_id: str
) -> None:
    defn = definition(schedule_id, "1h")
    await apply_definitions(client, pool, [defn], task_queue=task_queue)
    digest = definition_digest(defn, task_queue=task_queue)
    # Apply stamps the row with the definition digest the commit compares cached times against.
    assert (await heartbeat(pool, schedule_id))["definition_digest"] == digest
    next_fire = (await client.get_schedule_handle(schedule_id).describe()).info.next_action_times[0]
    watched = WatchedDescribes(pool)
    try:
        async with in_process_worker(watched_client(client, watched), pool, task_queue):
            first = await start_guarded(
                client, task_queue, schedule_id, PAST_FIRE, definition_digest=digest
            )
            assert (await first.result()).outcome == RAN
            assert watched.calls == 1
            # What a commit without any time leaves: this fire's own time, paging at + grace.
            async with pool.acquire() as conn:
                await conn.execute(
                    "UPDATE cronwarden.heartbeats SET next_expected_at = $2 WHERE schedule_id = $1",
                    schedule_id,
                    PAST_FIRE,
                )
            watched.failing = True
            # A run of another definition makes the worker look again: the look-up fails.
            second = await start_guarded(
                client,
                task_queue,
                schedule_id,
                PAST_FIRE + timedelta(hours=1),
                definition_digest="another-definition",
            )
            assert (await second.result()).outcome == RAN
            assert watched.calls == 2
    finally:
        await client.get_schedule_handle(schedule_id).delete()
    beat = await heartbeat(pool, schedule_id)
    # Not the row's stale time, not nothing: the first cached fire after Postgres' now().
    assert beat["next_expected_at"] == next_fire


async def test_cached_times_of_another_definition_never_set_the_deadline(
    client: Client, pool: asyncpg.Pool, task_queue: str, schedule_id: str
) -> None:
    await apply_definitions(client, pool, [definition(schedule_id, "1h")], task_queue=task_queue)
    # An apply changed the definition after this worker described the schedule: the row holds
    # the new digest and the deadline apply computed for it.
    kept = datetime.now(UTC).replace(microsecond=0) + timedelta(minutes=7)
    async with pool.acquire() as conn:
        await conn.execute(
            "UPDATE cronwarden.heartbeats SET definition_digest = 'applied-later',"
            " next_expected_at = $2 WHERE schedule_id = $1",
            schedule_id,
            kept,
        )
    try:
        async with in_process_worker(client, pool, task_queue):
            run = await start_guarded(client, task_queue, schedule_id, PAST_FIRE)
            assert (await run.result()).outcome == RAN
    finally:
        await client.get_schedule_handle(schedule_id).delete()
    beat = await heartbeat(pool, schedule_id)
    assert beat["next_expected_at"] == kept
    assert beat["last_logical_key"] == logical_key(schedule_id, PAST_FIRE)


async def database_now(pool: asyncpg.Pool) -> datetime:
    rows = await fetch(pool, "SELECT statement_timestamp() AS now")
    now: datetime = rows[0]["now"]
    return now


async def set_deadline(pool: asyncpg.Pool, schedule_id: str, at: datetime) -> None:
    async with pool.acquire() as conn:
        await conn.execute(
            "UPDATE cronwarden.heartbeats SET next_expected_at = $2 WHERE schedule_id = $1",
            schedule_id,
            at,
        )


@pytest.mark.parametrize("late", [False, True], ids=["next-fire", "late-fire"])
async def test_cached_times_that_passed_while_other_workers_ran_the_fires_are_looked_up_again(
    late: bool, client: Client, pool: asyncpg.Pool, task_queue: str, schedule_id: str
) -> None:
    # Replicas share a schedule's fires: this worker's cached times can all pass while others
    # commit, and no commit of its own marks them stale. Its next run must look again, or the
    # row keeps the deadline the others' last commit left (this very fire), paging at + grace.
    # The schedule fires on a queue nobody polls; the test starts this worker's runs itself.
    defn = definition(schedule_id, "1s")
    idle_queue = f"{task_queue}-idle"
    await apply_definitions(client, pool, [defn], task_queue=idle_queue)
    digest = definition_digest(defn, task_queue=idle_queue)
    handle = client.get_schedule_handle(schedule_id)
    watched = WatchedDescribes(pool)
    try:
        async with in_process_worker(watched_client(client, watched), pool, task_queue):
            first_fire = (await database_now(pool)).replace(microsecond=0)
            first = await start_guarded(
                client, task_queue, schedule_id, first_fire, definition_digest=digest
            )
            assert (await first.result()).outcome == RAN
            assert watched.calls == 1
            # Described after the worker did: its last time is at or after the worker's last.
            last_cached = (await handle.describe()).info.next_action_times[-1]

            async def all_passed() -> bool:
                return await database_now(pool) > last_cached

            await wait_for(all_passed, timeout=60, what="the worker's cached times to pass")
            now = await database_now(pool)
            fire = first_fire - timedelta(minutes=5) if late else now.replace(microsecond=0)
            # What the other workers' last commit leaves: a deadline at the fire now running.
            await set_deadline(pool, schedule_id, now)
            run = await start_guarded(
                client, task_queue, schedule_id, fire, definition_digest=digest
            )
            assert (await run.result()).outcome == RAN
    finally:
        await handle.delete()
    beat = await heartbeat(pool, schedule_id)
    assert beat["next_expected_at"] > now
    assert watched.calls == 2


async def test_a_cold_cache_retries_a_failed_look_up_once_before_the_commit(
    client: Client, pool: asyncpg.Pool, task_queue: str, schedule_id: str
) -> None:
    # Every worker's cache is cold after a deploy: one failed describe would leave the row at
    # the deadline the last commit set, this fire's own time.
    defn = definition(schedule_id, "1h")
    idle_queue = f"{task_queue}-idle"
    await apply_definitions(client, pool, [defn], task_queue=idle_queue)
    digest = definition_digest(defn, task_queue=idle_queue)
    next_fire = (await client.get_schedule_handle(schedule_id).describe()).info.next_action_times[0]
    await set_deadline(pool, schedule_id, PAST_FIRE)
    watched = WatchedDescribes(pool)
    watched.fail_next = 1
    try:
        async with in_process_worker(watched_client(client, watched), pool, task_queue):
            run = await start_guarded(
                client, task_queue, schedule_id, PAST_FIRE, definition_digest=digest
            )
            assert (await run.result()).outcome == RAN
    finally:
        await client.get_schedule_handle(schedule_id).delete()
    assert (await heartbeat(pool, schedule_id))["next_expected_at"] == next_fire
    assert watched.calls == 2


async def test_a_job_whose_transaction_stays_open_gets_a_next_fire_after_its_commit(
    client: Client, pool: asyncpg.Pool, task_queue: str, schedule_id: str, tmp_path: Path
) -> None:
    # Inside the job's transaction now() is the time of its BEGIN: a fire picked by it can have
    # passed by the COMMIT (and a skip schedule's next fire was dropped meanwhile): a page at
    # that fire + grace for a run that succeeded.
    defn = definition(schedule_id, "1s")
    idle_queue = f"{task_queue}-idle"
    await apply_definitions(client, pool, [defn], task_queue=idle_queue)
    digest = definition_digest(defn, task_queue=idle_queue)
    gate = tmp_path / f"gate-{uuid.uuid4().hex}"
    try:
        async with in_process_worker(client, pool, task_queue):
            run = await start_guarded(
                client,
                task_queue,
                schedule_id,
                (await database_now(pool)).replace(microsecond=0),
                job="gated",
                args={"gate": str(gate), "in_transaction": True},
                definition_digest=digest,
            )

            async def transaction_open() -> datetime | None:
                rows = await fetch(
                    pool,
                    "SELECT xact_start FROM pg_stat_activity WHERE datname = current_database()"
                    " AND state LIKE 'idle in transaction%'",
                )
                return rows[0]["xact_start"] if rows else None

            began = await wait_for(transaction_open, timeout=30, what="the job's transaction")
            assert began is not None
            three_fires_later = began + timedelta(seconds=3)

            async def fires_passed() -> bool:
                return await database_now(pool) > three_fires_later

            await wait_for(fires_passed, timeout=30, what="fires passing while the job runs")
            released_at = await database_now(pool)
            gate.touch()
            assert (await run.result()).outcome == RAN
    finally:
        await client.get_schedule_handle(schedule_id).delete()
    assert (await heartbeat(pool, schedule_id))["next_expected_at"] > released_at


# -- 3. a replay's commit never moves the live heartbeat


async def test_a_replays_commit_records_the_replay_and_leaves_the_live_heartbeat_alone(
    client: Client, pool: asyncpg.Pool, task_queue: str, schedule_id: str
) -> None:
    await apply_definitions(client, pool, [definition(schedule_id, "1h")], task_queue=task_queue)
    async with pool.acquire() as conn:
        await conn.execute(
            "UPDATE cronwarden.heartbeats SET last_error = 'the live fire failed'"
            " WHERE schedule_id = $1",
            schedule_id,
        )
    before = await heartbeat(pool, schedule_id)
    watched = WatchedDescribes(pool)
    try:
        async with in_process_worker(watched_client(client, watched), pool, task_queue):
            replay = await start_guarded(client, task_queue, schedule_id, PAST_FIRE, replay=True)
            assert (await replay.result()).outcome == RAN
        view = await get_view(client, schedule_id)
        described = await describe_json(client, pool, view)
    finally:
        await client.get_schedule_handle(schedule_id).delete()
    after = await heartbeat(pool, schedule_id)
    key = logical_key(schedule_id, PAST_FIRE)
    assert await count(pool, "cronwarden.outbox", key) == 1
    assert (after["last_replay_key"], after["last_replay_at"] is not None) == (key, True)
    live = ("last_success_at", "next_expected_at", "last_error", "last_logical_key", "grace")
    assert {f: after[f] for f in live} == {f: before[f] for f in live}
    assert after["last_error"] == "the live fire failed"
    # A replay needs no next fire: it asks Temporal nothing.
    assert watched.calls == 0
    # `schedules describe` and `status` show it apart from the live fields.
    assert described["heartbeat"]["last_replay_key"] == key
    [row] = build_rows([view], {schedule_id: dict(after)}, now=datetime.now(UTC))
    assert row.as_json()["last_replay"]["logical_key"] == key


async def test_a_replays_commit_leaves_updated_at_so_the_monitor_still_lifts_a_stale_pause(
    client: Client, pool: asyncpg.Pool, task_queue: str, schedule_id: str
) -> None:
    # `updated_at` is what the monitor's stale-pause check compares: a pause recorded on the
    # row that Temporal no longer holds is lifted only if the row is unchanged since the pass
    # read it, so a `schedules pause` landing meanwhile stands. A replay committing in between
    # changes no pause: it must not make the pass give up the lift.
    await apply_definitions(client, pool, [definition(schedule_id, "1h")], task_queue=task_queue)
    async with pool.acquire() as conn:
        # Recorded as paused, but running in Temporal (unpaused in its UI).
        await heartbeats.pause(conn, schedule_id=schedule_id, reason="disk swap")
        seen = await heartbeats.paused_rows(conn)
    pauses = PauseCheck(lambda: _connected(client))
    try:
        [lift] = await pauses.lifts(seen)
        async with in_process_worker(client, pool, task_queue):
            replay = await start_guarded(client, task_queue, schedule_id, PAST_FIRE, replay=True)
            assert (await replay.result()).outcome == RAN
    finally:
        await client.get_schedule_handle(schedule_id).delete()
    after = await heartbeat(pool, schedule_id)
    assert after["last_replay_key"] == logical_key(schedule_id, PAST_FIRE)
    assert after["updated_at"] == lift.seen_updated_at
    async with pool.acquire() as conn:
        assert await heartbeats.lift_stale_pause(
            conn,
            schedule_id=schedule_id,
            seen_updated_at=lift.seen_updated_at,
            next_expected_at=lift.next_expected_at,
        )
    assert (await heartbeat(pool, schedule_id))["paused"] is False


async def _connected(client: Client) -> Client:
    return client


async def job_transaction_began(pool: asyncpg.Pool) -> datetime | None:
    """When the one open, idle transaction of the test database began (the job's), if any."""
    rows = await fetch(
        pool,
        "SELECT xact_start FROM pg_stat_activity WHERE datname = current_database()"
        " AND state LIKE 'idle in transaction%'",
    )
    began: datetime | None = rows[0]["xact_start"] if rows else None
    return began


async def test_a_long_jobs_commit_records_the_time_of_its_commit_not_of_its_begin(
    client: Client, pool: asyncpg.Pool, task_queue: str, schedule_id: str, tmp_path: Path
) -> None:
    # Inside the job's transaction now() is the time of its BEGIN: a job holding it an hour
    # would show its last success, its outbox record and its lease's release an hour early.
    defn = definition(schedule_id, "1h")
    idle_queue = f"{task_queue}-idle"
    await apply_definitions(client, pool, [defn], task_queue=idle_queue)
    gate = tmp_path / f"gate-{uuid.uuid4().hex}"
    try:
        async with in_process_worker(client, pool, task_queue):
            run = await start_guarded(
                client,
                task_queue,
                schedule_id,
                PAST_FIRE,
                job="gated",
                args={"gate": str(gate), "in_transaction": True},
                definition_digest=definition_digest(defn, task_queue=idle_queue),
            )
            began = await wait_for(
                lambda: job_transaction_began(pool), timeout=30, what="the job's transaction"
            )
            assert began is not None

            async def past_begin() -> bool:
                return await database_now(pool) > began

            await wait_for(past_begin, timeout=30, what="the database clock past the BEGIN")
            released_at = await database_now(pool)
            gate.touch()
            assert (await run.result()).outcome == RAN
    finally:
        await client.get_schedule_handle(schedule_id).delete()
    key = logical_key(schedule_id, PAST_FIRE)
    [record] = await fetch(
        pool, "SELECT committed_at FROM cronwarden.outbox WHERE logical_key = $1", key
    )
    [lease] = await fetch(
        pool,
        "SELECT holder, expires_at FROM cronwarden.locks WHERE name = $1",
        f"schedule:{schedule_id}",
    )
    beat = await heartbeat(pool, schedule_id)
    assert beat["last_logical_key"] == key
    assert beat["last_success_at"] >= released_at
    assert record["committed_at"] >= released_at
    assert lease["holder"] is None and lease["expires_at"] >= released_at


# -- the job's timeout, counted from the moment the lease is taken


async def test_a_job_hanging_past_its_timeout_fails_as_timed_out_with_its_lease_released(
    client: Client, pool: asyncpg.Pool, task_queue: str, schedule_id: str, tmp_path: Path
) -> None:
    # The activity's start-to-close covers the wait for the lease plus the job's timeout: only
    # the guard can hold the job itself to its timeout.
    gate = tmp_path / f"never-{uuid.uuid4().hex}"
    async with in_process_worker(client, pool, task_queue):
        run = await start_guarded(
            client,
            task_queue,
            schedule_id,
            PAST_FIRE,
            job="gated",
            args={"gate": str(gate), "wait_seconds": 600, "in_transaction": True},
            max_attempts=1,
            timeout_seconds=3,
        )
        with pytest.raises(WorkflowFailureError) as failed:
            await run.result()
        # Released by the guard itself, not left to expire.
        assert await lock_holder(pool, f"schedule:{schedule_id}") is None
    cause: BaseException | None = failed.value
    while cause is not None and not isinstance(cause, ApplicationError):
        cause = cause.__cause__
    assert isinstance(cause, ApplicationError) and cause.type == JOB_TIMED_OUT, failed.value
    assert "job 'gated' ran past its timeout (3s)" in cause.message
    key = logical_key(schedule_id, PAST_FIRE)
    # Its write inside the transaction was rolled back with it.
    assert await count(pool, "test_effects", key) == 0
    assert await count(pool, "cronwarden.outbox", key) == 0


# -- 7. a job that ends the run's transaction itself


@pytest.mark.parametrize(
    "statement",
    [
        "COMMIT",
        "INSERT INTO public.test_effects (logical_key, attempt, started_at)"
        " VALUES ('script', 1, now()); COMMIT",
        "ROLLBACK",
        "COMMIT; BEGIN",
    ],
    ids=["commit", "script", "rollback", "commit-and-begin"],
)
async def test_a_job_that_ends_its_transaction_fails_unrecorded_with_its_lease_released(
    statement: str, client: Client, pool: asyncpg.Pool, task_queue: str, schedule_id: str
) -> None:
    async with in_process_worker(client, pool, task_queue):
        run = await start_job(
            client, task_queue, schedule_id, "ends-transaction", {"statement": statement}
        )
        with pytest.raises(WorkflowFailureError) as failed:
            await run.result()
    cause: BaseException | None = failed.value
    while cause is not None and not isinstance(cause, ApplicationError):
        cause = cause.__cause__
    assert isinstance(cause, ApplicationError) and cause.type == TRANSACTION_ENDED
    assert "job 'ends-transaction' ended the run's transaction itself" in cause.message
    key = logical_key(schedule_id, PAST_FIRE)
    assert await count(pool, "cronwarden.outbox", key) == 0
    assert await lock_holder(pool, f"schedule:{schedule_id}") is None
    # Not retried: the writes it committed itself would be applied again.
    history = await run.fetch_history()
    started = [e for e in history.events if e.HasField("activity_task_started_event_attributes")]
    assert len(started) == 1


# -- 9. the outbox conflict: a key recorded behind the guard's back rolls the job's writes back


async def test_a_key_recorded_while_the_job_runs_rolls_the_jobs_writes_back_and_releases(
    client: Client, pool: asyncpg.Pool, task_queue: str, schedule_id: str, tmp_path: Path
) -> None:
    # Reachable in production by a run under an old lock name after `apply` changed `lock:`,
    # or a replay under another lock: the lease does not stop it, only the outbox insert does.
    gate = tmp_path / f"gate-{uuid.uuid4().hex}"
    key = logical_key(schedule_id, PAST_FIRE)
    lock = f"schedule:{schedule_id}"
    async with in_process_worker(client, pool, task_queue):
        run = await start_job(client, task_queue, schedule_id, "gated", {"gate": str(gate)})

        async def job_running() -> bool:
            return await lock_holder(pool, lock) is not None

        await wait_for(job_running, timeout=30, what="the job holding its lease")
        async with pool.acquire() as conn:
            await conn.execute(
                "INSERT INTO cronwarden.outbox (logical_key, schedule_id, fire_time, attempt,"
                " fencing_token, worker, args_digest) VALUES ($1, $2, $3, 1, 0, 'other', 'x')",
                key,
                schedule_id,
                PAST_FIRE,
            )
        gate.touch()
        outcome = await run.result()
    assert outcome.outcome == ALREADY_DONE
    assert await count(pool, "test_effects", key) == 0
    assert await count(pool, "cronwarden.outbox", key) == 1
    # The rollback undid the commit statement's release too: the guard released on its own.
    assert await lock_holder(pool, lock) is None


async def test_a_key_committed_while_the_acquire_waited_on_the_lock_row_is_never_run(
    client: Client, pool: asyncpg.Pool, task_queue: str, schedule_id: str, tmp_path: Path
) -> None:
    # The acquire waits on the lease row while another run of the key commits: it reads the
    # outbox only once the row is its own, so it sees that record and never runs the job.
    key = logical_key(schedule_id, PAST_FIRE)
    lock = f"schedule:{schedule_id}"
    marker = tmp_path / "job-started"
    async with pool.acquire() as conn:
        await conn.execute(
            "INSERT INTO cronwarden.locks (name, holder, token, expires_at, acquired_at)"
            " VALUES ($1, NULL, nextval('cronwarden.lock_tokens'), now(), now())",
            lock,
        )
    committer = await pool.acquire()
    try:
        # The other run's commit, caught holding the lock row: its outbox record and release
        # become visible together, when it commits.
        tx = committer.transaction()
        await tx.start()
        await committer.execute("SELECT 1 FROM cronwarden.locks WHERE name = $1 FOR UPDATE", lock)
        await committer.execute(
            "INSERT INTO cronwarden.outbox (logical_key, schedule_id, fire_time, attempt,"
            " fencing_token, worker, args_digest) VALUES ($1, $2, $3, 1, 0, 'other', $4)",
            key,
            schedule_id,
            PAST_FIRE,
            args_digest({"marker": str(marker)}),
        )
        async with in_process_worker(client, pool, task_queue):
            run = await start_job(
                client, task_queue, schedule_id, "marks-start", {"marker": str(marker)}
            )

            async def acquire_waiting() -> bool:
                rows = await fetch(
                    pool,
                    "SELECT count(*) AS n FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
                    " AND datname = current_database()"
                    " AND query LIKE '%cronwarden.acquire_lease%'",
                )
                return int(rows[0]["n"]) > 0

            await wait_for(acquire_waiting, timeout=30, what="the acquire waiting on the lock row")
            await tx.commit()
            outcome = await run.result()
    finally:
        await pool.release(committer)
    assert outcome.outcome == ALREADY_DONE
    assert not marker.exists()
    assert await count(pool, "test_effects", key) == 0
    assert await lock_holder(pool, lock) is None
