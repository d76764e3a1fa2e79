"""A run whose args fail its job's model says so where operators look: the heartbeat's
`last_error` (shown by `status`, `schedules describe`, the status page and overdue pages)."""

from __future__ import annotations

import asyncpg
import pytest
from temporalio.client import Client, WorkflowFailureError
from temporalio.worker import Worker

from cronwarden.activities.contract import INVALID_ARGS
from tests.support.database import fetch
from tests.support.runs import FIRE, add_heartbeat_row, failure_type, start_guarded

pytestmark = pytest.mark.integration


async def test_a_live_run_with_args_its_job_refuses_fails_and_records_why(
    client: Client, pool: asyncpg.Pool, task_queue: str, worker: Worker, schedule_id: str
) -> None:
    # The job's model changed after the schedule was applied: its args no longer pass.
    async with pool.acquire() as conn:
        await add_heartbeat_row(conn, schedule_id)
    handle = await start_guarded(client, task_queue, schedule_id, FIRE, args={"sleep": "soon"})
    with pytest.raises(WorkflowFailureError) as failed:
        await handle.result()
    assert failure_type(failed.value) == INVALID_ARGS
    [beat] = await fetch(
        pool, "SELECT last_error FROM cronwarden.heartbeats WHERE schedule_id = $1", schedule_id
    )
    assert beat["last_error"].startswith("args for job 'probe' are invalid: sleep: "), beat
