"""A worker that stops (SIGTERM: a rolling release, a drain, a scale-down) hands its runs back:
real `cronwarden worker` processes, stopped with a short graceful time while a job runs.

Before hand-backs, the cut was a failed attempt in Temporal (`WorkerShutdown`): three drains in
a row failed the run and paused its `pause_on_failure` schedule, and a run still waiting for
its lease held the worker for the whole graceful time before it was cut the same way.
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import asyncpg
import pytest
from temporalio.client import Client

from cronwarden.activities.contract import RAN, logical_key
from cronwarden.schedules.apply import apply_definitions
from cronwarden.store import locks
from cronwarden.workflows.hand_back import HANDED_BACK
from tests.support.database import fetch
from tests.support.drains import (
    COMPLETED,
    activity_attempts,
    hold_lease,
    scheduled_max_attempts,
    triggered_run,
)
from tests.support.faults.worker_process import WorkerProcess
from tests.support.runs import FIRE, effects, lease_holder, start_run
from tests.support.schedules import yearly_definition
from tests.support.servers import in_process_worker
from tests.support.waiting import wait_for

pytestmark = pytest.mark.integration

CUTS = 3
RESULT_TIMEOUT = 120


@dataclass
class Stage:
    """This test's servers and task queue, and the worker processes it started."""

    client: Client
    pool: asyncpg.Pool
    task_queue: str
    schedule_id: str
    env: dict[str, str]
    workers: list[WorkerProcess]

    def worker(self, *, graceful: float) -> WorkerProcess:
        started = WorkerProcess(self.env, graceful=graceful)
        self.workers.append(started)
        return started


@pytest.fixture
def stage(
    client: Client,
    pool: asyncpg.Pool,
    task_queue: str,
    schedule_id: str,
    cli_env: dict[str, str],
) -> Iterator[Stage]:
    staged = Stage(client, pool, task_queue, schedule_id, cli_env, [])
    yield staged
    for worker in staged.workers:
        worker.stop()


async def test_three_drains_in_a_row_spend_no_attempt_and_the_run_commits_once(
    stage: Stage, tmp_path: Path
) -> None:
    gate = tmp_path / "gate"
    defn = yearly_definition(
        stage.schedule_id,
        job="gated",
        args={"gate": str(gate), "wait_seconds": 600},
        max_attempts=3,
        pause_on_failure=True,
        timeout="10m",
        lock_ttl="10s",
    )
    await apply_definitions(stage.client, stage.pool, [defn], task_queue=stage.task_queue)
    schedule = stage.client.get_schedule_handle(stage.schedule_id)
    run = await triggered_run(stage.client, schedule)

    # Each worker takes the run up (the first from the schedule, the others from the hand-back
    # of the one before), and is stopped while the job waits on its gate.
    handed: list[str] = []
    for _ in range(CUTS):
        worker = stage.worker(graceful=1)
        await worker.wait_event("run.started", timeout=60)
        worker.signal(signal.SIGTERM)
        assert await worker.exited(timeout=60) == 0, worker.output
        handed += [e["where"] for e in worker.events("run.handed-back")]

    gate.touch()
    stage.worker(graceful=1)
    outcome = await asyncio.wait_for(run.result(), timeout=RESULT_TIMEOUT)

    assert (outcome.outcome, outcome.attempt) == (RAN, 1)
    assert await effects(stage.pool, outcome.logical_key) == 1
    assert (await schedule.describe()).schedule.state.paused is False
    [beat] = await fetch(
        stage.pool,
        "SELECT last_error FROM cronwarden.heartbeats WHERE schedule_id = $1",
        stage.schedule_id,
    )
    assert beat["last_error"] is None
    # In Temporal: every activity ran once, the three cut ones ended as hand-backs (not
    # retried), and no attempt of the run failed with WorkerShutdown.
    assert await activity_attempts(run) == [(1, HANDED_BACK)] * CUTS + [(1, COMPLETED)]
    assert handed == ["running"] * CUTS


@pytest.mark.parametrize("replay", [False, True], ids=["live", "replay"])
async def test_a_run_waiting_for_its_lease_is_handed_back_at_sigterm_not_at_the_graceful_time(
    stage: Stage, replay: bool
) -> None:
    lock = f"schedule:{stage.schedule_id}"
    token = await hold_lease(stage.pool, lock, ttl_seconds=600)
    # Far longer than the test's own deadlines: only a hand-back lets the worker exit in time.
    worker = stage.worker(graceful=900)
    run = await start_run(
        stage.client,
        stage.task_queue,
        stage.schedule_id,
        overlap="buffer_one",
        timeout=120,
        replay=replay,
    )
    await worker.wait_event("run.lease-waiting", timeout=60)

    worker.signal(signal.SIGTERM)
    assert await worker.exited(timeout=60) == 0, worker.output
    assert [e["where"] for e in worker.events("run.handed-back")] == ["waiting for its lease"]
    # It left the lease's queue on the way out: nobody waits behind its ghost.
    places = await fetch(
        stage.pool, "SELECT waiter FROM cronwarden.lock_waiters WHERE name = $1", lock
    )
    assert places == []

    async with stage.pool.acquire() as conn:
        assert await locks.release(conn, name=lock, token=token)
    async with in_process_worker(stage.client, stage.pool, stage.task_queue):
        outcome = await asyncio.wait_for(run.result(), timeout=RESULT_TIMEOUT)
    assert (outcome.outcome, outcome.attempt) == (RAN, 1)
    assert outcome.logical_key == logical_key(stage.schedule_id, FIRE)
    assert await effects(stage.pool, outcome.logical_key) == 1
    assert await activity_attempts(run) == [(1, HANDED_BACK), (1, COMPLETED)]


async def test_a_hand_back_keeps_the_attempts_that_failed_for_real_before_it(
    stage: Stage,
) -> None:
    # Attempt 1 fails for real; attempt 2 runs long and is cut by the worker's shutdown.
    run = await start_run(
        stage.client,
        stage.task_queue,
        stage.schedule_id,
        args={"fail_attempts": 1, "sleep": 600},
        timeout=900,
        max_attempts=3,
    )
    worker = stage.worker(graceful=1)
    try:

        async def second_attempt_running() -> bool:
            return any(e["attempt"] == 2 for e in worker.events("run.started"))

        await wait_for(second_attempt_running, timeout=60, what="the second attempt to run")
        worker.signal(signal.SIGTERM)
        assert await worker.exited(timeout=60) == 0, worker.output
        stage.worker(graceful=1)  # the run's next workflow task needs a worker

        async def scheduled_again() -> list[int]:
            found = await scheduled_max_attempts(run)
            return found if len(found) == 2 else []

        # The run's next activity may spend only what is left: 3 less the one real failure.
        assert await wait_for(scheduled_again, timeout=30, what="the run's next activity") == [
            3,
            2,
        ]
        # Temporal keeps only an activity's last attempt in the history: the second, cut.
        assert (await activity_attempts(run))[0] == (2, HANDED_BACK)
    finally:
        await run.terminate()


async def test_a_hand_back_whose_release_failed_waits_out_the_lease_instead_of_skipping(
    stage: Stage, tmp_path: Path
) -> None:
    # A `skip` run: behind another holder it would be skipped at once. Here the holder is its
    # own cut activity, whose release is undone below as if it had failed (Postgres away at
    # that moment): the lease then lapses only at its TTL.
    gate = tmp_path / "gate"
    lock = f"schedule:{stage.schedule_id}"
    run = await start_run(
        stage.client,
        stage.task_queue,
        stage.schedule_id,
        job="gated",
        args={"gate": str(gate)},
        lock_ttl=4,
    )
    worker = stage.worker(graceful=1)
    await worker.wait_event("run.started", timeout=60)
    held = await lease_holder(stage.pool, lock)
    worker.signal(signal.SIGTERM)
    assert await worker.exited(timeout=60) == 0, worker.output
    async with stage.pool.acquire() as conn:
        await conn.execute(
            "UPDATE cronwarden.locks SET holder = $2, expires_at = clock_timestamp() + "
            "interval '4 seconds' WHERE name = $1 AND token = $3",
            lock,
            held["holder"],
            held["token"],
        )

    gate.touch()
    async with in_process_worker(stage.client, stage.pool, stage.task_queue):
        outcome = await asyncio.wait_for(run.result(), timeout=RESULT_TIMEOUT)
    assert (outcome.outcome, outcome.attempt) == (RAN, 1)
    assert await effects(stage.pool, outcome.logical_key) == 1
