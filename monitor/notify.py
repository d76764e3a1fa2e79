"""Delivery of persisted notifications: claim a due row, send it with no transaction open, then
mark it delivered (never sent again), failed (retried later, with exponential backoff up to
`retry_max`, for as long as it takes) or dead (given up on: only a payload the sink refused as
such, which no retry can get through). A sink that is down or misconfigured never loses a page:
its rows wait, and go out in order once it takes them again.

A monitor killed mid-send leaves its row claimed but undelivered: the claim lapses after
`claim_seconds` and the next pass of any monitor sends it. That makes delivery at least once;
the delivery id (stable across retries) and PagerDuty's dedup_key let a receiver fold a repeat.
A live sender never loses its claim before it has marked the row (see `claim_seconds`).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from dataclasses import dataclass

import asyncpg
from structlog.typing import FilteringBoundLogger

from cronwarden.logs import get_logger
from cronwarden.monitor.metrics import Metrics
from cronwarden.monitor.sinks import Http, Sink, SinkError, failure, send
from cronwarden.store import notifications

log = get_logger("cronwarden.monitor")

# A send starts only with at least this share of its timeout left in the pass. One cut shorter
# would mostly time out on a sink that is merely slow, and the claim counts it as an attempt:
# the row would back off for the pass's budget running out, not for the sink failing.
_MIN_SEND_SHARE = 0.5


@dataclass(frozen=True)
class DeliveryPolicy:
    send_timeout: float = 10.0
    """Total deadline of one HTTP request (DNS, connect, send, answer)."""
    retry_base: float = 5.0
    retry_max: float = 300.0
    batch: int = 100
    """At most this many deliveries per pass, so one pass always ends."""
    database_timeout: float = 30.0
    """Bound of each database step of the delivery (claim, mark): taking a connection from the
    pool, the statement and giving the connection back (its reset is a round trip too), so a
    database that stops answering ends the pass with an error, never holds it for the minutes
    TCP takes to give up."""

    @property
    def claim_seconds(self) -> float:
        # The claim must outlast everything its holder does with the row after the claim's
        # statement: the rest of the claim step (commit, giving the connection back), the send
        # (its total deadline) and the marking step, each database step bounded by
        # `database_timeout`. A claim that lapsed before the mark lets another replica send the
        # page again while this one is still recording it.
        return self.send_timeout + 2 * self.database_timeout + 5

    def retry_in(self, attempts: int) -> float:
        return float(min(self.retry_base * 2 ** max(attempts - 1, 0), self.retry_max))


def delivery_id(*, incident_id: int, event: str, sink: str) -> str:
    """What a receiver folds repeats by: one per (incident, event, sink), the same on every
    retry of that notification."""
    return f"cronwarden:{incident_id}:{event}:{sink}"


async def deliver_due(
    pool: asyncpg.Pool,
    sinks: Mapping[str, Sink],
    *,
    http: Http,
    claimer: str,
    policy: DeliveryPolicy,
    metrics: Metrics,
    deadline: float,
) -> int:
    """Send due notifications of this monitor's sinks, up to the batch and until `deadline`
    (monotonic), so a sink that times out on every request cannot hold up the next scan;
    returns how many were delivered. Database errors propagate; sink errors never do."""
    delivered = 0
    own = sorted(sinks)
    for _ in range(policy.batch):
        left = deadline - time.monotonic()
        if left < policy.send_timeout * _MIN_SEND_SHARE or not own:
            break
        async with asyncio.timeout(policy.database_timeout), pool.acquire() as conn:
            row = await notifications.claim_next(
                conn, claimer=claimer, claim_seconds=policy.claim_seconds, sinks=own
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
        try:
            await send(
                http,
                sinks[row.sink],
                row.message,
                delivery_id=delivery_id(
                    incident_id=row.incident_id, event=row.event, sink=row.sink
                ),
                timeout=min(policy.send_timeout, deadline - time.monotonic()),
            )
        except Exception as exc:
            # Any failure of one sink, a bug in rendering too, fails this row only: it is
            # retried later (or given up on), and the pass goes on.
            await _failed(
                pool, row, exc, claimer=claimer, policy=policy, metrics=metrics, log=bound
            )
            continue
        async with asyncio.timeout(policy.database_timeout), pool.acquire() as conn:
            await notifications.mark_delivered(conn, notification_id=row.id, claimer=claimer)
        metrics.notification_sent(row.sink)
        bound.info("notification.delivered")
        delivered += 1
    return delivered


async def _failed(
    pool: asyncpg.Pool,
    row: notifications.Claimed,
    exc: BaseException,
    *,
    claimer: str,
    policy: DeliveryPolicy,
    metrics: Metrics,
    log: FilteringBoundLogger,
) -> None:
    error = failure(exc)
    permanent = isinstance(exc, SinkError) and exc.permanent
    if permanent:
        reason = "refused by the sink"
        async with asyncio.timeout(policy.database_timeout), pool.acquire() as conn:
            dead = await notifications.mark_dead(
                conn, notification_id=row.id, claimer=claimer, error=f"{error} ({reason})"
            )
        metrics.notification_failed(row.sink)
        if dead:
            metrics.notification_dead(row.sink)
        log.error("notification.dead-lettered", error=error, reason=reason)
        return
    retry_in = policy.retry_in(row.attempts)
    metrics.notification_failed(row.sink)
    if isinstance(exc, SinkError) and exc.misconfigured:
        # Retried (fixing the settings lets this very page through), but nobody is paged
        # through this sink until someone does: an error, not a warning.
        log.error("notification.sink-misconfigured", error=error, retry_in_seconds=retry_in)
    else:
        log.warning("notification.failed", error=error, retry_in_seconds=retry_in)
    async with asyncio.timeout(policy.database_timeout), pool.acquire() as conn:
        await notifications.mark_failed(
            conn, notification_id=row.id, claimer=claimer, error=error, retry_in_seconds=retry_in
        )
