"""Starting guarded runs directly (as `backfill run` does, bypassing the schedule, so a test
controls exactly which executions of a key exist) and reading what they left."""

from __future__ import annotations

import hashlib
import json
import uuid
from datetime import UTC, datetime
from typing import Any

import asyncpg
from temporalio.client import (
    Client,
    DescribeScheduleInput,
    Interceptor,
    OutboundInterceptor,
    ScheduleDescription,
    WorkflowFailureError,
    WorkflowHandle,
)
from temporalio.exceptions import ApplicationError, FailureError
from temporalio.service import RPCError, RPCStatusCode

from cronwarden.activities.contract import RunOutcome
from cronwarden.workflows.scheduled_run import ScheduledRunInput, ScheduledRunWorkflow
from tests.support.database import fetch
from tests.support.waiting import wait_for

FIRE = datetime(2026, 1, 5, 9, 30, tzinfo=UTC)
"""The fire time of `start_run`'s runs unless told otherwise."""


def args_digest(args: dict[str, Any]) -> str:
    return hashlib.sha256(
        json.dumps(args, sort_keys=True, separators=(",", ":")).encode()
    ).hexdigest()


async def start_run(
    client: Client,
    task_queue: str,
    schedule_id: str,
    *,
    args: dict[str, Any] | None = None,
    fire: datetime = FIRE,
    job: str = "probe",
    lock_ttl: float = 10.0,
    timeout: float = 30.0,
    max_attempts: int = 3,
    overlap: str = "skip",
    replay: bool = False,
    definition_digest: str = "",
    workflow_id: str | None = None,
) -> WorkflowHandle[Any, RunOutcome]:
    """A run of `fire`, its workflow id a replay's (unique per call) unless `workflow_id`."""
    args = args or {}
    inp = ScheduledRunInput(
        schedule_id=schedule_id,
        job=job,
        args=args,
        args_digest=args_digest(args),
        definition_digest=definition_digest,
        overlap=overlap,
        lock_name=f"schedule:{schedule_id}",
        lock_ttl_seconds=lock_ttl,
        timeout_seconds=timeout,
        heartbeat_grace_seconds=60,
        max_attempts=max_attempts,
        fire_time=fire.isoformat(),
        replay=replay,
    )
    return await client.start_workflow(
        ScheduledRunWorkflow.run,
        inp,
        id=workflow_id or f"{schedule_id}~replay-{fire:%Y-%m-%dT%H:%M:%SZ}-{uuid.uuid4().hex[:6]}",
        task_queue=task_queue,
    )


async def start_guarded(
    client: Client,
    task_queue: str,
    schedule_id: str,
    fire: datetime,
    *,
    job: str = "probe",
    args: dict[str, Any] | None = None,
    replay: bool = False,
    definition_digest: str = "",
    max_attempts: int = 3,
    timeout_seconds: float = 30,
) -> WorkflowHandle[Any, RunOutcome]:
    """`start_run` under a workflow id that is not a replay's, as the run-commit tests start."""
    return await start_run(
        client,
        task_queue,
        schedule_id,
        fire=fire,
        job=job,
        args=args,
        timeout=timeout_seconds,
        max_attempts=max_attempts,
        replay=replay,
        definition_digest=definition_digest,
        workflow_id=f"test-run-{schedule_id}-{fire:%Y%m%dT%H%M%S}-{uuid.uuid4().hex[:6]}",
    )


async def heartbeat(pool: asyncpg.Pool, schedule_id: str) -> asyncpg.Record:
    [row] = await fetch(
        pool, "SELECT * FROM cronwarden.heartbeats WHERE schedule_id = $1", schedule_id
    )
    return row


async def count(pool: asyncpg.Pool, table: str, key: str) -> int:
    """Rows of `table` (test_effects or cronwarden.outbox) for one logical key."""
    assert table in ("test_effects", "cronwarden.outbox")
    rows = await fetch(pool, f"SELECT count(*) AS n FROM {table} WHERE logical_key = $1", key)
    return int(rows[0]["n"])


async def effects(pool: asyncpg.Pool, key: str) -> int:
    """How many times the probe jobs applied `key` (test_effects has no unique constraint)."""
    return await count(pool, "test_effects", key)


async def committed_attempts(pool: asyncpg.Pool, key: str) -> list[int]:
    rows = await fetch(pool, "SELECT attempt FROM cronwarden.outbox WHERE logical_key = $1", key)
    return [r["attempt"] for r in rows]


async def lease_holder(pool: asyncpg.Pool, lock: str, *, timeout: float = 30) -> asyncpg.Record:
    """Wait until a run holds `lock`; its row (holder, token)."""

    async def held() -> asyncpg.Record | None:
        rows = await fetch(
            pool,
            "SELECT holder, token FROM cronwarden.locks WHERE name = $1 AND holder IS NOT NULL",
            lock,
        )
        return rows[0] if rows else None

    return await wait_for(held, timeout=timeout, what=f"a run to hold {lock}")


async def lock_holder(pool: asyncpg.Pool, lock: str) -> str | None:
    rows = await fetch(pool, "SELECT holder FROM cronwarden.locks WHERE name = $1", lock)
    return rows[0]["holder"] if rows else None


class WatchedDescribes(Interceptor):
    """Installed on the worker's client: counts DescribeSchedule calls, notes how many
    transactions of the test database were open at each, and can fail them as an unreachable
    frontend does (the RPC is the edge being faked, nothing else)."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        self.pool = pool
        self.calls = 0
        self.failing = False
        self.fail_next = 0
        """Fail this many of the next calls, then answer again."""
        self.open_transactions: list[int] = []

    def intercept_client(self, next: OutboundInterceptor) -> OutboundInterceptor:
        return _Watching(next, self)


class _Watching(OutboundInterceptor):
    def __init__(self, next: OutboundInterceptor, watched: WatchedDescribes) -> None:
        super().__init__(next)
        self._watched = watched

    async def describe_schedule(self, input: DescribeScheduleInput) -> ScheduleDescription:
        self._watched.calls += 1
        rows = await fetch(
            self._watched.pool,
            "SELECT count(*) AS n FROM pg_stat_activity"
            " WHERE datname = current_database() AND state LIKE 'idle in transaction%'",
        )
        self._watched.open_transactions.append(int(rows[0]["n"]))
        failing = self._watched.failing or self._watched.fail_next > 0
        self._watched.fail_next = max(self._watched.fail_next - 1, 0)
        if failing:
            raise RPCError("frontend unreachable (test)", RPCStatusCode.UNAVAILABLE, b"")
        return await self.next.describe_schedule(input)


async def queued_at(pool: asyncpg.Pool, lease: str, *, at_least: int = 1) -> bool:
    """Whether at least `at_least` runs wait in `lease`'s queue (places not yet expired)."""
    rows = await fetch(
        pool,
        "SELECT count(*) AS n FROM cronwarden.lock_waiters WHERE name = $1 AND expires_at > now()",
        lease,
    )
    return int(rows[0]["n"]) >= at_least


def failure_type(exc: WorkflowFailureError) -> str | None:
    """The `ApplicationError` type at the root of a failed run, if any."""
    cause: BaseException | None = exc.cause
    while cause is not None and not isinstance(cause, ApplicationError):
        cause = cause.__cause__ if not isinstance(cause, FailureError) else cause.cause
    return cause.type if isinstance(cause, ApplicationError) else None


async def add_heartbeat_row(conn: asyncpg.Connection, schedule_id: str) -> None:
    """The row `schedules apply` makes: runs record on it, never create it."""
    await conn.execute(
        "INSERT INTO cronwarden.heartbeats (schedule_id, next_expected_at) VALUES ($1, now())",
        schedule_id,
    )
