"""Retention on a real Postgres: old settled rows go, in small batches over several passes;
recent rows, pending pages, open incidents and whatever an open incident still needs stay; a
prune never waits on a row a sender holds, and never costs a page that is being delivered."""

from __future__ import annotations

import asyncio
from typing import Any

import asyncpg
import pytest

from cronwarden.monitor.process import Pruning
from cronwarden.store import retention
from tests.support.cli import cli
from tests.support.monitor import env_for, monitoring, passes
from tests.support.monitor import receiver as receiver
from tests.support.receiver import Receiver

pytestmark = pytest.mark.integration

OLD = "100 days"
RECENT = "10 days"
POLICY = retention.RetentionPolicy()  # 90 days, 1,000 rows a statement, 3 statements a table


async def incident(
    conn: Any,
    schedule_id: str | None,
    *,
    resolved: str | None,
    opened: str = "200 days",
    parent_id: int | None = None,
) -> int:
    """An incident opened `opened` ago and resolved `resolved` ago (None: still open)."""
    return int(
        await conn.fetchval(
            """
            INSERT INTO cronwarden.incidents
                   (schedule_id, kind, summary, parent_id, opened_at, resolved_at, resolution)
            VALUES ($1::text, CASE WHEN $1::text IS NULL THEN 'system' ELSE 'overdue' END,
                    'test', $2,
                    now() - $3::text::interval, now() - $4::text::interval,
                    CASE WHEN $4::text IS NOT NULL THEN 'recovered' END)
            RETURNING id
            """,
            schedule_id,
            parent_id,
            opened,
            resolved,
        )
    )


async def notification(
    conn: Any,
    incident_id: int,
    *,
    event: str = "trigger",
    delivered: str | None = None,
    dead: str | None = None,
    sink: str = "webhook",
) -> int:
    """A notification delivered or given up on that long ago (neither: still pending)."""
    return int(
        await conn.fetchval(
            """
            INSERT INTO cronwarden.notifications
                   (incident_id, event, sink, message, dedup_key, created_at, delivered_at, dead_at)
            VALUES ($1, $2, $3, jsonb_build_object('event', $2::text, 'dedup_key', 'k',
                    'incident_id', $1::bigint, 'kind', 'overdue', 'schedule_id', 's',
                    'summary', 'test', 'details', '{}'::jsonb, 'schedules', '[]'::jsonb),
                    'cronwarden:s', now() - interval '200 days',
                    now() - $4::text::interval, now() - $5::text::interval)
            RETURNING id
            """,
            incident_id,
            event,
            sink,
            delivered,
            dead,
        )
    )


async def ids(pool: asyncpg.Pool, table: str) -> set[int]:
    async with pool.acquire() as conn:
        return {r["id"] for r in await conn.fetch(f"SELECT id FROM cronwarden.{table}")}


async def prune_until_done(pool: asyncpg.Pool, policy: retention.RetentionPolicy) -> int:
    """Prune pass after pass until one deletes nothing; the number of passes that did."""
    used = 0
    while True:
        async with pool.acquire() as conn:
            pruned = await retention.prune(conn, policy)
        if not (pruned.notifications or pruned.incidents):
            return used
        used += 1
        assert used < 50, "pruning never finished"


async def test_old_settled_rows_go_and_recent_pending_and_open_ones_stay(
    pool: asyncpg.Pool,
) -> None:
    async with pool.acquire() as conn:
        gone_incident = await incident(conn, "old", resolved=OLD)
        gone = {
            await notification(conn, gone_incident, delivered=OLD),
            await notification(conn, gone_incident, event="resolve", dead=OLD),
        }
        # A resolve still owed to a sink that has been down for months: kept, with its incident.
        owed_incident = await incident(conn, "owed", resolved=OLD)
        owed = await notification(conn, owed_incident, event="resolve")
        paged_owed = await notification(conn, owed_incident, delivered=OLD)
        # Open for months: its page, delivered long ago, is what the resolve will follow.
        open_incident = await incident(conn, "open", resolved=None)
        open_page = await notification(conn, open_incident, delivered=OLD)
        recent_incident = await incident(conn, "recent", resolved=RECENT)
        recent_page = await notification(conn, recent_incident, delivered=RECENT)
        # An old system incident and its old member: both go, the member first.
        old_system = await incident(conn, None, resolved=OLD)
        old_member = await incident(conn, "member", resolved=OLD, parent_id=old_system)
        # A member resolved long ago of the system incident still open: the monitor reads it
        # to let that schedule rejoin the outage.
        open_system = await incident(conn, None, resolved=None)
        kept_member = await incident(conn, "rejoins", resolved=OLD, parent_id=open_system)

    assert await prune_until_done(pool, POLICY) >= 1
    assert await ids(pool, "notifications") == {owed, paged_owed, open_page, recent_page}
    assert not gone & await ids(pool, "notifications")
    assert await ids(pool, "incidents") == {
        owed_incident,
        open_incident,
        recent_incident,
        open_system,
        kept_member,
    }
    assert not {gone_incident, old_system, old_member} & await ids(pool, "incidents")


async def test_a_backlog_is_pruned_in_small_batches_over_several_passes(
    pool: asyncpg.Pool,
) -> None:
    async with pool.acquire() as conn:
        await conn.execute(
            """
            WITH made AS (
                INSERT INTO cronwarden.incidents
                       (schedule_id, kind, summary, opened_at, resolved_at, resolution)
                SELECT 'backlog-' || g, 'overdue', 'test', now() - interval '200 days',
                       now() - interval '100 days', 'recovered'
                  FROM generate_series(1, 2500) AS g
                RETURNING id)
            INSERT INTO cronwarden.notifications
                   (incident_id, event, sink, message, dedup_key, created_at, delivered_at)
            SELECT made.id, e.event, 'webhook', '{}'::jsonb, 'k', now() - interval '200 days',
                   now() - interval '100 days'
              FROM made CROSS JOIN (VALUES ('trigger'), ('resolve')) AS e(event)
            """
        )
    per_pass: list[retention.Pruned] = []
    while True:
        async with pool.acquire() as conn:
            pruned = await retention.prune(conn, POLICY)
        per_pass.append(pruned)
        if not pruned.more:
            break
        assert len(per_pass) < 20, per_pass
    # No pass deletes more than its statements allow, so none holds locks on the whole backlog.
    limit = POLICY.batch * POLICY.statements
    assert all(p.notifications <= limit and p.incidents <= limit for p in per_pass), per_pass
    assert len(per_pass) >= 2, per_pass
    assert sum(p.notifications for p in per_pass) == 5000
    assert sum(p.incidents for p in per_pass) == 2500
    assert not await ids(pool, "notifications") and not await ids(pool, "incidents")


async def test_a_prune_skips_a_row_a_sender_holds_instead_of_waiting(pool: asyncpg.Pool) -> None:
    async with pool.acquire() as conn:
        old = await incident(conn, "held", resolved=OLD)
        held = await notification(conn, old, delivered=OLD)
        free = await notification(conn, old, event="resolve", delivered=OLD)
    async with pool.acquire() as sender, sender.transaction():
        # What a sender marking the row holds until it commits.
        await sender.execute(
            "SELECT 1 FROM cronwarden.notifications WHERE id = $1 FOR UPDATE", held
        )
        async with pool.acquire() as conn:
            # Waiting on the lock would hang here until the deadline fails the test.
            pruned = await asyncio.wait_for(retention.prune(conn, POLICY), timeout=30)
        assert pruned.notifications == 1 and pruned.incidents == 0
        assert await ids(pool, "notifications") == {held}
    assert free not in await ids(pool, "notifications")
    await prune_until_done(pool, POLICY)
    assert not await ids(pool, "notifications") and not await ids(pool, "incidents")


async def test_pruning_beside_a_delivery_costs_no_page(
    database: str, pool: asyncpg.Pool, receiver: Receiver
) -> None:
    # A resolve owed for months (the sink was down) is delivered while prunes run around it.
    async with pool.acquire() as conn:
        old = await incident(conn, "late-resolve", resolved=OLD)
        await notification(conn, old, delivered=OLD)
        owed = await notification(conn, old, event="resolve")
    pruning = Pruning(database, POLICY, timeout=30, every=0)

    async def prune_often() -> None:
        for _ in range(20):
            await pruning.maybe_prune()

    async with monitoring(database, receiver) as monitor:
        await asyncio.gather(passes(monitor, 3), prune_often())
    [page] = receiver.at("/hook", accepted_only=True)
    assert page.body["event"] == "resolve" and page.body["incident_id"] == old
    # Delivered just now: kept for the whole retention, with its incident.
    assert await ids(pool, "notifications") == {owed}
    assert old in await ids(pool, "incidents")


async def test_the_monitor_prunes_after_its_pass(
    database: str, pool: asyncpg.Pool, receiver: Receiver
) -> None:
    async with pool.acquire() as conn:
        old = await incident(conn, "gone", resolved=OLD)
        await notification(conn, old, delivered=OLD)
        kept = await incident(conn, "kept", resolved="2 days")
    env = env_for({"database_url": database, "monitor_retention": "3d"})
    result = await cli(env, "monitor", "--once")
    assert result.code == 0, result.stderr
    assert await ids(pool, "incidents") == {kept}
    assert not await ids(pool, "notifications")
    assert '"monitor.pruned"' in result.stderr
