"""Postgres failing under a worker subprocess (scenarios 4 and 5): the connection cut at
COMMIT, on either side of the server's commit, and the whole server restarted mid-run."""

from __future__ import annotations

import asyncio
import math
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime
from typing import Any, Literal

import asyncpg
import pytest
import pytest_asyncio
from temporalio.client import Client, WorkflowExecutionStatus

from cronwarden.activities.contract import RAN, logical_key
from cronwarden.backfill.plan import load_managed, plan
from cronwarden.backfill.window import Window
from cronwarden.embedded import EmbeddedPostgres
from cronwarden.schedules.apply import apply_definitions
from tests.support.database import fetch
from tests.support.faults.commit_cutter import CommitCutter
from tests.support.faults.counts import check, tally, within
from tests.support.faults.one_key import OneKey, outbox_of
from tests.support.faults.tally import FaultRow
from tests.support.faults.worker_process import StartWorker, WorkerProcess
from tests.support.schedules import definition
from tests.support.waiting import wait_for

pytestmark = pytest.mark.integration

RESULT_TIMEOUT = 90
_DB_ERRORS = (OSError, asyncpg.PostgresError, asyncpg.InterfaceError)


CutMode = Literal["before", "after", "hold"]
CutRun = Callable[[CutMode], Awaitable[tuple[CommitCutter, WorkerProcess]]]


@pytest_asyncio.fixture(loop_scope="session")
async def run_through_cutter(
    database: str, postgres_server: EmbeddedPostgres, start_worker: StartWorker
) -> AsyncIterator[CutRun]:
    """`await run_through_cutter(mode)` starts a worker whose every database connection goes
    through a proxy that cuts one COMMIT in `mode`; returns the proxy and the worker."""
    cutters: list[CommitCutter] = []

    async def start(mode: CutMode) -> tuple[CommitCutter, WorkerProcess]:
        cutter = CommitCutter(postgres_server.host, postgres_server.port, mode=mode)
        cutters.append(cutter)
        await cutter.start()
        worker = start_worker(CRONWARDEN_DATABASE_URL=cutter.proxied(database))
        # Only the runs' COMMITs, none the worker may issue while starting.
        await worker.wait_event("worker.started", timeout=60)
        cutter.armed = True
        return cutter, worker

    yield start
    for cutter in cutters:
        await cutter.stop()


async def test_a_connection_cut_before_commit_reaches_the_server_is_retried_and_applies_once(
    one_key: OneKey, run_through_cutter: CutRun
) -> None:
    cutter, worker = await run_through_cutter("before")
    outcome = await asyncio.wait_for((await one_key.start()).result(), RESULT_TIMEOUT)

    checks: list[str] = []
    check(checks, cutter.cut == 1, f"{cutter.cut} COMMITs cut")
    check(checks, (outcome.outcome, outcome.attempt) == (RAN, 2), f"the run gave {outcome}")
    check(checks, bool(worker.events("run.commit-failed")), "no run.commit-failed logged")
    check(checks, await one_key.committed_attempts() == [2], "the outbox is not attempt 2's")
    await one_key.tally("4a connection cut at COMMIT, before the server got it", checks)
    assert await one_key.effect_attempts() == [2]


async def test_a_commit_that_landed_behind_a_cut_connection_is_recognised_as_done(
    one_key: OneKey, run_through_cutter: CutRun
) -> None:
    cutter, worker = await run_through_cutter("after")
    outcome = await asyncio.wait_for((await one_key.start()).result(), RESULT_TIMEOUT)

    checks: list[str] = []
    check(checks, cutter.cut == 1, f"{cutter.cut} COMMITs cut")
    # The server did answer COMMIT (CommandComplete "COMMIT"); the worker never saw it.
    check(
        checks,
        any(b"COMMIT\x00" in answer for answer in cutter.answers_dropped),
        f"the server's answer to COMMIT was not seen: {cutter.answers_dropped!r}",
    )
    # The guard looks again instead of guessing: its own token is in the outbox, so the run is
    # reported ran on attempt 1 and Temporal does not retry it.
    check(checks, (outcome.outcome, outcome.attempt) == (RAN, 1), f"the run gave {outcome}")
    committed = await one_key.outbox()
    check(
        checks,
        committed == [(1, outcome.fencing_token)],
        f"the outbox does not hold attempt 1's commit: {committed}",
    )
    confirmed = [e for e in worker.events("run.committed") if "note" in e]
    check(checks, len(confirmed) == 1, "the commit was not confirmed after the error")
    await one_key.tally("4b COMMIT landed, its answer lost with the connection", checks)
    assert await one_key.effect_attempts() == [1]


async def test_a_commit_held_between_the_commit_statement_and_commit_is_ended_by_the_server(
    one_key: OneKey, run_through_cutter: CutRun
) -> None:
    # The holder's COMMIT never reaches the server and its connection stays open: its fencing
    # check keeps the lease row locked, and nothing on the client side can end that. The guard
    # sets the job transaction's idle timeout to the lease TTL, so the server rolls it back and
    # closes the connection; the guard finds the commit did not land, and the retry commits.
    # Without that timeout the row stays locked for as long as the hold lasts (for ever here).
    cutter, worker = await run_through_cutter("hold")
    outcome = await asyncio.wait_for((await one_key.start(lock_ttl=3)).result(), RESULT_TIMEOUT)

    checks: list[str] = []
    check(checks, cutter.cut == 1, f"{cutter.cut} COMMITs held")
    failed = worker.events("run.commit-failed")
    check(
        checks,
        any("idle-in-transaction" in str(e.get("error")) for e in failed),
        f"the held transaction was not ended by the server's idle timeout: {failed}",
    )
    check(checks, (outcome.outcome, outcome.attempt) == (RAN, 2), f"the run gave {outcome}")
    check(checks, await one_key.committed_attempts() == [2], "the outbox is not attempt 2's")
    await one_key.tally("4c COMMIT held open (holder stopped between statement and COMMIT)", checks)
    assert await one_key.effect_attempts() == [2]


async def _committed_after(pool: asyncpg.Pool, schedule_id: str, since: datetime) -> Any:
    """Outbox rows fired after `since`, or None while Postgres cannot be reached."""
    try:
        rows = await fetch(
            pool,
            "SELECT logical_key, worker FROM cronwarden.outbox"
            " WHERE schedule_id = $1 AND fire_time > $2",
            schedule_id,
            since,
        )
    except _DB_ERRORS:
        return None
    return rows


async def _a_run_failed_an_attempt(client: Client, schedule_id: str) -> bool:
    """A run of the schedule failed an attempt: it waits for its next one, or it gave up."""
    actions = (await client.get_schedule_handle(schedule_id).describe()).info.recent_actions
    for action in actions[-2:]:
        wf_id = action.action.workflow_id  # type: ignore[attr-defined]
        desc = await client.get_workflow_handle(wf_id).describe()
        if desc.status == WorkflowExecutionStatus.FAILED or any(
            p.attempt > 1 for p in desc.raw_description.pending_activities
        ):
            return True
    return False


async def test_runs_complete_after_postgres_restarts_under_a_running_worker(
    client: Client,
    pool: asyncpg.Pool,
    postgres_server: EmbeddedPostgres,
    task_queue: str,
    schedule_id: str,
    start_worker: StartWorker,
    fault_table: list[FaultRow],
) -> None:
    # A run takes 1 s of a 2 s interval; attempts enough to outlast the outage.
    defn = definition(
        schedule_id, every="2s", args={"sleep": 1}, max_attempts=10, lock_ttl="6s", timeout="30s"
    )
    worker = start_worker()
    await apply_definitions(client, pool, [defn], task_queue=task_queue)
    handle = client.get_schedule_handle(schedule_id)
    try:
        await wait_for(
            lambda: _committed_after(pool, schedule_id, datetime.min.replace(tzinfo=UTC)),
            timeout=60,
            what="a first committed fire",
        )

        async def mid_run() -> Any:
            # Taken within the last 0.3 s by a run that sleeps 1 s: still running at the stop.
            rows = await fetch(
                pool,
                "SELECT logical_key, token FROM cronwarden.locks"
                " WHERE schedule_id = $1 AND holder IS NOT NULL"
                "   AND acquired_at > now() - interval '300 milliseconds'",
                schedule_id,
            )
            return rows[0] if rows else None

        in_flight = await wait_for(
            mid_run, timeout=30, what="a run that just took its lease", interval=0.05
        )
        # Stopped, then started only once a run has failed on the missing database: the
        # restart provably hits a run, however fast the server comes back.
        await asyncio.to_thread(postgres_server.stop)
        try:
            failed = await within(
                lambda: _a_run_failed_an_attempt(client, schedule_id),
                timeout=30,
                what="a run to fail while Postgres is down",
            )
        finally:
            await asyncio.to_thread(postgres_server.start)
        back = datetime.now(UTC)

        async def two_after_restart() -> Any:
            rows = await _committed_after(pool, schedule_id, back)
            return rows if rows is not None and len(rows) >= 2 else None

        after = await within(
            two_after_restart, timeout=60, what="two fires committed after the restart"
        )
        # (`after` counts fires, not retries: the retried run's fire was before the restart.)
        await handle.pause(note="fault scenario done")
        desc = await handle.describe()
        last_fire = max(a.scheduled_at for a in desc.info.recent_actions)
        # Visibility lags behind: the schedule's own recent actions name the latest runs.
        run_ids = {
            w.id async for w in client.list_workflows(f'TemporalScheduledById = "{schedule_id}"')
        } | {a.action.workflow_id for a in desc.info.recent_actions}  # type: ignore[attr-defined]

        async def statuses() -> list[WorkflowExecutionStatus | None]:
            return [(await client.get_workflow_handle(i).describe()).status for i in run_ids]

        async def all_closed() -> bool:
            return WorkflowExecutionStatus.RUNNING not in await statuses()

        finished = await within(all_closed, timeout=60, what="the schedule's runs to finish")
        closed = await statuses()
        managed = await load_managed(client, schedule_id)
        listed = await plan(client, pool, managed, Window(managed.created_at, last_fire))
    finally:
        await handle.delete()

    # Independent of Temporal's spec evaluation: `every 2s` fires on even epoch seconds.
    first = math.floor(managed.created_at.timestamp()) + 1
    expected = {
        logical_key(schedule_id, datetime.fromtimestamp(s, UTC))
        for s in range(first + first % 2, int(last_fire.timestamp()) + 1, 2)
    }
    identity = worker.events("worker.started")[0]["identity"]
    checks: list[str] = []
    retried = await fetch(
        pool, "SELECT 1 FROM cronwarden.outbox WHERE schedule_id = $1 AND attempt > 1", schedule_id
    )
    check(checks, bool(retried), "no run failed during the outage and committed on a retry")
    check(checks, failed is not None, "no run failed an attempt while Postgres was down")
    # The run in flight at the stop died there; its fire was committed by a later attempt.
    died = await outbox_of(pool, in_flight["logical_key"])
    check(
        checks,
        len(died) == 1 and (died[0][0] > 1 or died[0][1] != in_flight["token"]),
        f"the run in flight at the stop ({dict(in_flight)}) was not retried: outbox {died}",
    )
    check(checks, finished is not None, "the schedule's runs did not all finish")
    check(checks, worker.proc.poll() is None, "the worker process died")
    check(checks, len(worker.events("worker.started")) == 1, "the worker restarted")
    check(checks, after is not None, "no two fires committed after the restart")
    check(
        checks,
        all(r["worker"] == identity for r in after or []),
        "fires after the restart were committed by another worker",
    )
    check(
        checks,
        all(s == WorkflowExecutionStatus.COMPLETED for s in closed),
        f"runs that did not complete: {closed}",
    )
    await tally(
        fault_table,
        pool,
        scenario="5 Postgres restarted mid-run",
        schedule_id=schedule_id,
        expected=expected,
        listed=set(listed.missing_keys()),
        checks=checks,
    )
    assert last_fire > back
