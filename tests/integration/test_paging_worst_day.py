"""Paging on the worst day, against real Postgres and real local HTTP sinks: a sink that
black-holes every request beside a healthy one, a sink failing for ever, two replicas, a fleet
outage of 3,000 schedules against receivers that refuse oversized bodies with 413."""

from __future__ import annotations

import asyncio
from collections import Counter
from dataclasses import replace
from typing import Any

import asyncpg
import pytest
import structlog
from pydantic import SecretStr

from cronwarden.embedded import free_port
from cronwarden.monitor.messages import TRIGGER, incident_message
from cronwarden.monitor.sinks import BodyLimit, Http, send
from cronwarden.monitor.sinks.webhook import DELIVERY_HEADER, WebhookSink
from tests.support.database import fetch
from tests.support.monitor import (
    ROUTING_KEY,
    SLACK_PATH,
    due_now,
    events,
    heartbeat_lands,
    incidents_of,
    monitoring,
    passes,
    stage,
)
from tests.support.monitor import receiver as receiver
from tests.support.receiver import Receiver
from tests.support.sink_servers import HANG_MODES, BlackHole, HangMode, SizedReceiver
from tests.support.waiting import wait_for

pytestmark = pytest.mark.integration

STATUS_PAGE = "https://status.example.test/cronwarden"
# Individual pages only (no system page), a send timeout short enough for a test.
ALONE: dict[str, Any] = {"monitor_system_min_schedules": 100_000, "monitor_send_timeout_seconds": 1}


async def stage_fleet(pool: asyncpg.Pool, prefix: str, n: int) -> list[str]:
    """`n` heartbeat rows an hour overdue, in one statement."""
    async with pool.acquire() as conn:
        await conn.execute(
            """
            INSERT INTO cronwarden.heartbeats
                   (schedule_id, next_expected_at, grace, last_success_at, paused)
            SELECT $1 || '-' || lpad(i::text, 5, '0'), now() - interval '1 hour',
                   interval '1 minute', now() - interval '2 hours', false
              FROM generate_series(0, $2 - 1) AS i
            """,
            prefix,
            n,
        )
    return [f"{prefix}-{i:05d}" for i in range(n)]


def pd_triggers(receiver: Receiver) -> list[str]:
    return [b["dedup_key"] for b in events(receiver, "/pd") if b["event_action"] == "trigger"]


async def pending(pool: asyncpg.Pool, sink: str) -> list[asyncpg.Record]:
    return await fetch(
        pool,
        "SELECT * FROM cronwarden.notifications WHERE sink = $1 AND delivered_at IS NULL"
        " ORDER BY id",
        sink,
    )


async def dead_letters(pool: asyncpg.Pool) -> list[asyncpg.Record]:
    return await fetch(pool, "SELECT * FROM cronwarden.notifications WHERE dead_at IS NOT NULL")


# 1. Each sink on its own ------------------------------------------------------------------------


@pytest.mark.parametrize("mode", HANG_MODES)
async def test_a_black_holed_sink_never_holds_back_another_sinks_pages(
    database: str, pool: asyncpg.Pool, receiver: Receiver, schedule_id: str, mode: HangMode
) -> None:
    ids = await stage_fleet(pool, schedule_id, 40)
    with BlackHole(mode) as hole:
        async with monitoring(
            database,
            receiver,
            alert_webhook_url=hole.url("/hook"),
            pagerduty_routing_key=ROUTING_KEY,
            pagerduty_url=receiver.url("/pd"),
            **ALONE,
        ) as monitor:
            # A pass's budget long enough for 40 sends on a loaded machine: whether PagerDuty
            # gets them must depend on the webhook's lane, never on the speed of the machine.
            monitor.options = replace(monitor.options, interval=30.0)
            await passes(monitor)  # ONE pass: the hung webhook costs PagerDuty nothing
            assert sorted(pd_triggers(receiver)) == [f"cronwarden:{sid}" for sid in ids]
            await stage(pool, f"{schedule_id}-new")
            await passes(monitor)  # a new incident's trigger goes out in the pass that opens it
            assert f"cronwarden:{schedule_id}-new" in pd_triggers(receiver)
            assert len(pd_triggers(receiver)) == 41
            # Nothing reached the webhook, and nothing of it was given up on.
            assert len(await pending(pool, "webhook")) == 41
            assert await dead_letters(pool) == []

            hole.heal()

            async def all_through() -> bool:
                await passes(monitor)
                return len(hole.at("/hook", accepted_only=True)) >= 41

            await wait_for(all_through, timeout=60, what="the webhook's pages once it is back")
    answered = Counter(s.headers[DELIVERY_HEADER] for s in hole.at("/hook", accepted_only=True))
    assert len(answered) == 41 and set(answered.values()) == {1}
    assert await pending(pool, "webhook") == [] and await dead_letters(pool) == []
    assert len(pd_triggers(receiver)) == 41  # and PagerDuty got each page once


async def test_a_sink_that_stopped_answering_holds_up_one_pass_not_every_retry(
    database: str, pool: asyncpg.Pool, receiver: Receiver, schedule_id: str
) -> None:
    await stage(pool, schedule_id)
    with Receiver() as pd:
        settings: dict[str, Any] = {
            "pagerduty_routing_key": ROUTING_KEY,
            "pagerduty_url": pd.url("/pd"),
            "monitor_breaker_failures": 100,  # the breaker stays closed: retries, no probes
            **ALONE,
        }
        async with monitoring(database, receiver, **settings) as monitor:
            receiver.hold.set()  # the webhook stops answering
            await passes(monitor)  # its first unanswered send is waited for
            [row] = await pending(pool, "webhook")
            assert row["last_error"].startswith("no answer within") and not row["claimed_until"]
            # From now on a send could hang far longer than the test: only its lane waits.
            monitor.options = replace(
                monitor.options, delivery=replace(monitor.options.delivery, send_timeout=60)
            )
            await due_now(pool)
            await stage(pool, f"{schedule_id}-b")
            await passes(monitor)  # returns while the webhook's retry is still unanswered

            async def retry_sent() -> bool:
                # The retry goes out on its own task: it may reach the receiver a moment after
                # the pass returned.
                return len(receiver.at("/hook")) >= 2

            await wait_for(retry_sent, timeout=10, what="the webhook's retry to arrive")
            assert [r.status for r in receiver.at("/hook")] == [None, None]
            retrying, untried = await pending(pool, "webhook")
            assert retrying["claimed_until"] is not None and retrying["attempts"] == 2
            assert untried["attempts"] == 0
            await passes(monitor)  # the unanswered send still counts as the one in flight
            assert len(receiver.at("/hook")) == 2
            assert sorted(pd_triggers(pd)) == [
                f"cronwarden:{schedule_id}",
                f"cronwarden:{schedule_id}-b",
            ]
            receiver.release.set()  # the held requests are answered 503 now

            async def recorded() -> bool:
                rows = await pending(pool, "webhook")
                return rows[0]["last_error"] == "HTTP 503" and rows[0]["claimed_until"] is None

            await wait_for(recorded, timeout=30, what="the unwaited send's answer recorded")
            receiver.hold.clear()

            async def delivered() -> bool:
                await due_now(pool)
                await passes(monitor)
                return await pending(pool, "webhook") == []

            await wait_for(delivered, timeout=30, what="the webhook's pages once it answers")
    assert sorted(b["schedule_id"] for b in events(receiver)) == [schedule_id, f"{schedule_id}-b"]


async def test_a_sink_failing_for_ever_opens_its_breaker_and_its_pages_wait_undropped(
    database: str, pool: asyncpg.Pool, receiver: Receiver, schedule_id: str
) -> None:
    receiver.script.extend([500] * 1000)  # the webhook answers 500 to everything
    await stage(pool, schedule_id)
    with Receiver() as pd, structlog.testing.capture_logs() as logs:
        settings: dict[str, Any] = {
            "pagerduty_routing_key": ROUTING_KEY,
            "pagerduty_url": pd.url("/pd"),
            "monitor_breaker_failures": 3,
            "monitor_breaker_cooldown_seconds": 3600,  # no probe within the test
            "monitor_retry_max_seconds": 3600,
            **ALONE,
        }
        async with monitoring(database, receiver, **settings) as monitor:

            async def three_failures() -> bool:
                await due_now(pool)
                await passes(monitor)
                return len(receiver.at("/hook")) >= 3

            await wait_for(three_failures, timeout=30, what="three failed sends to the webhook")
            for _ in range(3):  # due again and again: the open breaker sends nothing
                await due_now(pool)
                await passes(monitor)
            assert len(receiver.at("/hook")) == 3
            await stage(pool, f"{schedule_id}-b")
            await passes(monitor)
        # PagerDuty took both pages; the webhook was tried three times in all.
        assert sorted(pd_triggers(pd)) == [
            f"cronwarden:{schedule_id}",
            f"cronwarden:{schedule_id}-b",
        ]
    assert [r.status for r in receiver.at("/hook")] == [500] * 3
    waiting = await pending(pool, "webhook")
    assert [(r["attempts"], r["dead_at"]) for r in waiting] == [(3, None), (0, None)]
    opened = [e for e in logs if e["event"] == "sink.breaker-opened"]
    assert len(opened) == 1 and opened[0]["sink"] == "webhook"


async def test_an_open_breaker_probes_one_page_and_an_answer_closes_it(
    database: str, pool: asyncpg.Pool, receiver: Receiver, schedule_id: str
) -> None:
    for suffix in ("a", "b", "c"):
        await stage(pool, f"{schedule_id}-{suffix}")
    receiver.script.extend([500] * 4)  # three open the breaker, the first probe fails too
    # This sink answers every send: a send timeout of ALONE's one second would only judge the
    # machine, and a probe timed out on a loaded one opens the breaker a third time.
    settings: dict[str, Any] = {
        "monitor_breaker_failures": 3,
        **ALONE,
        "monitor_send_timeout_seconds": 10,
    }
    with structlog.testing.capture_logs() as logs:
        async with monitoring(database, receiver, **settings) as monitor:

            async def delivered() -> bool:
                await passes(monitor)
                return len(events(receiver)) == 3

            await wait_for(delivered, timeout=30, what="every page once the sink answers")
    assert [r.status for r in receiver.at("/hook")] == [500] * 4 + [200] * 3
    said = [e["event"] for e in logs if e["event"].startswith("sink.breaker-")]
    assert said == [
        "sink.breaker-opened",
        "sink.breaker-probe",
        "sink.breaker-opened",
        "sink.breaker-probe",
        "sink.breaker-closed",
    ]
    assert await dead_letters(pool) == []


async def test_a_resolve_queued_while_its_trigger_backs_off_waits_on_that_sink_only(
    database: str, pool: asyncpg.Pool, receiver: Receiver, schedule_id: str
) -> None:
    await stage(pool, schedule_id)
    receiver.script.extend([500])  # the webhook's trigger fails once and backs off
    with Receiver() as pd:
        settings: dict[str, Any] = {
            "pagerduty_routing_key": ROUTING_KEY,
            "pagerduty_url": pd.url("/pd"),
            "monitor_retry_base_seconds": 3600,
            "monitor_retry_max_seconds": 3600,
            "monitor_sink_concurrency": 4,
        }
        async with monitoring(database, receiver, **settings) as monitor:
            await passes(monitor)
            await heartbeat_lands(pool, schedule_id)
            await passes(monitor, 2)
            # PagerDuty closed its alert; the webhook's resolve waits behind its trigger.
            assert [b["event_action"] for b in events(pd, "/pd")] == ["trigger", "resolve"]
            assert [r.status for r in receiver.at("/hook")] == [500]
            await due_now(pool)
            await passes(monitor)
    assert [b["event"] for b in events(receiver)] == ["trigger", "resolve"]


async def test_two_replicas_beside_a_black_holed_sink_send_each_page_once(
    database: str, pool: asyncpg.Pool, receiver: Receiver, schedule_id: str
) -> None:
    ids = await stage_fleet(pool, schedule_id, 10)
    with BlackHole("accept") as hole, SizedReceiver({}) as pd:
        settings: dict[str, Any] = {
            "alert_webhook_url": hole.url("/hook"),
            "pagerduty_routing_key": ROUTING_KEY,
            "pagerduty_url": pd.url("/pd"),
            "monitor_sink_concurrency": 4,
            **ALONE,
        }
        async with (
            monitoring(database, receiver, **settings) as a,
            monitoring(database, receiver, **settings) as b,
        ):

            async def both_pass(path: str, *, pages: int, server: Any) -> bool:
                await asyncio.gather(a.run_pass(), b.run_pass())
                return len(server.at(path, accepted_only=True)) >= pages

            await wait_for(
                lambda: both_pass("/pd", pages=10, server=pd),
                timeout=60,
                what="every PagerDuty trigger beside the black-holed webhook",
            )
            hole.heal()
            await wait_for(
                lambda: both_pass("/hook", pages=10, server=hole),
                timeout=60,
                what="the webhook's pages once it is back",
            )
            await asyncio.gather(a.run_pass(), b.run_pass())
        pd_pages = [s.body["dedup_key"] for s in pd.at("/pd", accepted_only=True)]
    assert sorted(pd_pages) == [f"cronwarden:{sid}" for sid in ids]  # each once
    answered = Counter(s.headers[DELIVERY_HEADER] for s in hole.at("/hook", accepted_only=True))
    assert len(answered) == 10 and set(answered.values()) == {1}


async def test_the_database_alert_reaches_every_sink_beside_a_black_holed_one(
    receiver: Receiver,
) -> None:
    # No database: the alert goes straight to the sinks, and the black-holed one must not eat
    # the others' share of the time.
    dead = f"postgresql://postgres@127.0.0.1:{free_port()}/nowhere"
    with BlackHole("accept") as hole:
        async with monitoring(
            dead,
            receiver,
            alert_webhook_url=hole.url("/hook"),
            slack_webhook_url=receiver.url(SLACK_PATH),
            pagerduty_routing_key=ROUTING_KEY,
            pagerduty_url=receiver.url("/pd"),
            monitor_send_timeout_seconds=1,
        ) as monitor:
            assert await monitor.step() is not None
        assert len(hole.at("/hook")) == 1
    [pd] = events(receiver, "/pd")
    assert pd["payload"]["class"] == "monitor-database-unreachable"
    [slack] = events(receiver, SLACK_PATH)
    assert "cannot reach the database" in slack["text"]


# 2. Pages that fit ------------------------------------------------------------------------------

LIMITS = {"/hook": 2048, "/pd": 512 * 1024, SLACK_PATH: 40_000}


async def test_a_fleet_outage_of_3000_schedules_pages_every_sink_within_its_size_limit(
    database: str, pool: asyncpg.Pool, receiver: Receiver, schedule_id: str
) -> None:
    ids = await stage_fleet(pool, schedule_id, 3000)
    with SizedReceiver(LIMITS) as sized:
        async with monitoring(
            database,
            receiver,
            alert_webhook_url=sized.url("/hook"),
            slack_webhook_url=sized.url(SLACK_PATH),
            pagerduty_routing_key=ROUTING_KEY,
            pagerduty_url=sized.url("/pd"),
            status_page_url=STATUS_PAGE,
        ) as monitor:
            await passes(monitor, 2)
            for path, limit in LIMITS.items():
                [page] = sized.at(path, accepted_only=True)
                assert len(page.raw) <= limit, path
            # The webhook's receiver refused the first body: it got a shorter one at once.
            assert [s.status for s in sized.at("/hook")][-1] == 200
            assert 413 in [s.status for s in sized.at("/hook")]
            [hook] = [s.body for s in sized.at("/hook", accepted_only=True)]
            assert hook["kind"] == "system" and hook["schedules_total"] == 3000
            assert hook["link"] == f"{STATUS_PAGE}/" and hook["truncated"] is True
            assert hook["summary"].startswith("3,000 schedules went overdue together")
            [pd] = [s.body for s in sized.at("/pd", accepted_only=True)]
            assert pd["payload"]["custom_details"]["schedules_total"] == 3000
            assert pd["payload"]["custom_details"]["schedules"] == ids[:20]
            assert pd["links"] == [{"href": f"{STATUS_PAGE}/", "text": "cronwarden status page"}]
            [slack] = [s.body for s in sized.at(SLACK_PATH, accepted_only=True)]
            text = slack["blocks"][0]["text"]["text"]
            assert "more: see <" + STATUS_PAGE in text and f"`{ids[0]}`" in text
            async with pool.acquire() as conn:  # the outage ends: every run lands
                await conn.execute(
                    "UPDATE cronwarden.heartbeats SET last_success_at = now(),"
                    " next_expected_at = now() + interval '1 hour' WHERE schedule_id LIKE $1",
                    f"{schedule_id}-%",
                )
            await passes(monitor, 2)
    assert await dead_letters(pool) == []
    for path in LIMITS:
        assert len(sized.at(path, accepted_only=True)) == 2, path  # the trigger and the resolve
    [system] = await incidents_of(pool, None)
    assert system["resolution"] == "members-resolved"
    # What the database keeps of the outage is bounded too.
    assert len(system["summary"]) < 600 and system["summary"].endswith("and 2,990 more")
    assert system["details"] == {"schedule_ids": ids[:20], "schedules_total": 3000}


async def test_a_receiver_refusing_even_the_shortest_page_is_retried_never_dead_lettered(
    database: str, pool: asyncpg.Pool, receiver: Receiver, schedule_id: str
) -> None:
    await stage(pool, schedule_id)
    with SizedReceiver({"/hook": 100}) as sized:
        async with monitoring(database, receiver, alert_webhook_url=sized.url("/hook")) as monitor:
            await passes(monitor)
            [row] = await pending(pool, "webhook")
            assert row["dead_at"] is None
            assert row["last_error"].startswith("HTTP 413 to the page at its shortest")
            sized.limits["/hook"] = 1_000_000  # the receiver's limit is raised
            await due_now(pool)
            await passes(monitor)
    assert await pending(pool, "webhook") == [] and await dead_letters(pool) == []
    [page] = sized.at("/hook", accepted_only=True)
    assert page.body["schedule_id"] == schedule_id


def system_page(members: int) -> dict[str, Any]:
    incident: dict[str, Any] = {
        "id": 9,
        "schedule_id": None,
        "kind": "system",
        "summary": f"{members} schedules went overdue together",
        "details": {},
        "opened_at": None,
    }
    listed = [
        {"schedule_id": f"s-{i}", "kind": "overdue", "summary": f"schedule s-{i} is overdue " * 3}
        for i in range(members)
    ]
    return incident_message(TRIGGER, incident, schedules=listed, link=STATUS_PAGE)


async def test_a_body_of_exactly_the_limit_is_sent_whole_and_one_byte_more_is_shortened() -> None:
    message = system_page(50)
    with SizedReceiver({}) as sized:
        sink = WebhookSink(SecretStr(sized.url("/hook")))
        whole = sink.render(message)
        sized.limits["/hook"] = len(whole)
        http = Http()
        try:
            # Exactly the limit, by our count and the receiver's: sent as it is.
            sent = await send(
                http, sink, message, delivery_id="d", timeout=5, limit=BodyLimit(len(whole))
            )
            assert sent == len(whole) and sized.at("/hook")[-1].raw == whole
            # One byte less allowed: shortened before sending, never refused.
            shorter = await send(
                http, sink, message, delivery_id="d", timeout=5, limit=BodyLimit(len(whole) - 1)
            )
            assert shorter < len(whole) and [s.status for s in sized.at("/hook")] == [200, 200]
            # A receiver one byte stricter than we thought: 413, then a shorter body at once.
            sized.limits["/hook"] = len(whole) - 1
            limit = BodyLimit(len(whole))
            await send(http, sink, message, delivery_id="d", timeout=5, limit=limit)
            assert [s.status for s in sized.at("/hook")][2:] == [413, 200]
            assert limit.bytes == len(whole) - 1
        finally:
            await http.aclose()
