"""The absence monitor against a real Postgres, paging a real local HTTP receiver.

Heartbeat rows are written with SQL, in database time, to stage each situation; the monitor is
stepped one pass at a time (in process, or `cronwarden monitor` as a subprocess)."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import signal
import socket
import urllib.request
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
import pytest
from pydantic import SecretStr
from temporalio.client import Client
from temporalio.worker import Worker

from cronwarden.config import Settings
from cronwarden.embedded import free_port
from cronwarden.monitor.db_alert import default_state_file
from cronwarden.monitor.messages import TRIGGER, incident_message
from cronwarden.monitor.process import run_monitor
from cronwarden.monitor.sinks.slack import SlackSink
from cronwarden.schedules.apply import apply_definitions
from cronwarden.store import incidents, locks, notifications, runs, watch
from cronwarden.store.pool import connect
from cronwarden.store.runs import CommitOutcome
from tests.support.cli import cli
from tests.support.database import fetch
from tests.support.monitor import (
    RECOVERED,
    ROUTING_KEY,
    SECRET,
    SLACK_PATH,
    due_now,
    env_for,
    events,
    heartbeat_lands,
    held_mid_send,
    incidents_of,
    monitoring,
    passes,
    settings_for,
    stage,
    stage_many,
    start_monitor,
    waiting_on_locks,
)
from tests.support.monitor import receiver as receiver
from tests.support.receiver import Receiver
from tests.support.runs import start_run
from tests.support.schedules import definition
from tests.support.waiting import wait_for

pytestmark = pytest.mark.integration


async def stage_and_watch(
    database: str,
    pool: asyncpg.Pool,
    receiver: Receiver,
    schedule_id: str,
    *,
    n: int = 2,
    **row: Any,
) -> None:
    """Stage one heartbeat row, then let a monitor make `n` passes over it."""
    await stage(pool, schedule_id, **row)
    async with monitoring(database, receiver) as monitor:
        await passes(monitor, n)


# What happens to a schedule after its incident opened, and how the incident must resolve.
CHANGES = {
    "recovered": RECOVERED,
    "paused": "UPDATE cronwarden.heartbeats SET paused = true WHERE schedule_id = $1",
    "schedule-deleted": "DELETE FROM cronwarden.heartbeats WHERE schedule_id = $1",
}


async def test_an_overdue_schedule_pages_exactly_once_over_many_passes(
    database: str, pool: asyncpg.Pool, receiver: Receiver, schedule_id: str
) -> None:
    await stage_and_watch(database, pool, receiver, schedule_id, n=4)
    [page] = receiver.at("/hook")
    body = page.body
    assert body["event"] == "trigger"
    assert body["kind"] == "overdue"
    assert body["schedule_id"] == schedule_id
    assert body["dedup_key"] == f"cronwarden:{schedule_id}"
    expected = hmac.new(SECRET.encode(), page.raw, hashlib.sha256).hexdigest()
    assert page.headers["X-Cronwarden-Signature"] == f"sha256={expected}"
    [incident] = await incidents_of(pool, schedule_id)
    assert incident["resolved_at"] is None
    assert body["incident_id"] == incident["id"]


@pytest.mark.parametrize("resolution", list(CHANGES))
async def test_an_incident_resolves_with_one_resolve_page_on_heartbeat_pause_or_delete(
    database: str, pool: asyncpg.Pool, receiver: Receiver, schedule_id: str, resolution: str
) -> None:
    await stage(pool, schedule_id)
    async with monitoring(database, receiver) as monitor:
        await passes(monitor, 2)
        async with pool.acquire() as conn:
            await conn.execute(CHANGES[resolution], schedule_id)
        await passes(monitor, 3)
    assert [b["event"] for b in events(receiver)] == ["trigger", "resolve"]
    [incident] = await incidents_of(pool, schedule_id)
    assert incident["resolution"] == resolution and incident["resolved_at"] is not None


async def test_a_schedule_that_never_ran_pages_as_never_ran(
    database: str, pool: asyncpg.Pool, receiver: Receiver, schedule_id: str
) -> None:
    await stage_and_watch(database, pool, receiver, schedule_id, succeeded=False)
    [body] = events(receiver)
    assert body["kind"] == "never-ran" and body["schedule_id"] == schedule_id
    assert body["details"]["last_success_at"] is None


async def test_an_operator_paused_schedule_does_not_page(
    database: str, pool: asyncpg.Pool, receiver: Receiver, schedule_id: str
) -> None:
    await stage_and_watch(database, pool, receiver, schedule_id, paused=True)
    assert receiver.requests == []
    assert await incidents_of(pool, schedule_id) == []


async def hold_lease_past_deadline(pool: asyncpg.Pool, schedule_id: str) -> None:
    """A run that took its lease 20 minutes ago, still renews it, and should have ended."""
    async with pool.acquire() as conn:
        await conn.execute(
            """
            INSERT INTO cronwarden.locks
                   (name, holder, token, expires_at, acquired_at, logical_key, schedule_id,
                    run_deadline)
            VALUES ($1, 'wf/run/1', nextval('cronwarden.lock_tokens'), now() + interval '1 min',
                    now() - interval '20 min', $2, $3, now() - interval '5 min')
            """,
            f"schedule:{schedule_id}",
            f"{schedule_id}@2026-03-01T11:00:00Z",
            schedule_id,
        )


async def release_lease(pool: asyncpg.Pool, schedule_id: str) -> None:
    async with pool.acquire() as conn:
        await conn.execute(
            "UPDATE cronwarden.locks SET holder = NULL, expires_at = now() WHERE name = $1",
            f"schedule:{schedule_id}",
        )


async def test_a_run_holding_its_lease_past_timeout_and_grace_pages_running_too_long(
    database: str, pool: asyncpg.Pool, receiver: Receiver, schedule_id: str
) -> None:
    # The heartbeat is fine (its next fire is ahead): only the lease says something is wrong.
    await stage(pool, schedule_id, late="-1 hour")
    await hold_lease_past_deadline(pool, schedule_id)
    async with monitoring(database, receiver) as monitor:
        await passes(monitor, 2)
        [body] = events(receiver)
        assert body["kind"] == "running-too-long"
        assert body["details"]["logical_key"] == f"{schedule_id}@2026-03-01T11:00:00Z"
        await release_lease(pool, schedule_id)  # the run finishes
        await passes(monitor, 2)
    assert [b["event"] for b in events(receiver)] == ["trigger", "resolve"]


async def test_a_run_too_long_that_leaves_the_schedule_overdue_pages_again_as_overdue(
    database: str, pool: asyncpg.Pool, receiver: Receiver, schedule_id: str
) -> None:
    await stage(pool, schedule_id, late="-1 hour")
    await hold_lease_past_deadline(pool, schedule_id)
    async with monitoring(database, receiver) as monitor:
        await passes(monitor, 2)
        await release_lease(pool, schedule_id)  # the run ends; the schedule missed its fires
        async with pool.acquire() as conn:
            await conn.execute(
                "UPDATE cronwarden.heartbeats SET next_expected_at = now() - interval '1 hour'"
                " WHERE schedule_id = $1",
                schedule_id,
            )
        await passes(monitor, 2)
    assert [(b["kind"], b["event"]) for b in events(receiver)] == [
        ("running-too-long", "trigger"),
        ("running-too-long", "resolve"),
        ("overdue", "trigger"),
    ]
    first, second = await incidents_of(pool, schedule_id)
    assert first["resolution"] == "kind-changed" and second["resolved_at"] is None


async def test_the_guard_records_the_runs_deadline_on_its_lease(
    client: Client, pool: asyncpg.Pool, task_queue: str, worker: Worker, schedule_id: str
) -> None:
    handle = await start_run(
        client, task_queue, schedule_id, args={"sleep": 30}, timeout=40.0, lock_ttl=10.0
    )

    async def lease() -> list[asyncpg.Record]:
        return await fetch(
            pool,
            "SELECT * FROM cronwarden.locks WHERE name = $1 AND holder IS NOT NULL",
            f"schedule:{schedule_id}",
        )

    try:
        [row] = await wait_for(lease, timeout=30, what="the run to take its lease")
    finally:
        await handle.cancel()
    assert row["schedule_id"] == schedule_id
    # timeout (40 s) + the schedule's heartbeat grace (60 s in start_run)
    assert row["run_deadline"] - row["acquired_at"] == timedelta(seconds=100)


async def test_acquire_without_a_deadline_leaves_the_lease_unwatched(pool: asyncpg.Pool) -> None:
    async with pool.acquire() as conn:
        got = await locks.acquire(
            conn, name="free", holder="h", ttl_seconds=10, logical_key="x@2026-01-01T00:00:00Z"
        )
        assert got.token is not None
        row = await conn.fetchrow("SELECT * FROM cronwarden.locks WHERE name = 'free'")
    assert row["run_deadline"] is None and row["schedule_id"] is None


NEXT_FIRE = datetime(2099, 1, 1, tzinfo=UTC)


async def commit_a_run(pool: asyncpg.Pool, schedule_id: str) -> CommitOutcome:
    """What the guard's commit does, for a fresh lease on the schedule."""
    lock = f"schedule:{schedule_id}"
    fire = datetime(2026, 3, 1, 11, 0, tzinfo=UTC)
    key = f"{schedule_id}@2026-03-01T11:00:00Z"
    async with pool.acquire() as conn:
        got = await locks.acquire(conn, name=lock, holder="h", ttl_seconds=10, logical_key=key)
        assert got.token is not None
        return await runs.commit_run(
            conn,
            runs.CommitRecord(
                lock_name=lock,
                token=got.token,
                logical_key=key,
                schedule_id=schedule_id,
                fire_time=fire,
                result={},
                attempt=1,
                worker="w",
                args_digest="d",
                workflow_id=None,
                run_id=None,
                grace=timedelta(minutes=1),
                write_heartbeat=True,
                # The worker's cached next fires: the statement takes the first after now().
                next_fire_times=[fire + timedelta(hours=1), NEXT_FIRE],
            ),
        )


async def test_a_runs_commit_never_recreates_the_heartbeat_of_a_deleted_schedule(
    pool: asyncpg.Pool, schedule_id: str
) -> None:
    # `schedules delete` removed the row after the guard saw the schedule in Temporal.
    outcome = await commit_a_run(pool, schedule_id)
    assert outcome.fenced and outcome.recorded
    assert (
        await fetch(pool, "SELECT * FROM cronwarden.heartbeats WHERE schedule_id = $1", schedule_id)
        == []
    )


async def test_a_runs_commit_updates_the_heartbeat_row_that_apply_created(
    pool: asyncpg.Pool, schedule_id: str
) -> None:
    await stage(pool, schedule_id)
    await commit_a_run(pool, schedule_id)
    [beat] = await fetch(
        pool, "SELECT * FROM cronwarden.heartbeats WHERE schedule_id = $1", schedule_id
    )
    assert beat["last_logical_key"] == f"{schedule_id}@2026-03-01T11:00:00Z"
    assert beat["next_expected_at"] == NEXT_FIRE


async def test_five_schedules_overdue_together_send_one_system_page_and_one_resolve(
    database: str, pool: asyncpg.Pool, receiver: Receiver, schedule_id: str
) -> None:
    late = await stage_many(pool, schedule_id, 5)
    await stage(pool, f"{schedule_id}-fine", late="-1 hour")
    async with monitoring(
        database, receiver, pagerduty_routing_key=ROUTING_KEY, pagerduty_url=receiver.url("/pd")
    ) as monitor:
        await passes(monitor, 3)
        [page] = events(receiver)
        assert page["kind"] == "system" and page["schedule_id"] is None
        assert sorted(s["schedule_id"] for s in page["schedules"]) == late
        [pd] = events(receiver, "/pd")
        assert pd["dedup_key"] == "cronwarden:system"
        async with pool.acquire() as conn:  # what `status` lists: the system incident first
            listed = await incidents.open_incidents(conn)
        assert [i["schedule_id"] for i in listed] == [None, *late]
        assert {i["parent_id"] for i in listed[1:]} == {listed[0]["id"]}
        assert pd["payload"]["severity"] == "critical"
        for sid in late:
            await heartbeat_lands(pool, sid)
        await passes(monitor, 3)
    assert [b["event"] for b in events(receiver)] == ["trigger", "resolve"]
    assert [b["event_action"] for b in events(receiver, "/pd")] == ["trigger", "resolve"]
    [system] = await incidents_of(pool, None)
    assert system["resolution"] == "members-resolved"


async def open_system_row(pool: asyncpg.Pool, *, resolved: bool = False) -> int:
    async with pool.acquire() as conn:
        system_id: int = await conn.fetchval(
            "INSERT INTO cronwarden.incidents (schedule_id, kind, summary, resolved_at)"
            " VALUES (NULL, 'system', 'staged', CASE WHEN $1 THEN now() END) RETURNING id",
            resolved,
        )
    return system_id


async def test_resolving_a_system_incident_waits_for_a_replica_adding_members_under_it(
    database: str, pool: asyncpg.Pool, schedule_id: str
) -> None:
    # Two replicas interleaved by hand: B joins the open system incident S (no member yet, so
    # A finds it finished) and has not committed when A tries to resolve S.
    system_id = await open_system_row(pool)
    await stage(pool, schedule_id)
    replica_b = await connect(database)
    replica_a = await connect(database)
    try:
        joining = replica_b.transaction()
        await joining.start()
        joined, created = await incidents.open_system(replica_b, summary="s", details={})
        assert (joined, created) == (system_id, None)
        member = await incidents.open_incident(
            replica_b,
            schedule_id=schedule_id,
            kind="overdue",
            summary="late",
            details={},
            parent_id=system_id,
        )
        assert member is not None

        async def resolve_in_a() -> list[dict[str, Any]]:
            async with replica_a.transaction():
                return await incidents.resolve_finished_systems(replica_a)

        resolving = asyncio.create_task(resolve_in_a())
        a_pid = replica_a.get_server_pid()

        async def a_waits_for_b() -> bool:
            async with pool.acquire() as conn:
                return bool(
                    await conn.fetchval(
                        "SELECT wait_event_type = 'Lock' FROM pg_stat_activity WHERE pid = $1",
                        a_pid,
                    )
                )

        await wait_for(a_waits_for_b, timeout=10, what="A to wait on B's lock", interval=0.05)
        await joining.commit()
        assert await asyncio.wait_for(resolving, timeout=10) == []
    finally:
        await replica_b.close()
        await replica_a.close()
    [system] = await incidents_of(pool, None)
    assert system["resolved_at"] is None


async def test_an_open_incident_that_nothing_pages_for_pages_on_its_own(
    database: str, pool: asyncpg.Pool, receiver: Receiver, schedule_id: str
) -> None:
    # What the races around a system incident could leave behind: a member open under a
    # resolved parent, and an incident with no parent whose trigger was never queued.
    orphan, parentless = f"{schedule_id}-orphan", f"{schedule_id}-parentless"
    closed = await open_system_row(pool, resolved=True)
    for sid, parent in ((orphan, closed), (parentless, None)):
        await stage(pool, sid)
        async with pool.acquire() as conn:
            await conn.execute(
                "INSERT INTO cronwarden.incidents (schedule_id, kind, summary, parent_id)"
                " VALUES ($1, 'overdue', 'staged', $2)",
                sid,
                parent,
            )
    async with monitoring(database, receiver) as monitor:
        await passes(monitor, 3)
        assert sorted(b["schedule_id"] for b in events(receiver)) == [orphan, parentless]
        for sid in (orphan, parentless):
            await heartbeat_lands(pool, sid)
        await passes(monitor, 2)
    assert sorted((b["schedule_id"], b["event"]) for b in events(receiver)) == [
        (orphan, "resolve"),
        (orphan, "trigger"),
        (parentless, "resolve"),
        (parentless, "trigger"),
    ]


async def test_slack_and_pagerduty_receive_their_documented_formats(
    database: str, pool: asyncpg.Pool, receiver: Receiver, schedule_id: str
) -> None:
    await stage(pool, schedule_id)
    async with monitoring(
        database,
        receiver,
        slack_webhook_url=receiver.url(SLACK_PATH),
        pagerduty_routing_key=ROUTING_KEY,
        pagerduty_url=receiver.url("/pd"),
    ) as monitor:
        await passes(monitor)
        await heartbeat_lands(pool, schedule_id)
        await passes(monitor, 2)
    trigger, resolve = events(receiver, "/pd")
    assert trigger["routing_key"] == ROUTING_KEY
    assert trigger["event_action"] == "trigger"
    assert trigger["dedup_key"] == f"cronwarden:{schedule_id}"
    assert trigger["payload"]["source"] == "cronwarden"
    assert trigger["payload"]["severity"] in {"critical", "error", "warning", "info"}
    assert schedule_id in trigger["payload"]["summary"]
    assert resolve == {
        "routing_key": ROUTING_KEY,
        "event_action": "resolve",
        "dedup_key": f"cronwarden:{schedule_id}",
    }
    slack = events(receiver, SLACK_PATH)
    assert len(slack) == 2
    for body in slack:
        assert set(body) == {"text", "blocks"}
        assert body["blocks"][0]["text"]["type"] == "mrkdwn"
    assert "overdue" in slack[0]["text"] and "resolved" in slack[1]["text"]


async def test_a_sink_answering_500_then_200_gets_the_page_once(
    database: str, pool: asyncpg.Pool, receiver: Receiver, schedule_id: str
) -> None:
    await stage(pool, schedule_id)
    receiver.script.extend([500, 500])
    async with monitoring(database, receiver) as monitor:

        async def delivered() -> bool:
            await passes(monitor)
            return bool(events(receiver))

        await wait_for(delivered, timeout=20, what="the page after two 500s", interval=0.1)
        await passes(monitor, 3)
    assert [r.status for r in receiver.at("/hook")] == [500, 500, 200]
    [row] = await fetch(pool, "SELECT * FROM cronwarden.notifications")
    assert row["attempts"] == 3 and row["delivered_at"] is not None
    assert monitor.metrics.failed["webhook"] == 2 and monitor.metrics.sent["webhook"] == 1


async def test_a_resolve_waits_until_its_trigger_reached_the_sink(
    database: str, pool: asyncpg.Pool, receiver: Receiver, schedule_id: str
) -> None:
    await stage(pool, schedule_id)
    receiver.script.extend([500])
    # A backoff far longer than the test: only `due_now` makes the failed trigger due again.
    slow: dict[str, Any] = {"monitor_retry_base_seconds": 3600, "monitor_retry_max_seconds": 3600}
    async with monitoring(database, receiver, **slow) as monitor:
        await passes(monitor)  # the trigger fails and backs off
        await heartbeat_lands(pool, schedule_id)
        await passes(monitor, 2)  # the resolve is due, but its trigger is not delivered yet
        assert [r.status for r in receiver.at("/hook")] == [500]
        await due_now(pool)
        await passes(monitor)
    assert [b["event"] for b in events(receiver)] == ["trigger", "resolve"]


async def test_a_late_resolve_of_one_incident_never_closes_the_next_incidents_page(
    database: str, pool: asyncpg.Pool, receiver: Receiver, schedule_id: str
) -> None:
    # PagerDuty folds every incident of a schedule under one dedup_key: incident 1's resolve,
    # delivered after incident 2's trigger, would close the page incident 2 needs.
    await stage(pool, schedule_id)
    only_pd: dict[str, Any] = {
        "alert_webhook_url": None,
        "pagerduty_routing_key": ROUTING_KEY,
        "pagerduty_url": receiver.url("/pd"),
        "monitor_retry_base_seconds": 3600,
        "monitor_retry_max_seconds": 3600,
    }
    async with monitoring(database, receiver, **only_pd) as monitor:
        await passes(monitor)  # incident 1's trigger is delivered
        receiver.script.extend([500])
        await heartbeat_lands(pool, schedule_id)
        await passes(monitor)  # incident 1's resolve fails and backs off
        async with pool.acquire() as conn:  # the schedule goes overdue again
            await conn.execute(
                "UPDATE cronwarden.heartbeats SET next_expected_at = now() - interval '1 hour'"
                " WHERE schedule_id = $1",
                schedule_id,
            )
        await passes(monitor, 2)  # incident 2 opens; its trigger waits for the resolve
        assert len(await incidents_of(pool, schedule_id)) == 2
        assert [b["event_action"] for b in events(receiver, "/pd")] == ["trigger"]
        await due_now(pool)
        await passes(monitor)
    assert [b["event_action"] for b in events(receiver, "/pd")] == [
        "trigger",
        "resolve",
        "trigger",
    ]
    assert {b["dedup_key"] for b in events(receiver, "/pd")} == {f"cronwarden:{schedule_id}"}


async def test_a_sink_url_without_a_scheme_is_refused_at_start_without_echoing_it(
    database: str, receiver: Receiver
) -> None:
    values = settings_for(database, receiver, slack_webhook_url="hooks.example/slack-token-5d1e")
    result = await cli(env_for(values), "monitor", "--once")
    out = result.stdout + result.stderr
    assert result.code == 2, out
    assert "CRONWARDEN_SLACK_WEBHOOK_URL" in out and "http" in out
    assert "slack-token-5d1e" not in out and "Traceback" not in out
    assert receiver.requests == []


async def test_a_sink_that_raises_fails_its_own_rows_and_the_pass_goes_on(
    database: str, pool: asyncpg.Pool, receiver: Receiver, schedule_id: str
) -> None:
    await stage(pool, schedule_id)
    async with monitoring(database, receiver, monitor_ping_url=receiver.url("/ping")) as monitor:
        # A URL the HTTP client refuses with an error that quotes it (settings would refuse it).
        monitor.sinks["slack"] = SlackSink(SecretStr("no-scheme/slack-token-5d1e"))
        await passes(monitor, 2)
    assert [b["event"] for b in events(receiver)] == ["trigger"]
    assert len(receiver.at("/ping")) == 2
    [failed] = await fetch(pool, "SELECT * FROM cronwarden.notifications WHERE sink = 'slack'")
    assert failed["delivered_at"] is None and failed["claimed_until"] is None
    assert failed["last_error"] == "UnsupportedProtocol"
    [state] = await fetch(pool, "SELECT * FROM cronwarden.monitor_state")
    assert state["passes"] == 2


async def test_delivery_in_one_pass_stops_once_its_budget_is_spent(
    database: str, pool: asyncpg.Pool, receiver: Receiver, schedule_id: str
) -> None:
    await stage_many(pool, schedule_id, 5)
    receiver.hold.set()  # every send hangs until its timeout
    # Budget of a pass: max(interval 0.2 s, send timeout 2 s); the first send alone uses it.
    # (2 s, not less: a send starts only with half its timeout left, and on a loaded machine
    # the pass's database steps before it may take a good part of a second.)
    slow: dict[str, Any] = {
        "monitor_send_timeout_seconds": 2,
        "monitor_system_min_schedules": 100,
    }
    async with monitoring(database, receiver, **slow) as monitor:
        report = await monitor.run_pass()
    assert report.opened == 5 and report.delivered == 0
    assert len(receiver.at("/hook")) == 1
    untried = await fetch(pool, "SELECT * FROM cronwarden.notifications WHERE attempts = 0")
    assert len(untried) == 4


async def test_a_claimed_notification_is_sent_again_once_its_claim_lapses(
    database: str, pool: asyncpg.Pool, receiver: Receiver, schedule_id: str
) -> None:
    await stage(pool, schedule_id)
    async with monitoring(database, receiver) as monitor:
        async with pool.acquire() as conn:  # a replica opened it, claimed the page, then died
            opened = await incidents.open_incident(
                conn, schedule_id=schedule_id, kind="overdue", summary="late", details={}
            )
            assert opened is not None
            await notifications.enqueue(
                conn,
                incident_id=opened["id"],
                event=TRIGGER,
                sinks=monitor.sink_names,
                message=incident_message(TRIGGER, opened),
            )
            claimed = await notifications.claim_next(
                conn, claimer="dead", claim_seconds=3600, sinks=monitor.sink_names
            )
            assert claimed is not None
        await passes(monitor, 2)
        assert receiver.at("/hook") == []  # the claim still holds
        async with pool.acquire() as conn:
            await conn.execute(
                "UPDATE cronwarden.notifications SET claimed_until = now() - interval '1 second'"
            )
        await passes(monitor)
    [row] = await fetch(pool, "SELECT * FROM cronwarden.notifications")
    assert row["delivered_at"] is not None and row["attempts"] == 2
    assert row["claimed_by"] == monitor.identity
    assert len(events(receiver)) == 1


async def test_many_monitor_replicas_passing_at_once_page_each_schedule_once(
    database: str, pool: asyncpg.Pool, receiver: Receiver, schedule_id: str
) -> None:
    ids = await stage_many(pool, schedule_id, 8)
    # Keep them individual pages: the race under test is per schedule.
    extra: dict[str, Any] = {"monitor_system_min_schedules": 100}
    async with (
        monitoring(database, receiver, **extra) as a,
        monitoring(database, receiver, **extra) as b,
        monitoring(database, receiver, **extra) as c,
    ):
        for _ in range(3):
            await asyncio.gather(a.run_pass(), b.run_pass(), c.run_pass())
    paged = sorted(b["schedule_id"] for b in events(receiver))
    assert paged == sorted(ids)


async def test_two_monitor_processes_over_one_database_page_once(
    database: str, pool: asyncpg.Pool, receiver: Receiver, schedule_id: str
) -> None:
    ids = await stage_many(pool, schedule_id, 2)
    env = env_for(settings_for(database, receiver))
    # Force the overlap: EXCLUSIVE lets both processes read their snapshot (both see no open
    # incident) but holds both INSERTs until both wait. From there only the conditional
    # INSERT decides which process pages for which schedule.
    async with pool.acquire() as holder:
        blocking = holder.transaction()
        await blocking.start()
        await holder.execute("LOCK TABLE cronwarden.incidents IN EXCLUSIVE MODE")
        runs = [asyncio.create_task(cli(env, "monitor", "--once")) for _ in range(2)]
        try:
            await wait_for(
                lambda: waiting_on_locks(pool, 2), timeout=30, what="both monitors to wait"
            )
        finally:
            await blocking.rollback()
        results = await asyncio.gather(*runs)
    assert [r.code for r in results] == [0, 0], results
    assert sorted(b["schedule_id"] for b in events(receiver)) == sorted(ids)
    assert len(receiver.at("/hook")) == 2
    opened = sum(r.stderr.count('"incident.opened"') for r in results)
    assert opened == 2, results


async def test_a_monitor_killed_mid_send_delivers_the_page_once_after_restart(
    database: str, pool: asyncpg.Pool, receiver: Receiver, schedule_id: str
) -> None:
    await stage(pool, schedule_id)
    # The claim lapses after send timeout + 2 x database timeout + 5 s (17 s).
    env = env_for(
        settings_for(
            database, receiver, monitor_send_timeout_seconds=2, monitor_database_timeout_seconds=5
        )
    )
    receiver.hold.set()
    first = await start_monitor(env)

    async def sending() -> bool:
        return bool(receiver.at("/hook"))

    try:
        await wait_for(
            sending, timeout=30, what="the first monitor to start sending", interval=0.05
        )
    finally:
        first.send_signal(signal.SIGKILL)
        await first.wait()
    [row] = await fetch(pool, "SELECT * FROM cronwarden.notifications")
    # Persisted and claimed, but the sender died before it could record anything.
    assert held_mid_send(row, attempts=1), row
    receiver.hold.clear()
    receiver.release.set()

    second = await start_monitor(env)
    try:

        async def delivered() -> list[asyncpg.Record]:
            return await fetch(
                pool, "SELECT * FROM cronwarden.notifications WHERE delivered_at IS NOT NULL"
            )

        [done] = await wait_for(delivered, timeout=40, what="delivery after the restart")
        await wait_for(sending, timeout=5, what="the receiver to record the answer")
    finally:
        second.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(second.wait(), timeout=30) == 0
    assert done["attempts"] == 2
    assert len(events(receiver)) == 1
    [incident] = await incidents_of(pool, schedule_id)
    assert incident["resolved_at"] is None


async def test_a_monitor_that_cannot_reach_the_database_alerts_the_sinks_directly(
    database: str, receiver: Receiver
) -> None:
    dead = f"postgresql://postgres:db-password-4b7e@127.0.0.1:{free_port()}/nowhere"
    values = settings_for(
        dead,
        receiver,
        slack_webhook_url=receiver.url(SLACK_PATH),
        pagerduty_routing_key=ROUTING_KEY,
        pagerduty_url=receiver.url("/pd"),
    )
    result = await cli(env_for(values), "monitor", "--once")
    out = result.stdout + result.stderr
    assert result.code == 1, out
    assert "error: " in out and "Traceback" not in out
    for secret in (SECRET, ROUTING_KEY, "slack-token-5d1e", "db-password-4b7e"):
        assert secret not in out
    [page] = events(receiver)
    assert page["kind"] == "monitor-database-unreachable"
    # Its own key per host: another replica's resolve must not close this alert.
    assert events(receiver, "/pd")[0]["dedup_key"] == f"cronwarden:monitor:{socket.gethostname()}"
    assert len(events(receiver, SLACK_PATH)) == 1

    # In a long-running monitor the alert is rate-limited, not repeated every pass; once the
    # database answers again, the alert is resolved.
    async with monitoring(dead, receiver, monitor_db_alert_every_seconds=3600) as monitor:
        for _ in range(3):
            assert await monitor.step() is not None
        assert len(events(receiver)) == 2
        monitor.dsn = database
        for _ in range(2):
            assert await monitor.step() is None
    assert [(b["kind"], b["event"]) for b in events(receiver)][1:] == [
        ("monitor-database-unreachable", "trigger"),
        ("monitor-database-unreachable", "resolve"),
    ]
    default_state_file(dead).unlink(missing_ok=True)  # what the `--once` left for its successor


async def test_a_connection_the_database_dropped_does_not_page_the_database_alert(
    database: str, pool: asyncpg.Pool, receiver: Receiver
) -> None:
    async with monitoring(database, receiver) as monitor:
        await passes(monitor)
        async with pool.acquire() as conn:  # what a database restart does to pooled connections
            killed = await conn.fetchval(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
                " WHERE datname = current_database() AND pid <> pg_backend_pid()"
            )
        assert killed >= 1
        assert await monitor.step() is None
    assert receiver.requests == []


async def test_a_pass_stuck_on_a_lock_times_out_and_alerts_then_the_monitor_goes_on(
    database: str, pool: asyncpg.Pool, receiver: Receiver
) -> None:
    fast: dict[str, Any] = {
        "monitor_database_timeout_seconds": 1,
        "monitor_send_timeout_seconds": 0.5,
    }
    async with pool.acquire() as holder, monitoring(database, receiver, **fast) as monitor:
        # Another session holds a lock that the delivery part of the pass needs.
        async with holder.transaction():
            await holder.execute("LOCK TABLE cronwarden.notifications IN ACCESS EXCLUSIVE MODE")
            failed = await monitor.step()
            assert isinstance(failed, TimeoutError)
            assert [b["event"] for b in events(receiver)] == ["trigger"]
        assert await monitor.step() is None
    assert [(b["kind"], b["event"]) for b in events(receiver)] == [
        ("monitor-database-unreachable", "trigger"),
        ("monitor-database-unreachable", "resolve"),
    ]


async def test_the_monitor_records_its_liveness_and_pings_the_dead_mans_switch(
    database: str, pool: asyncpg.Pool, receiver: Receiver
) -> None:
    async with monitoring(database, receiver, monitor_ping_url=receiver.url("/ping")) as monitor:
        await passes(monitor, 3)
    [state] = await fetch(pool, "SELECT * FROM cronwarden.monitor_state")
    assert state["passes"] == 3 and state["monitor_id"] == monitor.identity
    assert len(receiver.at("/ping")) == 3


async def test_metrics_and_healthz_are_served_over_http(
    database: str, pool: asyncpg.Pool, receiver: Receiver, schedule_id: str
) -> None:
    await stage(pool, schedule_id)
    await stage(pool, f"{schedule_id}-ok", late="-1 hour")
    port = free_port()
    settings = Settings.model_validate(settings_for(database, receiver))
    stop = asyncio.Event()
    task = asyncio.create_task(
        run_monitor(settings, interval=0.2, metrics_port=port, stop=stop, handle_signals=False)
    )

    def get(path: str) -> tuple[int, str]:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as resp:
                return resp.status, resp.read().decode()
        except OSError as exc:
            return getattr(exc, "code", 0), ""

    async def scraped() -> str:
        status, text = await asyncio.to_thread(get, "/metrics")
        if status == 200 and 'cronwarden_notifications_sent_total{sink="webhook"} 1.0' in text:
            return text
        return ""

    try:
        text = await wait_for(scraped, timeout=30, what="metrics after the page went out")
        assert await asyncio.to_thread(get, "/healthz") == (200, "ok\n")
    finally:
        stop.set()
        await asyncio.wait_for(task, timeout=30)
    assert "cronwarden_schedules_overdue 1.0\n" in text
    assert "cronwarden_open_incidents 1.0\n" in text
    assert "cronwarden_monitor_database_up 1.0\n" in text
    assert f'cronwarden_schedule_seconds_since_last_success{{schedule_id="{schedule_id}"}}' in text


async def test_a_busy_metrics_port_is_one_error_naming_the_port(
    database: str, receiver: Receiver
) -> None:
    with socket.socket() as taken:
        taken.bind(("0.0.0.0", 0))
        taken.listen()
        port = taken.getsockname()[1]
        env = env_for(settings_for(database, receiver))
        result = await cli(env, "monitor", "--once", "--metrics-port", str(port))
    out = result.stdout + result.stderr
    assert result.code == 1, out
    assert "error: " in out and str(port) in out and "Traceback" not in out


async def test_the_alert_deadline_adds_a_days_grace_as_24_hours_in_a_dst_session(
    pool: asyncpg.Pool, schedule_id: str
) -> None:
    # Berlin moves its clocks forward on 2026-03-29: there '1 day' after noon UTC on the 28th
    # is only 23 hours later.
    async with pool.acquire() as conn, conn.transaction():
        await conn.execute("SET LOCAL TimeZone = 'Europe/Berlin'")
        alert_after = await conn.fetchval(
            "INSERT INTO cronwarden.heartbeats (schedule_id, next_expected_at, grace)"
            " VALUES ($1, '2026-03-28T12:00:00Z', interval '1 day') RETURNING alert_after",
            schedule_id,
        )
    assert alert_after == datetime(2026, 3, 29, 12, 0, tzinfo=UTC)


async def test_the_overdue_scan_is_an_index_range_scan(database: str, pool: asyncpg.Pool) -> None:
    # Enough rows that the planner prefers the index on its own, with fresh statistics: most
    # schedules are fine, a few are overdue, some are paused.
    async with pool.acquire() as conn:
        await conn.execute(
            """
            INSERT INTO cronwarden.heartbeats (schedule_id, next_expected_at, grace, paused)
            SELECT 'bulk-' || i,
                   now() + make_interval(secs => CASE WHEN i % 1000 = 0 THEN -7200 ELSE i END),
                   interval '1 minute', i % 10 = 5
              FROM generate_series(1, 20000) AS i
            """
        )
        await conn.execute("ANALYZE cronwarden.heartbeats")
        plan = json.loads(await conn.fetchval(f"EXPLAIN (FORMAT JSON) {watch.OVERDUE}"))
        overdue = await conn.fetch(watch.OVERDUE)

    def nodes(node: dict[str, Any]) -> Iterator[dict[str, Any]]:
        yield node
        for child in node.get("Plans", []):
            yield from nodes(child)

    found = list(nodes(plan[0]["Plan"]))
    assert any(n.get("Index Name") == "heartbeats_alert_after" for n in found), found
    assert not any(n["Node Type"] == "Seq Scan" for n in found), found
    assert len(overdue) == 20


async def test_a_real_run_landing_its_heartbeat_resolves_the_incident(
    database: str,
    client: Client,
    pool: asyncpg.Pool,
    task_queue: str,
    worker: Worker,
    receiver: Receiver,
    schedule_id: str,
) -> None:
    defn = definition(schedule_id, every="3s", heartbeat_grace="10s")
    await apply_definitions(client, pool, [defn], task_queue=task_queue)
    handle = client.get_schedule_handle(schedule_id)
    try:
        await handle.pause(note="staging an outage")
        async with monitoring(database, receiver) as monitor:

            async def paged() -> bool:
                # The fires it missed while "down". Staged again until it pages: a run already
                # in flight when the schedule paused may still commit a fresh heartbeat.
                async with pool.acquire() as conn:
                    await conn.execute(
                        "UPDATE cronwarden.heartbeats"
                        " SET next_expected_at = now() - interval '1 min' WHERE schedule_id = $1",
                        schedule_id,
                    )
                await passes(monitor)
                return bool(events(receiver))

            await wait_for(paged, timeout=30, what="the staged outage to page")
            assert [b["event"] for b in events(receiver)] == ["trigger"]
            await handle.unpause(note="recovered")

            async def resolved() -> bool:
                await passes(monitor)
                return len(events(receiver)) == 2

            await wait_for(resolved, timeout=30, what="a real run's heartbeat to resolve")
    finally:
        await handle.delete()
    assert [b["event"] for b in events(receiver)] == ["trigger", "resolve"]
    [incident] = await incidents_of(pool, schedule_id)
    assert incident["resolution"] == "recovered"
