"""Scenario 8: the worker's wall clock is 5 minutes fast, or 5 minutes slow.

The skew is injected into the worker subprocess only (see `skewed_clock/sitecustomize.py`): the
servers, the monitor and this test keep the real clock. Keys must come from Temporal's nominal
fire times, leases and run deadlines from Postgres' now(), and the heartbeat's next expected
fire from Temporal's schedule, so a skewed worker must add no logical key and cause no page.
"""

from __future__ import annotations

from pathlib import Path

import asyncpg
import pytest
from temporalio.client import Client

from activities.contract import format_fire_time
from schedules.apply import apply_definitions
from tests.faults.fires import Watch, fire_row, fires_after, freeze, monitor_passes
from tests.faults.fires import watch as watch
from tests.faults.tally import FaultRow
from tests.faults.worker_process import StartWorker
from tests.faults.worker_process import start_worker as start_worker
from tests.integration.conftest import REPO_ROOT, fetch, wait_for
from tests.integration.test_monitor import receiver as receiver
from tests.integration.test_scheduled_runs import definition

pytestmark = pytest.mark.integration

SKEWED_CLOCK = Path(__file__).parent / "skewed_clock"
FIVE_MINUTES = 300.0


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
    fires = await freeze(handle, pool, cli_env, created_at)
    monitor_exit = await watch.stop()

    # The job stamps its effect with the worker's clock, Postgres with its own: the difference
    # shows the skew really was in the worker.
    effects = await fetch(
        pool,
        "SELECT extract(epoch FROM started_at - finished_at)::float8 AS shift"
        " FROM public.test_effects WHERE logical_key LIKE $1",
        f"{schedule_id}@%",
    )
    incidents = await fetch(pool, "SELECT id FROM cronwarden.incidents")
    checks = []
    if not effects or any(abs(e["shift"] - skew) > 30 for e in effects):
        checks.append(f"the worker's clock was not skewed by {skew:+.0f}s")
    mismatched = [
        r["logical_key"]
        for r in fires.rows
        if r["logical_key"] != f"{schedule_id}@{format_fire_time(r['fire_time'])}"
    ]
    if mismatched:
        checks.append(f"keys that do not name their nominal fire time: {mismatched}")
    if incidents:
        checks.append(f"{len(incidents)} incidents opened while the runs were healthy")
    if monitor_exit != 0:
        checks.append(f"the monitor exited {monitor_exit}")
    row = await fire_row(
        pool,
        fires,
        scenario=f"8 worker clock {skew / 60:+.0f} min",
        pages=len(watch.receiver.at("/hook")),
        checks_failed=checks,
    )
    fault_table.append(row)

    assert row.duplicate_effects == 0
    assert row.missing_unlisted == 0
    assert row.pages == 0
    assert row.checks_failed == [], worker.output[-4000:]
