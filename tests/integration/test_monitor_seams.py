"""The monitor's seams with the world around it, on real servers: pauses lifted in Temporal
alone, an unpause caught halfway, sinks that refuse, fail or trickle, replicas with different
sinks, a database that goes away and comes back (through a proxy the test switches), and a
system incident left with no member."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from dataclasses import replace
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import asyncpg
import pytest
import pytest_asyncio
import structlog
from temporalio.client import (
    Client,
    Interceptor,
    OutboundInterceptor,
    ScheduleActionExecutionStartWorkflow,
    UnpauseScheduleInput,
)
from temporalio.worker import Worker

from cronwarden.embedded import EmbeddedPostgres, free_port
from cronwarden.monitor.db_alert import default_state_file
from cronwarden.monitor.messages import DB_UNREACHABLE, TRIGGER, incident_message
from cronwarden.monitor.notify import DeliveryPolicy, deliver_due
from cronwarden.monitor.passes import Monitor
from cronwarden.monitor.pauses import PauseCheck, PauseCheckPolicy
from cronwarden.monitor.sinks.webhook import DELIVERY_HEADER
from cronwarden.schedules import operations
from cronwarden.schedules.apply import apply_definitions
from cronwarden.store import heartbeats, incidents, notifications
from cronwarden.store.pool import create_pool
from tests.support.cli import cli
from tests.support.database import fetch
from tests.support.monitor import (
    SLACK_PATH,
    env_for,
    events,
    expected_ago,
    heartbeat_lands,
    incidents_of,
    monitoring,
    passes,
    settings_for,
    stage,
    waiting_on_locks,
)
from tests.support.monitor import receiver as receiver
from tests.support.receiver import Receiver
from tests.support.schedules import definition
from tests.support.switch_proxy import SwitchProxy
from tests.support.waiting import clock_past, wait_for

pytestmark = pytest.mark.integration


def pause_check(client: Client) -> PauseCheck:
    """A pause check on the test's (already connected) Temporal client."""

    async def connect() -> Client:
        return client

    return PauseCheck(connect)


async def beat(pool: asyncpg.Pool, schedule_id: str) -> dict[str, Any]:
    async with pool.acquire() as conn:
        row = await heartbeats.get(conn, schedule_id)
    assert row is not None
    return row


def status_of(stdout: str, schedule_id: str) -> list[dict[str, Any]]:
    """The `status --json` row(s) of one schedule."""
    return [r for r in json.loads(stdout)["schedules"] if r["schedule_id"] == schedule_id]


async def db_now(pool: asyncpg.Pool) -> datetime:
    async with pool.acquire() as conn:
        now: datetime = await conn.fetchval("SELECT now()")
    return now


# 1. Pause truth --------------------------------------------------------------------------------


async def test_a_pause_lifted_in_temporal_alone_pages_within_grace_and_two_passes(
    database: str,
    client: Client,
    pool: asyncpg.Pool,
    task_queue: str,
    receiver: Receiver,
    cli_env: dict[str, str],
    schedule_id: str,
) -> None:
    # No worker polls the task queue: once unpaused, the schedule fires and nothing runs it.
    defn = definition(schedule_id, every="2s", heartbeat_grace="2s")
    await apply_definitions(client, pool, [defn], task_queue=task_queue)
    handle = client.get_schedule_handle(schedule_id)
    try:
        await operations.pause(client, pool, schedule_id, reason="maintenance")
        # What Temporal's UI or CLI does: cronwarden never hears of it.
        await handle.unpause(note="from the UI")
        desc = await handle.describe()
        deadline = desc.info.next_action_times[0] + defn.heartbeat_grace
        async with monitoring(database, receiver, pauses=pause_check(client)) as monitor:
            due_passes = 0

            async def paged() -> bool:
                nonlocal due_passes
                if await db_now(pool) > deadline:
                    due_passes += 1
                await passes(monitor)
                return bool(events(receiver))

            await wait_for(paged, timeout=40, what="a page for the schedule nothing runs")
        assert due_passes <= 2, due_passes
        [page] = events(receiver)
        assert page["schedule_id"] == schedule_id and page["kind"] in ("overdue", "never-ran")
        row = await beat(pool, schedule_id)
        assert row["paused"] is False
        # `status` tells the same story as the monitor.
        result = await cli(cli_env, "status", "--json")
        assert result.code == 0, result
        [shown] = [
            r for r in json.loads(result.stdout)["schedules"] if r["schedule_id"] == schedule_id
        ]
        assert shown["health"] == "overdue" and shown["paused_by"] is None
        assert shown["incident"]["id"] == page["incident_id"]
    finally:
        await handle.delete()


async def test_status_and_the_monitor_agree_on_every_kind_of_pause(
    database: str,
    client: Client,
    pool: asyncpg.Pool,
    task_queue: str,
    receiver: Receiver,
    cli_env: dict[str, str],
    schedule_id: str,
) -> None:
    cases = [
        "operator",
        "lifted-in-temporal",
        "failure",
        "operator-then-failure",
        "plain-overdue",
        "fine",
    ]
    ids = {case: f"{schedule_id}-{case}" for case in cases}
    defns = [definition(sid, every="1h") for sid in ids.values()]
    await apply_definitions(client, pool, defns, task_queue=task_queue)
    try:
        await operations.pause(client, pool, ids["operator"], reason="hold")
        await operations.pause(client, pool, ids["lifted-in-temporal"], reason="hold")
        await client.get_schedule_handle(ids["lifted-in-temporal"]).unpause(note="from the UI")
        await client.get_schedule_handle(ids["failure"]).pause(note="Workflow failed")
        # Unpaused in Temporal's UI, then its next run failed and pause_on_failure paused it
        # again, with its own note: that pause pages.
        await operations.pause(client, pool, ids["operator-then-failure"], reason="hold")
        refailed = client.get_schedule_handle(ids["operator-then-failure"])
        await refailed.unpause(note="from the UI")
        await refailed.pause(note="Workflow failed")
        for case in cases:
            if case != "fine":  # each was due a day ago
                await expected_ago(pool, ids[case], "1 day")
        result = await cli(cli_env, "status", "--json")
        assert result.code == 0, result
        before = {sid: status_of(result.stdout, sid)[0]["health"] for sid in ids.values()}
        one_page_each: dict[str, Any] = {"monitor_system_min_schedules": 100}
        async with monitoring(
            database, receiver, pauses=pause_check(client), **one_page_each
        ) as monitor:
            await passes(monitor, 2)
        result = await cli(cli_env, "status", "--json")
        assert result.code == 0, result
        after = {sid: status_of(result.stdout, sid)[0]["health"] for sid in ids.values()}
        paged = {b["schedule_id"] for b in events(receiver)}
        for sid in ids.values():
            # Overdue in `status` exactly when the monitor pages, before its pass and after.
            assert (before[sid] == "overdue") == (sid in paged), (sid, before[sid], paged)
            assert (after[sid] == "overdue") == (sid in paged), (sid, after[sid], paged)
        assert paged == {ids["failure"], ids["operator-then-failure"], ids["plain-overdue"]}
    finally:
        for sid in ids.values():
            await client.get_schedule_handle(sid).delete()


async def test_with_temporal_down_the_monitor_still_pages_and_trusts_recorded_pauses(
    database: str, pool: asyncpg.Pool, receiver: Receiver, schedule_id: str
) -> None:
    await stage(pool, schedule_id)
    await stage(pool, f"{schedule_id}-paused", paused=True)
    nowhere = f"127.0.0.1:{free_port()}"

    async def connect() -> Client:
        return await Client.connect(nowhere)

    # Said on every pass here (warn_every 0), and in the metrics: a pause lifted in Temporal's
    # UI meanwhile would stay silent, and one line at the transition is easy to miss.
    check = PauseCheck(connect, PauseCheckPolicy(timeout=2, reconnect_every=0, warn_every=0))
    with structlog.testing.capture_logs() as logs:
        async with monitoring(database, receiver, pauses=check) as monitor:
            for _ in range(2):
                assert await monitor.step() is None
    assert [b["schedule_id"] for b in events(receiver)] == [schedule_id]
    assert (await beat(pool, f"{schedule_id}-paused"))["paused"] is True
    said = [e for e in logs if e["event"] == "monitor.pauses-unverified"]
    assert [e["schedule_ids"] for e in said] == [[f"{schedule_id}-paused"]] * 2
    rendered = monitor.metrics.render()
    assert "cronwarden_monitor_temporal_reachable 0" in rendered
    assert "cronwarden_monitor_pauses_unverified 1" in rendered


async def test_a_pause_lifted_in_temporal_alone_ends_at_its_first_action_not_when_noticed(
    database: str,
    client: Client,
    pool: asyncpg.Pool,
    task_queue: str,
    receiver: Receiver,
    schedule_id: str,
) -> None:
    # Unpaused in the UI, fired on its own (no worker runs it: every fire after the first is
    # skipped), noticed by the monitor seconds later: the recorded pause ends by Temporal's
    # first action, so the fires between are listed missing by backfill, not held.
    defn = definition(schedule_id, every="2s")
    await apply_definitions(client, pool, [defn], task_queue=task_queue)
    handle = client.get_schedule_handle(schedule_id)
    try:
        await operations.pause(client, pool, schedule_id, reason="maintenance")
        await handle.unpause(note="from the UI")

        async def acted() -> bool:
            return bool((await handle.describe()).info.recent_actions)

        await wait_for(acted, timeout=20, what="an action after the unpause")
        first = min(a.started_at for a in (await handle.describe()).info.recent_actions)
        await wait_for(lambda: clock_past(first + timedelta(seconds=5)), timeout=20, what="time")
        async with monitoring(database, receiver, pauses=pause_check(client)) as monitor:
            await passes(monitor)
        rows = await fetch(
            pool,
            "SELECT resumed_at FROM cronwarden.pause_history WHERE schedule_id = $1",
            schedule_id,
        )
        assert [r["resumed_at"] for r in rows] == [first], (rows, first)
    finally:
        await handle.delete()


async def test_apply_recreating_a_schedule_deleted_outside_cronwarden_starts_it_unpaused(
    client: Client, pool: asyncpg.Pool, task_queue: str, schedule_id: str
) -> None:
    defn = definition(schedule_id, every="1h")
    await apply_definitions(client, pool, [defn], task_queue=task_queue)
    handle = client.get_schedule_handle(schedule_id)
    await operations.pause(client, pool, schedule_id, reason="hold")
    await handle.delete()  # deleted in Temporal's UI: the heartbeat row stays
    (change,) = await apply_definitions(client, pool, [defn], task_queue=task_queue)
    try:
        assert change.action == "created"
        assert (await handle.describe()).schedule.state.paused is False
        row = await beat(pool, schedule_id)
        assert row["paused"] is False and row["paused_reason"] is None
    finally:
        await handle.delete()


# 2. Unpause never pages falsely ---------------------------------------------------------------


class UnpauseGate(Interceptor):
    """Holds a client's unpause RPC until the test releases it: `schedules unpause` caught
    between its database step and its Temporal step."""

    def __init__(self) -> None:
        self.reached = asyncio.Event()
        self.release = asyncio.Event()

    def intercept_client(self, next: OutboundInterceptor) -> OutboundInterceptor:
        return _GatedUnpause(next, self)


class _GatedUnpause(OutboundInterceptor):
    def __init__(self, next: OutboundInterceptor, gate: UnpauseGate) -> None:
        super().__init__(next)
        self._gate = gate

    async def unpause_schedule(self, input: UnpauseScheduleInput) -> None:
        self._gate.reached.set()
        await self._gate.release.wait()
        await super().unpause_schedule(input)


async def test_a_monitor_pass_during_an_unpause_never_sees_the_stale_deadline(
    database: str,
    client: Client,
    pool: asyncpg.Pool,
    task_queue: str,
    receiver: Receiver,
    schedule_id: str,
) -> None:
    await apply_definitions(
        client, pool, [definition(schedule_id, every="1h")], task_queue=task_queue
    )
    await operations.pause(client, pool, schedule_id, reason="hold")
    # Paused across a fire: its deadline is long gone.
    await expected_ago(pool, schedule_id, "1 day")
    gate = UnpauseGate()
    gated = Client(client.service_client, namespace=client.namespace, interceptors=[gate])
    try:
        async with monitoring(database, receiver, pauses=pause_check(client)) as monitor:
            unpausing = asyncio.create_task(operations.unpause(gated, pool, schedule_id))
            try:
                await asyncio.wait_for(gate.reached.wait(), timeout=30)
                row = await beat(pool, schedule_id)
                assert row["paused"] is False  # the database step is done
                await passes(monitor, 2)
                assert events(receiver) == []
            finally:
                gate.release.set()
            await asyncio.wait_for(unpausing, timeout=30)
            await passes(monitor, 2)
        assert events(receiver) == []
        assert await incidents_of(pool, schedule_id) == []
    finally:
        await client.get_schedule_handle(schedule_id).delete()


# 4. One undeliverable notification never blocks later ones ----------------------------------------


async def test_a_payload_the_sink_refuses_is_dead_lettered_and_later_pages_still_go_out(
    database: str,
    pool: asyncpg.Pool,
    receiver: Receiver,
    cli_env: dict[str, str],
    schedule_id: str,
) -> None:
    await stage(pool, schedule_id)
    receiver.script.extend([400])  # the trigger's payload is refused
    async with monitoring(database, receiver) as monitor:
        await passes(monitor)
        await heartbeat_lands(pool, schedule_id)
        await passes(monitor, 2)
        await expected_ago(pool, schedule_id, "1 hour")  # and overdue again: a second incident
        await passes(monitor, 2)
    assert [b["event"] for b in events(receiver)] == ["resolve", "trigger"]
    assert monitor.metrics.dead["webhook"] == 1
    assert 'cronwarden_notifications_dead_lettered_total{sink="webhook"} 1' in (
        monitor.metrics.render()
    )
    [dead] = await fetch(pool, "SELECT * FROM cronwarden.notifications WHERE dead_at IS NOT NULL")
    assert dead["attempts"] == 1 and dead["event"] == "trigger"
    result = await cli(cli_env, "status", "--json")
    assert result.code == 0, result
    [listed] = json.loads(result.stdout)["dead_letters"]
    assert listed["schedule_id"] == schedule_id and listed["sink"] == "webhook"
    assert "HTTP 400" in listed["error"]
    text = await cli(cli_env, "status")
    assert "could not be delivered" in text.stdout and "HTTP 400" in text.stdout


async def test_a_sink_down_for_longer_than_any_bound_gets_its_pages_once_it_is_back(
    database: str, pool: asyncpg.Pool, receiver: Receiver, schedule_id: str
) -> None:
    # More failures than the old give-up bound (8 attempts): an outage, however long, only
    # delays pages. Both the trigger and its resolve reach the sink once it answers again.
    receiver.script.extend([503] * 12)
    await stage(pool, schedule_id)
    async with monitoring(database, receiver) as monitor:

        async def delivered() -> bool:
            await passes(monitor)
            return bool(events(receiver))

        await wait_for(delivered, timeout=60, what="the trigger after the outage", interval=0.1)
        await heartbeat_lands(pool, schedule_id)
        await passes(monitor, 2)
    assert [r.status for r in receiver.at("/hook")] == [503] * 12 + [200, 200]
    assert [b["event"] for b in events(receiver)] == ["trigger", "resolve"]
    assert monitor.metrics.dead["webhook"] == 0
    dead = await fetch(pool, "SELECT 1 FROM cronwarden.notifications WHERE dead_at IS NOT NULL")
    assert dead == []


@pytest.mark.parametrize("status", [401, 403, 404, 410])
async def test_a_sink_refusing_its_address_or_key_is_retried_until_fixed_and_said_loudly(
    database: str,
    pool: asyncpg.Pool,
    receiver: Receiver,
    schedule_id: str,
    status: int,
) -> None:
    # A revoked webhook or a rotated routing key: every page of that window must still go out
    # once the configuration is fixed, never be given up on at its first answer.
    receiver.script.extend([status] * 3)
    await stage(pool, schedule_id)
    with structlog.testing.capture_logs() as logs:
        async with monitoring(database, receiver) as monitor:

            async def delivered() -> bool:
                await passes(monitor)
                return bool(events(receiver))

            await wait_for(delivered, timeout=30, what="the trigger once the sink takes it")
    said = [e for e in logs if e["event"] == "notification.sink-misconfigured"]
    assert len(said) == 3 and all(e["log_level"] == "error" for e in said)
    assert said[0]["error"] == f"HTTP {status}: check the sink's URL and credentials"
    assert [r.status for r in receiver.at("/hook")] == [status] * 3 + [200]
    assert [b["event"] for b in events(receiver)] == ["trigger"]
    assert monitor.metrics.dead["webhook"] == 0
    [row] = await fetch(pool, "SELECT * FROM cronwarden.notifications")
    assert row["attempts"] == 4 and row["dead_at"] is None


async def test_replicas_with_different_sinks_each_deliver_only_their_own(
    database: str, pool: asyncpg.Pool, receiver: Receiver, schedule_id: str
) -> None:
    await stage(pool, schedule_id, late="-1 hour")  # fine for now
    slack: dict[str, Any] = {"slack_webhook_url": receiver.url(SLACK_PATH)}
    async with (
        monitoring(database, receiver) as webhook_only,
        monitoring(database, receiver, **slack) as both,
    ):
        await passes(both)  # it has run: its sinks are known
        await expected_ago(pool, schedule_id, "1 hour")
        await passes(webhook_only, 2)  # opens the incident, pages for both sinks
        await passes(both)
    assert len(events(receiver)) == 1 and len(events(receiver, SLACK_PATH)) == 1
    rows = await fetch(pool, "SELECT sink, attempts, delivered_at FROM cronwarden.notifications")
    assert sorted((r["sink"], r["attempts"]) for r in rows) == [("slack", 1), ("webhook", 1)]
    assert all(r["delivered_at"] is not None for r in rows)


def slack_events(receiver: Receiver) -> list[str]:
    """The Slack messages accepted, as trigger or resolve (told apart by their icon)."""
    texts = [b["blocks"][0]["text"]["text"] for b in events(receiver, SLACK_PATH)]
    return ["resolve" if ":white_check_mark:" in t else "trigger" for t in texts]


async def away(pool: asyncpg.Pool, monitor: Monitor) -> None:
    """`monitor` last passed long ago: its sinks drop out of the other replicas' targets."""
    await fetch(
        pool,
        "UPDATE cronwarden.monitor_state SET last_pass_at = now() - interval '1 hour'"
        " WHERE monitor_id = $1",
        monitor.identity,
    )


async def test_a_resolve_reaches_every_sink_its_trigger_went_to_even_one_now_away(
    database: str, pool: asyncpg.Pool, receiver: Receiver, schedule_id: str
) -> None:
    await stage(pool, schedule_id, late="-1 hour")
    slack: dict[str, Any] = {"slack_webhook_url": receiver.url(SLACK_PATH)}
    async with (
        monitoring(database, receiver) as webhook_only,
        monitoring(database, receiver, **slack) as both,
    ):
        await passes(both)
        await expected_ago(pool, schedule_id, "1 hour")
        await passes(webhook_only, 2)  # opens the incident: a trigger for each sink
        await passes(both)  # Slack has the trigger
        await away(pool, both)  # the only replica with Slack is gone for a while
        await heartbeat_lands(pool, schedule_id)
        await passes(webhook_only, 2)  # resolves it
        await passes(both)  # back: it delivers Slack's resolve
    assert slack_events(receiver) == ["trigger", "resolve"]
    assert [b["event"] for b in events(receiver)] == ["trigger", "resolve"]


async def test_a_sink_back_after_incidents_opened_without_it_gets_their_triggers(
    database: str, pool: asyncpg.Pool, receiver: Receiver, schedule_id: str
) -> None:
    await stage(pool, schedule_id, late="-1 hour")
    slack: dict[str, Any] = {"slack_webhook_url": receiver.url(SLACK_PATH)}
    async with (
        monitoring(database, receiver) as webhook_only,
        monitoring(database, receiver, **slack) as both,
    ):
        await passes(both)
        await away(pool, both)  # away while the schedule goes overdue
        await expected_ago(pool, schedule_id, "1 hour")
        await passes(webhook_only, 2)  # opens the incident: a trigger for the webhook only
        assert slack_events(receiver) == []
        await passes(both, 2)  # back: the open incident's trigger reaches Slack too
        await heartbeat_lands(pool, schedule_id)
        await passes(webhook_only, 2)
        await passes(both)
    assert slack_events(receiver) == ["trigger", "resolve"]
    assert [b["event"] for b in events(receiver)] == ["trigger", "resolve"]
    [incident] = await incidents_of(pool, schedule_id)
    rows = await fetch(pool, "SELECT * FROM cronwarden.notifications WHERE sink = 'slack'")
    assert {r["incident_id"] for r in rows} == {incident["id"]}


# 3. The "database unreachable" alert -------------------------------------------------------------


@pytest_asyncio.fixture(loop_scope="session")
async def proxy(postgres_server: EmbeddedPostgres) -> AsyncIterator[SwitchProxy]:
    switch = SwitchProxy(postgres_server.host, postgres_server.port)
    await switch.start()
    try:
        yield switch
    finally:
        await switch.off()


async def test_the_database_alert_outlives_a_restart_and_the_next_monitor_resolves_it(
    database: str, proxy: SwitchProxy, receiver: Receiver
) -> None:
    dsn = proxy.proxied(database)
    env = env_for(settings_for(dsn, receiver))
    state = default_state_file(dsn)
    try:
        await proxy.off()
        first = await cli(env, "monitor", "--once")
        restarted = await cli(env, "monitor", "--once")  # a container restart, still down
        assert (first.code, restarted.code) == (1, 1), (first, restarted)
        assert [b["event"] for b in events(receiver)] == ["trigger"]
        await proxy.on()
        healthy = await cli(env, "monitor", "--once")
        assert healthy.code == 0, healthy
        again = await cli(env, "monitor", "--once")
        assert again.code == 0, again
    finally:
        state.unlink(missing_ok=True)
    pages = events(receiver)
    assert [(b["kind"], b["event"]) for b in pages] == [
        (DB_UNREACHABLE, "trigger"),
        (DB_UNREACHABLE, "resolve"),
    ]
    assert pages[0]["dedup_key"] == pages[1]["dedup_key"]


async def test_a_flapping_database_pages_once_not_every_pass(
    database: str, proxy: SwitchProxy, receiver: Receiver, tmp_path: Path
) -> None:
    dsn = proxy.proxied(database)
    async with monitoring(dsn, receiver, state_file=tmp_path / "alert.json") as monitor:
        for _ in range(4):
            await proxy.off()
            assert await monitor.step() is not None
            await proxy.on()
            assert await monitor.step() is None
    assert [b["event"] for b in events(receiver)] == ["trigger", "resolve"]


# 6. One time budget per pass, a total deadline per send, stable delivery ids -------------------


async def test_a_sink_that_trickles_its_answer_fails_its_send_not_the_database(
    database: str, pool: asyncpg.Pool, receiver: Receiver, schedule_id: str
) -> None:
    await stage(pool, schedule_id)
    # Every byte of the answer comes quickly, the whole answer slowly: only a total deadline
    # per request ends it.
    receiver.drip = 0.2
    fast: dict[str, Any] = {
        "monitor_send_timeout_seconds": 1,
        "monitor_database_timeout_seconds": 2,
    }
    async with monitoring(database, receiver, **fast) as monitor:
        assert await monitor.step() is None
        [row] = await fetch(pool, "SELECT * FROM cronwarden.notifications")
        assert row["delivered_at"] is None and row["claimed_until"] is None
        assert row["last_error"] == "no answer within 1s"
        [sent] = receiver.at("/hook")

        async def abandoned() -> bool:
            # The sender hung up: it will never take an answer after its claim is gone.
            return sent.finished and sent.status is None

        await wait_for(abandoned, timeout=30, what="the receiver to see the sender hang up")
        assert monitor.metrics.database_up
    assert events(receiver, kind=DB_UNREACHABLE) == []


async def deliver(
    monitor: Monitor, pool: asyncpg.Pool, policy: DeliveryPolicy, *, budget: float
) -> int:
    """One delivery step of `monitor`, on `pool` and under `policy`, with `budget` seconds."""
    return await deliver_due(
        pool,
        monitor.sinks,
        http=monitor.http,
        claimer=monitor.identity,
        policy=policy,
        metrics=monitor.metrics,
        deadline=time.monotonic() + budget,
    )


async def test_a_delivery_waiting_for_a_database_connection_gives_up_within_its_timeout(
    database: str, pool: asyncpg.Pool, receiver: Receiver, schedule_id: str
) -> None:
    # A database that stops answering right after the scan: the delivery's next step cannot get
    # a connection (here: every one of a one-connection pool is taken). The pass must end with
    # an error within the database timeout, so the next pass can raise "database unreachable",
    # not wait on the pool for as long as TCP takes to give up.
    await stage(pool, schedule_id)
    small = await create_pool(database, max_size=1)
    held = await small.acquire()
    async with monitoring(database, receiver) as monitor:
        policy = replace(monitor.options.delivery, database_timeout=0.5)
        delivery = asyncio.create_task(deliver(monitor, small, policy, budget=3600))
        try:
            # Far longer than the timeout: a load-slowed machine still answers in time.
            await asyncio.wait([delivery], timeout=30)
            assert delivery.done(), "the delivery still waits for a connection"
            assert isinstance(delivery.exception(), TimeoutError)
        finally:
            delivery.cancel()
            await small.release(held)
            await small.close()
    assert receiver.at("/hook") == []


async def test_a_pass_with_too_little_budget_left_leaves_its_pages_untried_for_the_next(
    database: str, pool: asyncpg.Pool, receiver: Receiver, schedule_id: str
) -> None:
    # A quarter of a send timeout left: a send started now would be cut short on a slow sink
    # and cost the row an attempt and a backoff for the pass running out, not the sink failing.
    await stage(pool, schedule_id)
    receiver.hold.set()  # a slow sink: it answers nothing within the time left
    try:
        async with monitoring(database, receiver) as monitor:
            async with pool.acquire() as conn:
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
            policy = replace(monitor.options.delivery, send_timeout=2.0)
            delivered = await deliver(monitor, pool, policy, budget=0.5)
    finally:
        receiver.release.set()
    assert delivered == 0 and receiver.at("/hook") == []
    [row] = await fetch(pool, "SELECT * FROM cronwarden.notifications")
    assert row["attempts"] == 0 and row["last_error"] is None and row["claimed_until"] is None


async def test_delivery_ids_are_one_per_incident_event_and_sink_and_stable_across_retries(
    database: str, pool: asyncpg.Pool, receiver: Receiver, schedule_id: str
) -> None:
    await stage(pool, schedule_id)
    receiver.script.extend([500])
    async with monitoring(database, receiver) as monitor:

        async def delivered() -> bool:
            await passes(monitor)
            return bool(events(receiver))

        await wait_for(delivered, timeout=20, what="the trigger after a 500", interval=0.1)
        await heartbeat_lands(pool, schedule_id)
        await passes(monitor, 2)
    [incident] = await incidents_of(pool, schedule_id)
    ids = [r.headers[DELIVERY_HEADER] for r in receiver.at("/hook")]
    trigger = f"cronwarden:{incident['id']}:trigger:webhook"
    assert ids == [trigger, trigger, f"cronwarden:{incident['id']}:resolve:webhook"]


# 5. A system incident never pages with no members ------------------------------------------------


async def test_a_system_incident_whose_schedules_were_paged_alone_meanwhile_sends_no_page(
    database: str, pool: asyncpg.Pool, receiver: Receiver, schedule_id: str
) -> None:
    ids = [f"{schedule_id}-{i}" for i in range(3)]
    for sid in ids:
        await stage(pool, sid)
    async with monitoring(database, receiver) as monitor, pool.acquire() as other:
        # Another replica opens each schedule's incident alone while this one, having read the
        # same snapshot, is about to open a system incident for all three.
        replica = other.transaction()
        await replica.start()
        await other.execute("LOCK TABLE cronwarden.incidents IN EXCLUSIVE MODE")
        passing = asyncio.create_task(monitor.run_pass())
        try:
            await wait_for(lambda: waiting_on_locks(pool, 1), timeout=30, what="the pass to wait")
            for sid in ids:
                await other.execute(
                    "INSERT INTO cronwarden.incidents (schedule_id, kind, summary)"
                    " VALUES ($1, 'overdue', 'opened by another replica')",
                    sid,
                )
        finally:
            await replica.commit()
        await asyncio.wait_for(passing, timeout=30)
        await passes(monitor, 2)
    pages = events(receiver)
    assert all(p["schedule_id"] is not None or p["schedules"] for p in pages), pages
    assert sorted(p["schedule_id"] for p in pages) == ids
    assert await incidents_of(pool, None) == []


async def age_the_system_incident(pool: asyncpg.Pool) -> None:
    """Make the open system incident an hour old: past the window in which schedules join it."""
    async with pool.acquire() as conn:
        await conn.execute(
            "UPDATE cronwarden.incidents SET opened_at = now() - interval '1 hour'"
            " WHERE schedule_id IS NULL AND resolved_at IS NULL"
        )


async def test_a_system_member_overdue_again_rejoins_the_system_incident_not_paged_alone(
    database: str, pool: asyncpg.Pool, receiver: Receiver, schedule_id: str
) -> None:
    ids = [f"{schedule_id}-{i}" for i in range(3)]
    for sid in ids:
        await stage(pool, sid)
    async with monitoring(database, receiver) as monitor:
        await passes(monitor, 2)
        [system_page] = events(receiver)
        await heartbeat_lands(pool, ids[0])  # one recovers (quietly: the others are still out)
        await passes(monitor)
        await age_the_system_incident(pool)
        await expected_ago(pool, ids[0], "1 hour")  # the same outage catches it again
        await passes(monitor, 2)
    assert events(receiver) == [system_page]
    [system] = await incidents_of(pool, None)
    first, again = await incidents_of(pool, ids[0])
    assert first["resolved_at"] is not None and again["parent_id"] == system["id"]
    assert again["resolved_at"] is None and system["resolved_at"] is None


async def test_schedules_overdue_long_after_a_system_incident_opened_page_on_their_own(
    database: str, pool: asyncpg.Pool, receiver: Receiver, schedule_id: str
) -> None:
    first = [f"{schedule_id}-a{i}" for i in range(3)]
    later = [f"{schedule_id}-b{i}" for i in range(3)]
    for sid in first:
        await stage(pool, sid)
    for sid in later:
        await stage(pool, sid, late="-1 hour")
    async with monitoring(database, receiver) as monitor:
        await passes(monitor, 2)
        await age_the_system_incident(pool)
        for sid in later:  # enough to meet the system rule on their own
            await expected_ago(pool, sid, "1 hour")
        await passes(monitor, 2)
    pages = events(receiver)
    assert [p["schedule_id"] for p in pages] == [None, *later]
    assert all(p["event"] == "trigger" for p in pages)


# 9 (part). A run in progress is running, not late ------------------------------------------------


async def test_status_shows_a_run_in_progress_as_running_not_late(
    client: Client,
    pool: asyncpg.Pool,
    task_queue: str,
    worker: Worker,
    cli_env: dict[str, str],
    schedule_id: str,
) -> None:
    defn = definition(schedule_id, every="1h", heartbeat_grace="10m", args={"sleep": 60})
    await apply_definitions(client, pool, [defn], task_queue=task_queue)
    handle = client.get_schedule_handle(schedule_id)
    try:
        await handle.trigger()

        async def running() -> bool:
            return bool((await handle.describe()).info.running_actions)

        await wait_for(running, timeout=30, what="the triggered run to start")
        await expected_ago(pool, schedule_id, "5 s")  # its fire was due a moment ago, grace not out
        result = await cli(cli_env, "status", "--json")
        assert result.code == 0, result
        [row] = [
            r for r in json.loads(result.stdout)["schedules"] if r["schedule_id"] == schedule_id
        ]
        assert row["health"] == "running"
    finally:
        for action in (await handle.describe()).info.running_actions:
            if isinstance(action, ScheduleActionExecutionStartWorkflow):
                await client.get_workflow_handle(action.workflow_id).terminate()
        await handle.delete()
