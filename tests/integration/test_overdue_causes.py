"""An overdue page says what to do next: the likely cause, from Temporal when the incident
opens, and the exact `backfill run` command that closes the gap, from the heartbeat row alone,
so it goes out even while Temporal cannot be reached. Real Postgres, a real Temporal dev server
and a real local HTTP receiver.

Before `monitor.gap_causes`, a page carried neither.
"""

from __future__ import annotations

from datetime import UTC, datetime

import asyncpg
import pytest
from temporalio.client import Client

from cronwarden.activities.contract import format_fire_time
from cronwarden.backfill.causes import NO_WORKER_POLLING
from cronwarden.embedded import free_port
from cronwarden.monitor.pauses import PauseCheck, PauseCheckPolicy
from cronwarden.schedules.apply import apply_definitions
from cronwarden.store import heartbeats
from cronwarden.store.incidents import NEVER_RAN, OVERDUE
from tests.support.monitor import events, incidents_of, monitoring, passes, stage
from tests.support.monitor import receiver as receiver
from tests.support.outage import terminate_running
from tests.support.receiver import Receiver
from tests.support.schedules import definition, new_id
from tests.support.waiting import wait_for

pytestmark = pytest.mark.integration


def pause_check(client: Client) -> PauseCheck:
    """The monitor's Temporal connection: the test's client, already connected."""

    async def connect() -> Client:
        return client

    return PauseCheck(connect)


def unreachable_temporal() -> PauseCheck:
    """A Temporal address nothing listens on."""
    address = f"127.0.0.1:{free_port()}"
    return PauseCheck(
        lambda: Client.connect(address), PauseCheckPolicy(timeout=2, reconnect_every=60)
    )


def command_span(command: str, schedule_id: str) -> tuple[str, str]:
    """The `--start` and `--end` of a `backfill run` command for `schedule_id`."""
    head = f"cronwarden backfill run {schedule_id} --start "
    assert command.startswith(head), command
    start, rest = command[len(head) :].split(" --end ", 1)
    return start, rest.split(" ")[0]


async def test_a_schedule_no_worker_polls_for_pages_that_cause_and_the_backfill_command(
    client: Client, pool: asyncpg.Pool, database: str, task_queue: str, receiver: Receiver
) -> None:
    sid = new_id("page-nopoll")
    # No worker on the task queue: the first fire's run waits, the next are skipped behind it.
    await apply_definitions(client, pool, [definition(sid)], task_queue=task_queue)
    handle = client.get_schedule_handle(sid)
    try:

        async def skipped() -> bool:
            return (await handle.describe()).info.num_actions_skipped_overlap >= 1

        await wait_for(skipped, timeout=30, what="a fire skipped behind the waiting run")
        created = (await handle.describe()).info.created_at
        async with pool.acquire() as conn:
            # Past its grace now (the definition's minute is not waited out), and expected
            # from the schedule's creation: the gap begins with the first fire, whose run no
            # worker takes, however long the apply took against the every-2s spec.
            await conn.execute(
                "UPDATE cronwarden.heartbeats SET grace = interval '0', next_expected_at = $2"
                " WHERE schedule_id = $1",
                sid,
                created,
            )
            beat = await heartbeats.get(conn, sid)
        assert beat is not None and beat["next_expected_at"] is not None
        async with monitoring(database, receiver, pauses=pause_check(client)) as monitor:
            await passes(monitor, 1)
    finally:
        await handle.pause()
        await terminate_running(client, handle)
        await handle.delete()
    [page] = events(receiver, schedule_id=sid, event="trigger")
    assert page["kind"] in (NEVER_RAN, OVERDUE)
    assert f"no worker polls the task queue '{task_queue}'" in page["cause"]
    start, end = command_span(page["next_command"], sid)
    assert start == format_fire_time(beat["next_expected_at"])
    assert end >= start
    [incident] = await incidents_of(pool, sid)
    details = incident["details"]
    assert details["cause_kind"] == NO_WORKER_POLLING
    assert details["cause"] == page["cause"]
    assert details["next_command"] == page["next_command"]


async def test_with_temporal_unreachable_the_page_still_carries_the_command_and_no_cause(
    pool: asyncpg.Pool, database: str, receiver: Receiver
) -> None:
    await stage(pool, "nightly-export", late="1 hour")
    async with pool.acquire() as conn:
        beat = await heartbeats.get(conn, "nightly-export")
    assert beat is not None
    async with monitoring(database, receiver, pauses=unreachable_temporal()) as monitor:
        report = await monitor.run_pass()
    assert report.opened == 1 and report.delivered == 1
    [page] = events(receiver, schedule_id="nightly-export", event="trigger")
    assert page["kind"] == OVERDUE
    assert page["cause"] is None
    start, end = command_span(page["next_command"], "nightly-export")
    assert start == format_fire_time(beat["next_expected_at"])
    assert end > start
    assert datetime.now(UTC) > beat["next_expected_at"]
