"""Delivery of persisted notifications: claim a due row, send it with no transaction open, then
mark it delivered (never sent again) or failed (retried later, with exponential backoff).

A monitor killed mid-send leaves its row claimed but undelivered: the claim lapses after
`claim_seconds` and the next pass of any monitor sends it. That makes delivery at least once;
the webhook's delivery id and PagerDuty's dedup_key let a receiver fold a rare repeat.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass

import asyncpg

from cronwarden.logs import get_logger
from monitor.metrics import Metrics
from monitor.sinks import Sink, SinkError, failure, send
from store import notifications

log = get_logger("cronwarden.monitor")


@dataclass(frozen=True)
class DeliveryPolicy:
    send_timeout: float = 10.0
    retry_base: float = 5.0
    retry_max: float = 300.0
    batch: int = 100
    """At most this many deliveries per pass, so one pass always ends."""

    @property
    def claim_seconds(self) -> float:
        # Longer than any send can take: a live sender never loses its claim mid-send.
        return 2 * self.send_timeout + 5

    def retry_in(self, attempts: int) -> float:
        return float(min(self.retry_base * 2 ** max(attempts - 1, 0), self.retry_max))


async def deliver_due(
    pool: asyncpg.Pool,
    sinks: Mapping[str, Sink],
    *,
    claimer: str,
    policy: DeliveryPolicy,
    metrics: Metrics,
    budget: float,
) -> int:
    """Send due notifications (up to the batch, and for about `budget` seconds, so a sink that
    times out on every request cannot hold up the next scan); returns how many were delivered."""
    delivered = 0
    deadline = time.monotonic() + budget
    for _ in range(policy.batch):
        if time.monotonic() > deadline:
            break
        async with pool.acquire() as conn:
            row = await notifications.claim_next(
                conn, claimer=claimer, claim_seconds=policy.claim_seconds
            )
        if row is None:
            break
        bound = log.bind(
            notification_id=row.id,
            incident_id=row.incident_id,
            sink=row.sink,
            notification_event=row.event,
            attempt=row.attempts,
            schedule_id=row.message.get("schedule_id"),
        )
        sink = sinks.get(row.sink)
        try:
            if sink is None:
                raise SinkError(f"sink '{row.sink}' is no longer configured")
            await send(sink, row.message, delivery_id=str(row.id), timeout=policy.send_timeout)
        except Exception as exc:
            # Any failure of one sink, a bug in rendering too, fails this row only: it is
            # retried later, and the pass goes on to record its liveness and ping.
            error = failure(exc)
            retry_in = policy.retry_in(row.attempts)
            metrics.notification_failed(row.sink)
            bound.warning("notification.failed", error=error, retry_in_seconds=retry_in)
            async with pool.acquire() as conn:
                await notifications.mark_failed(
                    conn,
                    notification_id=row.id,
                    claimer=claimer,
                    error=error,
                    retry_in_seconds=retry_in,
                )
            continue
        async with pool.acquire() as conn:
            await notifications.mark_delivered(conn, notification_id=row.id, claimer=claimer)
        metrics.notification_sent(row.sink)
        bound.info("notification.delivered")
        delivered += 1
    return delivered
