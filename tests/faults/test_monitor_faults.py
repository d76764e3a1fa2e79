"""Scenario 9: two monitors over one database, one SIGKILLed while it sends a page, and a sink
that fails for a while before it recovers.

Each incident must reach the receiver as one page: the killed monitor's claim lapses and the
survivor sends that page again, the failed sends are retried, and nothing is sent twice. The
webhook's `X-Cronwarden-Delivery` header (one per incident, event and sink) is what a receiver
would drop repeats by, so the pages are counted per distinct delivery as well as per request.
"""

from __future__ import annotations

import asyncio
import signal
from collections import Counter
from pathlib import Path

import asyncpg
import pytest

from cronwarden.monitor.sinks.webhook import DELIVERY_HEADER
from tests.support.database import fetch
from tests.support.faults.counts import within
from tests.support.faults.fires import Watch, monitor_passes
from tests.support.faults.tally import FaultRow
from tests.support.monitor import env_for, held_mid_send, settings_for, stage_many, start_monitor
from tests.support.monitor import receiver as receiver
from tests.support.receiver import Receiver
from tests.support.waiting import wait_for

pytestmark = pytest.mark.integration

INCIDENTS = 2  # below the system-incident threshold: one page per schedule
SINK_FAILURES = [500, 503, 502]


async def test_two_monitors_one_killed_mid_send_and_a_failing_sink_page_each_incident_once(
    database: str,
    pool: asyncpg.Pool,
    schedule_id: str,
    receiver: Receiver,
    fault_table: list[FaultRow],
    tmp_path: Path,
) -> None:
    await stage_many(pool, schedule_id, INCIDENTS)
    # A claim lapses after send timeout + 2 x database timeout + 5 s (17 s): the killed
    # monitor's page waits that long.
    env = env_for(
        settings_for(
            database,
            receiver,
            monitor_send_timeout_seconds=2,
            monitor_database_timeout_seconds=5,
        )
    )
    receiver.hold.set()
    logs = [tmp_path / "monitor-1.log", tmp_path / "monitor-2.log"]
    monitors = [await start_monitor(env, log) for log in logs]
    try:

        async def sending() -> asyncpg.Record | None:  # the row whose send is held
            held = receiver.at("/hook")
            if not held:
                return None
            # The delivery header names the incident, event and sink: the row of this send.
            _, incident_id, event, sink = held[0].headers[DELIVERY_HEADER].split(":")
            rows = await fetch(
                pool,
                "SELECT * FROM cronwarden.notifications"
                " WHERE incident_id = $1 AND event = $2 AND sink = $3",
                int(incident_id),
                event,
                sink,
            )
            return rows[0] if rows else None

        held = await wait_for(sending, timeout=30, what="a monitor to send", interval=0.05)
        assert held is not None
        # The monitor id is host:pid:nonce: kill exactly the one holding the claim.
        sender_pid = int(held["claimed_by"].split(":")[1])
        [victim] = [m for m in monitors if m.pid == sender_pid]
        [(survivor, survivor_log)] = [
            (m, g) for m, g in zip(monitors, logs, strict=True) if m is not victim
        ]
        victim.send_signal(signal.SIGKILL)
        await asyncio.wait_for(victim.wait(), timeout=10)
        # Read before the survivor can touch it (the claim has not lapsed): the victim died
        # holding its claim, mid-send, with nothing recorded.
        [at_kill] = await fetch(
            pool, "SELECT * FROM cronwarden.notifications WHERE id = $1", held["id"]
        )
        # The sink fails a few more times, then recovers.
        receiver.script.extend(SINK_FAILURES)
        receiver.hold.clear()
        receiver.release.set()

        async def all_delivered() -> bool:
            rows = await fetch(pool, "SELECT delivered_at FROM cronwarden.notifications")
            return len(rows) == INCIDENTS and all(r["delivered_at"] for r in rows)

        delivered = await within(all_delivered, timeout=60, what="every page delivered")
        passes = await monitor_passes(pool)

        async def more_passes() -> bool:
            return await monitor_passes(pool) >= passes + 5

        # A few more passes: a page sent again after delivery would show up now.
        await wait_for(more_passes, timeout=30, what="more passes of the survivor")
        survivor_exit = await Watch(survivor, receiver, survivor_log).stop()
    finally:
        for proc in monitors:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()

    requests = receiver.at("/hook")
    accepted = [r for r in requests if r.accepted]
    deliveries = Counter(r.headers.get(DELIVERY_HEADER) for r in accepted)
    paged = {r.body["incident_id"] for r in accepted}
    incidents = await fetch(pool, "SELECT id FROM cronwarden.incidents")
    [killed] = await fetch(
        pool, "SELECT attempts, claimed_by FROM cronwarden.notifications WHERE id = $1", held["id"]
    )
    failed = [r for r in requests if r.status is not None and r.status >= 500]
    checks = []
    if not delivered:
        checks.append("not every page was delivered")
    if paged != {i["id"] for i in incidents} or len(incidents) != INCIDENTS:
        checks.append(f"incidents {sorted(i['id'] for i in incidents)}, paged {sorted(paged)}")
    if len(deliveries) != INCIDENTS:
        checks.append(f"{len(deliveries)} distinct deliveries for {INCIDENTS} incidents")
    if at_kill["claimed_by"] != held["claimed_by"] or not held_mid_send(
        at_kill, attempts=held["attempts"]
    ):
        checks.append(f"the killed monitor did not die mid-send holding its claim: {at_kill}")
    if killed["attempts"] < 2 or killed["claimed_by"] == held["claimed_by"]:
        checks.append("the killed monitor's page was not sent again by the survivor")
    if receiver.script or len(failed) < len(SINK_FAILURES):
        checks.append("the sink's failures were not all met")
    if survivor_exit != 0:
        checks.append(f"the surviving monitor exited {survivor_exit}")
    row = FaultRow(
        scenario="9 monitor killed mid-send, sink failing",
        fires_expected=None,
        outbox_rows=None,
        effect_rows=None,
        duplicate_effects=len(accepted) - len(deliveries),
        missing_unlisted=None,
        pages=len(accepted),
        checks_failed=checks,
    )
    fault_table.append(row)

    tails = "".join(log.read_text(errors="replace")[-2000:] for log in logs)
    assert row.pages == INCIDENTS, tails
    assert row.duplicate_effects == 0, tails
    assert row.checks_failed == [], tails
