"""Every way a job can end, on the real servers: at most one effect per key, the lease freed,
the outcome named, retried or not as docs/guarantees.md's failure matrix says.

A job that raises anywhere (before, inside or after its transaction block) has its writes rolled
back and is retried: the key applies once. A job that ends the run's transaction itself must fail
without a retry, whatever happens next (it returns, raises inside or after the block, hangs until
its timeout, loses its lease), since what it committed may have landed."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import asyncpg
import pytest
from temporalio.client import Client, WorkflowFailureError, WorkflowHandle
from temporalio.exceptions import ApplicationError

from cronwarden.activities.contract import RAN, TRANSACTION_ENDED, RunOutcome, logical_key
from tests.support.database import fetch
from tests.support.runs import count, lock_holder, start_run
from tests.support.servers import in_process_worker
from tests.support.waiting import wait_for

pytestmark = pytest.mark.integration

FIRE = datetime(2026, 2, 3, 4, 5, tzinfo=UTC)
COMMIT_AND_BEGIN = "COMMIT; BEGIN"
# The job's second transaction fails: an aborted transaction answers nothing but ROLLBACK, so the
# guard cannot ask it for its marker.
COMMIT_AND_FAIL = "COMMIT; BEGIN; SELECT 1/0"
COMMIT_AND_STALL = "COMMIT; BEGIN; SELECT pg_sleep(60)"


def failure_of(error: WorkflowFailureError) -> ApplicationError:
    cause: BaseException | None = error
    while cause is not None and not isinstance(cause, ApplicationError):
        cause = cause.__cause__
    assert isinstance(cause, ApplicationError), error
    return cause


async def attempts_started(run: WorkflowHandle[Any, RunOutcome]) -> int:
    """How many attempts the run's activity had. Temporal writes one started event per
    activity, for its last attempt, carrying that attempt's number."""
    history = await run.fetch_history()
    started = [
        e.activity_task_started_event_attributes.attempt
        for e in history.events
        if e.HasField("activity_task_started_event_attributes")
    ]
    return max(started, default=0)


@pytest.mark.parametrize("at", ["before", "inside", "after-block", "stalls-inside"])
async def test_a_job_that_raises_anywhere_is_retried_and_its_key_applies_once(
    at: str, client: Client, pool: asyncpg.Pool, task_queue: str, schedule_id: str
) -> None:
    # `stalls-inside`: timed out in the middle of a statement, its transaction aborted by the
    # cancellation; still the run's own transaction, so the run is retried.
    async with in_process_worker(client, pool, task_queue):
        run = await start_run(
            client,
            task_queue,
            schedule_id,
            fire=FIRE,
            job="fails-at",
            args={"at": at},
            timeout=3.0,
        )
        outcome = await run.result()
    assert outcome.outcome == RAN and outcome.attempt == 2
    key = logical_key(schedule_id, FIRE)
    assert await count(pool, "test_effects", key) == 1
    assert await count(pool, "cronwarden.outbox", key) == 1
    assert await lock_holder(pool, f"schedule:{schedule_id}") is None


@pytest.mark.parametrize("where", ["inside", "after-block"])
async def test_a_healthy_job_idle_in_its_transaction_longer_than_the_lease_ttl_commits(
    where: str, client: Client, pool: asyncpg.Pool, task_queue: str, schedule_id: str
) -> None:
    # The server's idle timeout ends only a stopped or cut-off holder's transaction: while the
    # job runs it is the job's timeout and a margin, and only from the commit statement to
    # COMMIT the lease's TTL. A job doing slow work with its transaction open is no such holder.
    async with in_process_worker(client, pool, task_queue):
        run = await start_run(
            client,
            task_queue,
            schedule_id,
            fire=FIRE,
            job="idles-in-transaction",
            args={"seconds": 3.0, "where": where},
            lock_ttl=2.0,
            timeout=30.0,
            max_attempts=1,
        )
        outcome = await run.result()
    assert (outcome.outcome, outcome.attempt) == (RAN, 1)
    key = logical_key(schedule_id, FIRE)
    assert await count(pool, "test_effects", key) == 1


@pytest.mark.parametrize(
    ("statement", "then", "effects"),
    [
        ("COMMIT", "raise", 1),
        ("COMMIT", "raise-after-block", 1),
        ("COMMIT", "hang", 1),
        ("ROLLBACK", "raise", 0),
        ("ROLLBACK", "hang", 0),
        (COMMIT_AND_BEGIN, "raise", 1),
        (COMMIT_AND_BEGIN, "raise-after-block", 1),
        (COMMIT_AND_BEGIN, "hang", 1),
        (COMMIT_AND_FAIL, "return", 1),
        (COMMIT_AND_FAIL, "swallow", 1),
        (COMMIT_AND_STALL, "return", 1),
    ],
)
async def test_a_job_that_ends_its_transaction_and_then_fails_is_never_retried(
    statement: str,
    then: str,
    effects: int,
    client: Client,
    pool: asyncpg.Pool,
    task_queue: str,
    schedule_id: str,
) -> None:
    async with in_process_worker(client, pool, task_queue):
        run = await start_run(
            client,
            task_queue,
            schedule_id,
            fire=FIRE,
            job="ends-transaction",
            args={"statement": statement, "then": then},
            timeout=2.0,
            max_attempts=3,
        )
        with pytest.raises(WorkflowFailureError) as failed:
            await run.result()
    error = failure_of(failed.value)
    assert error.type == TRANSACTION_ENDED, error
    assert error.non_retryable
    key = logical_key(schedule_id, FIRE)
    # At most one effect: the one the job committed itself, never a retry's second.
    assert await count(pool, "test_effects", key) == effects
    assert await count(pool, "cronwarden.outbox", key) == 0
    assert await lock_holder(pool, f"schedule:{schedule_id}") is None
    assert await attempts_started(run) == 1


@pytest.mark.parametrize("statement", ["COMMIT", COMMIT_AND_BEGIN])
async def test_a_job_that_ends_its_transaction_and_then_loses_its_lease_is_never_retried(
    statement: str, client: Client, pool: asyncpg.Pool, task_queue: str, schedule_id: str
) -> None:
    lock = f"schedule:{schedule_id}"
    key = logical_key(schedule_id, FIRE)
    async with in_process_worker(client, pool, task_queue):
        run = await start_run(
            client,
            task_queue,
            schedule_id,
            fire=FIRE,
            job="ends-transaction",
            args={"statement": statement, "then": "hang"},
            lock_ttl=1.5,
            timeout=60.0,
            max_attempts=3,
        )

        async def effect_landed() -> bool:
            return await count(pool, "test_effects", key) == 1

        await wait_for(effect_landed, timeout=30, what="the job's own COMMIT of its effect")
        # Another runner takes the lease over (as after an expiry): the renewal notices, and the
        # job is cancelled while it waits.
        await fetch(
            pool,
            "UPDATE cronwarden.locks"
            " SET holder = 'thief', token = nextval('cronwarden.lock_tokens')"
            " WHERE name = $1",
            lock,
        )
        with pytest.raises(WorkflowFailureError) as failed:
            await run.result()
    error = failure_of(failed.value)
    assert error.type == TRANSACTION_ENDED, error
    assert "cancelled" in error.message
    assert await count(pool, "test_effects", key) == 1
    assert await count(pool, "cronwarden.outbox", key) == 0
    assert await lock_holder(pool, lock) == "thief"
    assert await attempts_started(run) == 1
