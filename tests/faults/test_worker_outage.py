"""Scenario 7: every worker is down for longer than the catchup window.

Temporal keeps firing, but with no worker nothing commits: under `skip` the first fire's run
waits for a worker and every later fire is dropped by the overlap policy while it waits. The
catchup window plays no part (Temporal is up and starts every fire on time); the outage outlasts
it only to show that it does not matter. The monitor (a `cronwarden monitor`
subprocess paging a real local HTTP receiver) must page once the schedule's grace is up, not
before; `backfill plan` must list exactly the fires that never committed, and `backfill run` must
apply each of them once.
"""

from __future__ import annotations

import signal
from datetime import UTC, datetime, timedelta

import asyncpg
import pytest
from temporalio.client import Client

from cronwarden.activities.contract import ALREADY_DONE, OVERLAP_LOCKED
from cronwarden.backfill.replay import REPLAYED
from cronwarden.schedules.apply import apply_definitions
from tests.support.cli import cli_json, iso
from tests.support.database import fetch
from tests.support.faults.counts import within
from tests.support.faults.fires import Watch, fire_row, fires_after, freeze, listed_by_plan
from tests.support.faults.fires import watch as watch
from tests.support.faults.tally import FaultRow
from tests.support.faults.worker_process import StartWorker
from tests.support.faults.worker_process import start_worker as start_worker
from tests.support.monitor import events
from tests.support.monitor import receiver as receiver
from tests.support.schedules import definition
from tests.support.waiting import clock_past, wait_for

pytestmark = pytest.mark.integration

CATCHUP = timedelta(seconds=10)  # Temporal's floor for a catchup window
GRACE = timedelta(seconds=4)
PASSES = timedelta(seconds=5)  # a few monitor passes (0.2 s each) on a loaded machine


async def test_an_outage_of_every_worker_pages_within_grace_and_backfill_closes_exactly_it(
    client: Client,
    pool: asyncpg.Pool,
    task_queue: str,
    schedule_id: str,
    cli_env: dict[str, str],
    start_worker: StartWorker,
    watch: Watch,
    fault_table: list[FaultRow],
) -> None:
    first = start_worker()
    handle = client.get_schedule_handle(schedule_id)
    await first.wait_event("worker.started", timeout=60)
    defn = definition(
        schedule_id,
        every="2s",
        catchup_window=f"{CATCHUP.seconds}s",
        heartbeat_grace=f"{GRACE.seconds}s",
        overlap="skip",
    )
    await apply_definitions(client, pool, [defn], task_queue=task_queue)
    created_at = (await handle.describe()).info.created_at
    await wait_for(
        lambda: fires_after(pool, schedule_id, created_at, 2), timeout=30, what="two fires"
    )
    first.signal(signal.SIGKILL)
    await first.exited(timeout=10)
    down_at = datetime.now(UTC)
    paged_while_up = len(watch.receiver.at("/hook"))
    [beat] = await fetch(
        pool,
        "SELECT alert_after FROM cronwarden.heartbeats WHERE schedule_id = $1",
        schedule_id,
    )

    async def paged() -> bool:
        return bool(events(watch.receiver, event="trigger"))

    # The deadline is the schedule's own: its next fire, plus the grace, plus a few passes.
    paged_in_time = await within(
        paged, timeout=2 + GRACE.seconds + 20, what="the page for the outage"
    )
    await wait_for(
        lambda: clock_past(down_at + CATCHUP + 2 * GRACE),
        timeout=CATCHUP.seconds + 20,
        what="the outage to outlast the catchup window",
    )
    # Taken before the start: nothing can commit before the new worker exists.
    up_at = datetime.now(UTC)
    start_worker()
    await wait_for(
        lambda: fires_after(pool, schedule_id, up_at, 2), timeout=60, what="the recovery"
    )

    async def resolved() -> bool:
        return bool(events(watch.receiver, event="resolve"))

    recovered = await within(resolved, timeout=30, what="the incident to resolve")
    # Stopped before the pause: a paused schedule's heartbeat goes overdue again.
    monitor_exit = await watch.stop()
    fires = await freeze(handle, pool, cli_env, created_at)
    info = (await handle.describe()).info
    window = ["--start", iso(created_at), "--end", iso(fires.end)]
    # Frozen by a pause: replaying the paused schedule takes the flag.
    replay = await cli_json(
        cli_env, "backfill", "run", schedule_id, *window, "--yes", "--include-paused"
    )
    listed_after = await listed_by_plan(cli_env, schedule_id, created_at, fires.end)

    incidents = await fetch(
        pool, "SELECT * FROM cronwarden.incidents WHERE schedule_id = $1", schedule_id
    )
    triggers = events(watch.receiver, event="trigger")
    lost = fires.uncommitted
    first_after = next((r for r in fires.rows if r["fire_time"] > down_at), None)
    checks = []
    if not paged_in_time:
        checks.append("no page within the grace (plus a few passes)")
    if not recovered:
        checks.append("the incident did not resolve after the recovery")
    if paged_while_up:
        checks.append("paged while the worker was up")
    if len(lost) < 3:
        checks.append(f"the outage lost only {len(lost)} fires")
    if info.num_actions_skipped_overlap < len(lost):
        checks.append(f"{info.num_actions_skipped_overlap} skipped by overlap, {len(lost)} lost")
    if info.num_actions_missed_catchup_window:
        checks.append(f"{info.num_actions_missed_catchup_window} missed the catchup window")
    if first_after is None or first_after["committed_at"] < up_at:
        checks.append("the first fire after the kill did not wait for the new worker")
    if fires.listed != lost:
        checks.append(f"backfill plan listed {sorted(fires.listed)}, lost were {sorted(lost)}")
    if replay["summary"] != {REPLAYED: len(lost), ALREADY_DONE: 0, OVERLAP_LOCKED: 0, "failed": 0}:
        checks.append(f"backfill run did not replay the lost keys once: {replay['summary']}")
    if listed_after:
        checks.append(f"backfill plan still lists {sorted(listed_after)} after the run")
    if len(incidents) != 1 or not (
        beat["alert_after"] <= incidents[0]["opened_at"] <= beat["alert_after"] + PASSES
    ):
        opened = [i["opened_at"] for i in incidents]
        checks.append(
            f"incidents opened {opened}, not one within {PASSES} of {beat['alert_after']}"
        )
    if [b["incident_id"] for b in triggers] != [i["id"] for i in incidents]:
        checks.append("the incident was not paged exactly once")
    if monitor_exit != 0:
        checks.append(f"the monitor exited {monitor_exit}")
    row = await fire_row(
        pool,
        fires,
        scenario="7 all workers down > catchup window",
        pages=len(triggers),
        checks_failed=checks,
    )
    fault_table.append(row)

    assert row.duplicate_effects == 0
    assert row.missing_unlisted == 0
    assert row.effect_rows == row.fires_expected
    assert row.pages == 1
    assert row.checks_failed == [], watch.tail()
