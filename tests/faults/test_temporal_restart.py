"""Scenario 6: the Temporal dev server restarts mid-schedule, on the same SQLite file.

Temporal's scheduler catches up the fire times it missed while it was down, as long as they are
within the catchup window (Temporal's floor for that window is 10 s; ours here is a minute, and
the outage a few seconds). Under `buffer_one` the first missed fire starts at once and the next
one is buffered behind it; any further ones are dropped by the overlap policy, and `backfill plan`
lists them. The worker is a subprocess that is never restarted: it has to find the server again
on its own.
"""

from __future__ import annotations

import asyncio
import socket
from datetime import UTC, datetime, timedelta

import asyncpg
import pytest
from temporalio.client import Client

from cronwarden.embedded import EmbeddedTemporal
from cronwarden.schedules.apply import apply_definitions
from tests.support.faults.fires import fire_row, fires_after, freeze
from tests.support.faults.tally import FaultRow
from tests.support.faults.worker_process import StartWorker
from tests.support.faults.worker_process import start_worker as start_worker
from tests.support.schedules import definition
from tests.support.waiting import clock_past, wait_for

pytestmark = pytest.mark.integration

# Long enough that at least two fire times of `every: 2s` fall inside the outage.
OUTAGE = timedelta(seconds=5)


async def test_fires_missed_while_temporal_restarts_run_late_once_and_the_worker_reconnects(
    client: Client,
    pool: asyncpg.Pool,
    task_queue: str,
    schedule_id: str,
    cli_env: dict[str, str],
    temporal_server: EmbeddedTemporal,
    start_worker: StartWorker,
    fault_table: list[FaultRow],
) -> None:
    worker = start_worker()
    await worker.wait_event("worker.started", timeout=60)
    defn = definition(schedule_id, every="2s", catchup_window="1m", overlap="buffer_one")
    await apply_definitions(client, pool, [defn], task_queue=task_queue)
    handle = client.get_schedule_handle(schedule_id)
    created_at = (await handle.describe()).info.created_at

    await wait_for(
        lambda: fires_after(pool, schedule_id, created_at, 2), timeout=30, what="two fires"
    )
    # stop + start rather than restart(): the outage must cover fire times whatever the
    # machine's speed, and a restart that happens to fall between two fires proves nothing.
    try:
        await asyncio.to_thread(temporal_server.stop)
        # Taken once the server is gone and just before it comes back: a fire time between
        # the two had no server to start it on time.
        stopped_at = datetime.now(UTC)
        await wait_for(lambda: clock_past(stopped_at + OUTAGE), timeout=20, what="the outage")
        restarting_at = datetime.now(UTC)
        await asyncio.to_thread(temporal_server.start)
    finally:
        # Every later test of the session needs this server.
        if not temporal_server.running:
            await asyncio.to_thread(temporal_server.start)
    # Fires due after the restart commit too: the worker polls the restarted server.
    await wait_for(
        lambda: fires_after(pool, schedule_id, restarting_at, 2),
        timeout=60,
        what="fires after it",
    )
    fires = await freeze(handle, pool, cli_env, created_at)
    description = await handle.describe()

    inside = {t for t in fires.expected if stopped_at < t <= restarting_at}
    late = [r for r in fires.rows if r["fire_time"] in inside and r["committed_at"] > restarting_at]
    own = f"{worker.pid}@{socket.gethostname()}"
    after = [r for r in fires.rows if r["fire_time"] > restarting_at]

    checks = []
    if len(inside) < 2:
        checks.append(f"only {len(inside)} fire times fell inside the outage")
    if not late:
        checks.append("no fire missed during the outage ran late, after the restart")
    if description.info.num_actions_missed_catchup_window:
        checks.append("Temporal dropped fires as outside the catchup window")
    # Missed fires that did not run late were dropped by the overlap policy, never silently:
    # the plan lists exactly the fires that have no outbox record.
    if fires.listed != fires.uncommitted:
        checks.append(f"backfill plan listed {sorted(fires.listed)}, not the fires never run")
    if worker.proc.poll() is not None:
        checks.append("the worker process exited")
    if not after or any(r["worker"] != own for r in after):
        checks.append(f"fires after the restart were not run by the same worker {own}")
    row = await fire_row(
        pool, fires, scenario="6 Temporal restarted mid-schedule", checks_failed=checks
    )
    fault_table.append(row)

    assert row.duplicate_effects == 0
    assert row.missing_unlisted == 0
    assert row.checks_failed == [], worker.output[-4000:]
