"""A fire Temporal dropped beyond the catchup window is named as such, and Temporal's own count
of them agrees with the slots named.

The Temporal dev server is stopped for longer than the schedule's catchup window (Temporal's
floor, 10 s) and started again on the same SQLite file: the fires of the outage's start are
older than the window when the scheduler wakes, so Temporal drops them and only counts them
(`num_actions_missed_catchup_window`). The schedule is `allow_all` (its job is read-only), so
no overlap policy can explain a slot, and no worker polls its queue, so nothing commits: each
dropped slot has no run at all.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import asyncpg
import pytest
from temporalio.client import Client

from cronwarden.backfill.audit import audit
from cronwarden.backfill.causes import MISSED_CATCHUP, NO_WORKER_POLLING
from cronwarden.backfill.plan import load_managed
from cronwarden.backfill.window import Window
from cronwarden.embedded import EmbeddedTemporal
from cronwarden.schedules.apply import apply_definitions
from tests.support.outage import terminate_running
from tests.support.schedules import definition, new_id
from tests.support.waiting import clock_past, wait_for

pytestmark = pytest.mark.integration

# Longer than the 10 s catchup window by a few fires of `every: 2s`.
OUTAGE = timedelta(seconds=16)


async def test_fires_dropped_beyond_the_catchup_window_are_named_and_match_temporals_count(
    client: Client, pool: asyncpg.Pool, task_queue: str, temporal_server: EmbeddedTemporal
) -> None:
    sid = new_id("cause-catchup")
    defn = definition(sid, job="noop-digest", overlap="allow_all", catchup_window="10s")
    await apply_definitions(client, pool, [defn], task_queue=task_queue)
    handle = client.get_schedule_handle(sid)
    try:
        first_fires = datetime.now(UTC) + timedelta(seconds=3)
        await wait_for(lambda: clock_past(first_fires), timeout=5, what="a fire or two")
        try:
            await asyncio.to_thread(temporal_server.stop)
            stopped_at = datetime.now(UTC)
            await wait_for(lambda: clock_past(stopped_at + OUTAGE), timeout=30, what="the outage")
            await asyncio.to_thread(temporal_server.start)
        finally:
            # Every later test of the session needs this server.
            if not temporal_server.running:
                await asyncio.to_thread(temporal_server.start)

        async def counted() -> int:
            return (await handle.describe()).info.num_actions_missed_catchup_window

        await wait_for(counted, timeout=30, what="Temporal counting the dropped fires")
        await handle.pause(note="test: stop firing")
        schedule = await load_managed(client, sid)
        # A second before the pause: every fire up to then was taken (and counted) by Temporal.
        end = datetime.now(UTC).replace(microsecond=0) - timedelta(seconds=1)
        window = Window(schedule.created_at.replace(microsecond=0), end)
        result = await audit(client, pool, schedule, window, now=end)
        dropped = schedule.description.info.num_actions_missed_catchup_window
    finally:
        await terminate_running(client, handle)
        await handle.delete()
    assert result.causes is not None
    groups = {(g.cause, g.in_flight): g for g in result.causes.groups}
    missed = groups[(MISSED_CATCHUP, False)]
    assert missed.count == dropped
    first_missed = datetime.fromtimestamp(missed.first_s, UTC)
    assert stopped_at - timedelta(seconds=2) <= first_missed <= stopped_at + OUTAGE
    assert "Temporal was down or behind longer than the catchup window" in missed.text
    assert (NO_WORKER_POLLING, True) in groups  # the runs Temporal did start wait for a worker
    [counts] = [t for t in result.causes.temporal if t["cause"] == MISSED_CATCHUP]
    assert counts["agree"] is True
