"""Scenario 8: the worker's wall clock is 5 minutes fast, or 5 minutes slow.

The skew is injected into the worker subprocess only (see
`tests/support/faults/skewed_clock/sitecustomize.py`): the servers, the monitor and this test keep
the real clock. Keys must come from Temporal's nominal
fire times and the heartbeat's next expected fire from Temporal's schedule: the test checks
both, and that the monitor pages for nothing. (Leases and run deadlines are taken from Postgres'
now(); only the absence of a page speaks for them here.)
"""

from __future__ import annotations

from datetime import timedelta

import asyncpg
import pytest
from temporalio.client import Client

from cronwarden.schedules.apply import apply_definitions
from tests.support.database import fetch
from tests.support.faults.fires import Watch, fire_row, fires_after, freeze, monitor_passes
from tests.support.faults.fires import watch as watch
from tests.support.faults.tally import FaultRow
from tests.support.faults.worker_process import SKEWED_CLOCK, StartWorker
from tests.support.faults.worker_process import start_worker as start_worker
from tests.support.monitor import receiver as receiver
from tests.support.paths import REPO_ROOT
from tests.support.schedules import definition
from tests.support.waiting import wait_for

pytestmark = pytest.mark.integration

FIVE_MINUTES = 300.0
INTERVAL = timedelta(seconds=2)
SLACK = timedelta(seconds=10)  # far below the skew


@pytest.mark.parametrize("skew", [FIVE_MINUTES, -FIVE_MINUTES], ids=["fast", "slow"])
async def test_a_worker_with_a_skewed_clock_adds_no_key_and_causes_no_page(
    skew: float,
    watch: Watch,
    fault_table: list[FaultRow],
    pool: asyncpg.Pool,
    client: Client,
    schedule_id: str,
    task_queue: str,
    cli_env: dict[str, str],
    start_worker: StartWorker,
) -> None:
    # The monitor runs on the real clock from the start: a false page would come while the runs
    # are healthy. The grace is far below the skew: any deadline taken from the worker's clock
    # pages at once.
    worker = start_worker(
        PYTHONPATH=f"{SKEWED_CLOCK}:{REPO_ROOT}", CRONWARDEN_TEST_CLOCK_SKEW_SECONDS=str(skew)
    )
    handle = client.get_schedule_handle(schedule_id)
    await worker.wait_event("worker.started", timeout=60)
    defn = definition(schedule_id, every="2s", heartbeat_grace="10s")
    await apply_definitions(client, pool, [defn], task_queue=task_queue)
    created_at = (await handle.describe()).info.created_at
    await wait_for(
        lambda: fires_after(pool, schedule_id, created_at, 5),
        timeout=40,
        what="five fires on the skewed worker",
    )
    passes = await monitor_passes(pool)

    async def watched() -> bool:
        return await monitor_passes(pool) >= passes + 5

    # Several more monitor passes, over fires still coming in.
    await wait_for(watched, timeout=30, what="monitor passes while the runs are healthy")
    # Stopped and counted before the freeze: the pause is Temporal's, not an operator's, so a
    # monitor still running could page for it.
    monitor_exit = await watch.stop()
    incidents = await fetch(pool, "SELECT id FROM cronwarden.incidents")
    pages = len(watch.receiver.at("/hook"))
    fires = await freeze(handle, pool, cli_env, created_at)
    [beat] = await fetch(
        pool,
        "SELECT next_expected_at, now() AS now FROM cronwarden.heartbeats WHERE schedule_id = $1",
        schedule_id,
    )

    # The job stamps its effect with the worker's clock, Postgres with its own: the difference
    # shows the skew really was in the worker.
    effects = await fetch(
        pool,
        "SELECT extract(epoch FROM started_at - finished_at)::float8 AS shift"
        " FROM public.test_effects WHERE logical_key LIKE $1",
        f"{schedule_id}@%",
    )
    checks = []
    if [e.get("skew_seconds") for e in worker.events("test.clock_skewed")] != [skew]:
        checks.append("the worker did not log its skewed clock")
    if not effects or any(abs(e["shift"] - skew) > 30 for e in effects):
        checks.append(f"the worker's clock was not skewed by {skew:+.0f}s")
    # Taken from the worker's clock, the next expected fire would be 5 minutes off either way.
    last_fire = max((r["fire_time"] for r in fires.rows), default=None)
    next_at = beat["next_expected_at"]
    if last_fire is None or not (last_fire < next_at <= beat["now"] + INTERVAL + SLACK):
        checks.append(f"next expected fire {next_at} is not after {last_fire} and near now")
    if incidents:
        checks.append(f"{len(incidents)} incidents opened while the runs were healthy")
    if monitor_exit != 0:
        checks.append(f"the monitor exited {monitor_exit}")
    row = await fire_row(
        pool,
        fires,
        scenario=f"8 worker clock {skew / 60:+.0f} min",
        pages=pages,
        checks_failed=checks,
    )
    fault_table.append(row)

    assert row.duplicate_effects == 0
    assert row.missing_unlisted == 0
    assert row.pages == 0
    assert row.checks_failed == [], worker.output[-4000:] + watch.tail()
