"""Notifications (`cronwarden.notifications`): an outbox of pages, one row per incident event
and sink. Rows are written in the transaction that opens or resolves the incident, so a page is
never lost between deciding and sending; delivery claims a row for a while, sends with no
transaction open, and marks it delivered (never sent again), schedules a retry, or gives up on
it (dead-lettered: counted, listed by `status`, and no longer holding back the rows after it)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from cronwarden.redact import for_storage

_ENQUEUE = """
INSERT INTO cronwarden.notifications (incident_id, event, sink, message, dedup_key)
SELECT $1, $2, sink, $4::jsonb, $5 FROM unnest($3::text[]) AS sink
ON CONFLICT (incident_id, event, sink) DO NOTHING
"""

# Claim up to `$4` due rows of the claimer's sinks (the delivery claims one sink at a time: each
# sink has its own queue, so one sink's backlog never orders another's). SKIP LOCKED keeps two
# replicas from waiting on each other; `claimed_until` keeps a row a replica is sending from
# being sent by another meanwhile (the send's total deadline is shorter than the claim), and
# lets a row whose sender died mid-send (claim lapsed, never delivered) be sent again. A replica
# never claims a row of a sink it does not have: another replica may deliver it.
#
# Order is kept per (sink, dedup key), not per incident: a row is claimable only when no earlier
# row of the same sink and key is still pending. Every incident of a schedule shares its
# PagerDuty dedup_key, so per-incident order is not enough: if incident 1's resolve failed and
# backed off while the schedule went overdue again, incident 2's trigger would reach PagerDuty
# first (folded into the open alert), then incident 1's late resolve would close that alert
# while incident 2 is open, and nobody would be paged. A resolve likewise never overtakes its
# own trigger. That holds with many rows claimed at once and many sends in flight: a row being
# sent is still pending, so the next row of its key is not claimable until it is delivered (or
# dead). A dead-lettered row is settled: it holds nothing back.
_CLAIM = """
UPDATE cronwarden.notifications n
   SET claimed_by = $1,
       claimed_until = now() + make_interval(secs => $2),
       attempts = n.attempts + 1
 WHERE n.id IN (
        SELECT c.id FROM cronwarden.notifications c
         WHERE c.delivered_at IS NULL AND c.dead_at IS NULL AND c.next_attempt_at <= now()
           AND c.sink = ANY($3::text[])
           AND (c.claimed_until IS NULL OR c.claimed_until < now())
           AND NOT EXISTS (
                SELECT 1 FROM cronwarden.notifications e
                 WHERE e.sink = c.sink AND e.dedup_key = c.dedup_key AND e.id < c.id
                   AND e.delivered_at IS NULL AND e.dead_at IS NULL)
         ORDER BY c.next_attempt_at, c.id
         LIMIT $4
           FOR UPDATE SKIP LOCKED)
RETURNING n.id, n.incident_id, n.event, n.sink, n.message, n.attempts, n.next_attempt_at
"""

# The sinks an incident's trigger was queued for: its resolve must reach each of them, whether
# or not a monitor delivering to it passed lately, or an alert there stays open for ever.
_TRIGGER_SINKS = """
SELECT sink FROM cronwarden.notifications WHERE incident_id = $1 AND event = 'trigger'
"""

# Open incidents that paged (queued a trigger) but not yet to every one of `$1`: a sink whose
# only monitor was away when they opened. Per incident, under the incident's row lock, so a
# concurrent resolve (which updates that row) either commits first, and the incident is skipped,
# or waits, and its resolve rows queue after this trigger.
_MISSING_TRIGGERS = """
SELECT DISTINCT n.incident_id
  FROM cronwarden.notifications n
  JOIN cronwarden.incidents i ON i.id = n.incident_id AND i.resolved_at IS NULL
 WHERE n.event = 'trigger'
   AND EXISTS (SELECT 1 FROM unnest($1::text[]) AS s(sink)
                WHERE NOT EXISTS (SELECT 1 FROM cronwarden.notifications t
                                   WHERE t.incident_id = n.incident_id AND t.event = 'trigger'
                                     AND t.sink = s.sink))
 ORDER BY 1
"""

_LOCK_OPEN = """
SELECT id FROM cronwarden.incidents WHERE id = $1 AND resolved_at IS NULL FOR UPDATE
"""

_QUEUE_MISSING_TRIGGER = """
INSERT INTO cronwarden.notifications (incident_id, event, sink, message, dedup_key)
SELECT t.incident_id, 'trigger', s.sink, t.message, t.dedup_key
  FROM (SELECT * FROM cronwarden.notifications
         WHERE incident_id = $1 AND event = 'trigger' ORDER BY id LIMIT 1) t
 CROSS JOIN unnest($2::text[]) AS s(sink)
ON CONFLICT (incident_id, event, sink) DO NOTHING
RETURNING sink
"""

_DELIVERED = """
UPDATE cronwarden.notifications
   SET delivered_at = now(), claimed_until = NULL, last_error = NULL
 WHERE id = $1 AND claimed_by = $2 AND delivered_at IS NULL
"""

_FAILED = """
UPDATE cronwarden.notifications
   SET claimed_until = NULL, last_error = $3,
       next_attempt_at = now() + make_interval(secs => $4)
 WHERE id = $1 AND claimed_by = $2 AND delivered_at IS NULL
"""

_DEAD = """
UPDATE cronwarden.notifications
   SET claimed_until = NULL, last_error = $3, dead_at = now()
 WHERE id = $1 AND claimed_by = $2 AND delivered_at IS NULL AND dead_at IS NULL
"""

# Rows of a sink that no monitor delivers to any more (removed from every replica's settings):
# nobody will ever claim them. Given up on once they are `$2` seconds old and no monitor that
# passed in the last `$3` seconds has the sink.
_BURY_UNSERVED = """
UPDATE cronwarden.notifications n
   SET dead_at = now(), last_error = 'no running monitor delivers to sink ' || n.sink
 WHERE n.delivered_at IS NULL AND n.dead_at IS NULL
   AND n.created_at < now() - make_interval(secs => $2)
   AND NOT (n.sink = ANY($1::text[]))
   AND NOT EXISTS (SELECT 1 FROM cronwarden.monitor_state m
                    WHERE m.last_pass_at > now() - make_interval(secs => $3)
                      AND n.sink = ANY(m.sinks))
RETURNING n.id, n.sink
"""

_COUNTS = """
SELECT count(*) FILTER (WHERE delivered_at IS NULL AND dead_at IS NULL) AS pending,
       count(*) FILTER (WHERE delivered_at IS NOT NULL) AS delivered,
       count(*) FILTER (WHERE dead_at IS NOT NULL) AS dead
  FROM cronwarden.notifications
"""

_DEAD_LETTERS = """
SELECT id, incident_id, event, sink, message->>'schedule_id' AS schedule_id, attempts,
       last_error, created_at, dead_at
  FROM cronwarden.notifications
 WHERE dead_at IS NOT NULL AND dead_at > now() - make_interval(secs => $1)
 ORDER BY dead_at DESC, id DESC
"""


@dataclass(frozen=True)
class Claimed:
    id: int
    incident_id: int
    event: str
    sink: str
    message: dict[str, Any]
    attempts: int
    """Including this one."""


async def enqueue(
    conn: Any, *, incident_id: int, event: str, sinks: list[str], message: dict[str, Any]
) -> None:
    if sinks:
        await conn.execute(_ENQUEUE, incident_id, event, sinks, message, message["dedup_key"])


async def trigger_sinks(conn: Any, *, incident_id: int) -> list[str]:
    return [r["sink"] for r in await conn.fetch(_TRIGGER_SINKS, incident_id)]


async def queue_missing_triggers(conn: Any, *, sinks: list[str]) -> list[tuple[int, str]]:
    """Queue the trigger of every open, paged incident for each of `sinks` it has not been
    queued for (see `_MISSING_TRIGGERS`); the (incident id, sink) pairs queued."""
    queued: list[tuple[int, str]] = []
    if not sinks:
        return queued
    for row in await conn.fetch(_MISSING_TRIGGERS, sinks):
        async with conn.transaction():
            if await conn.fetchrow(_LOCK_OPEN, row["incident_id"]) is None:
                continue  # resolved meanwhile: its resolve went to the sinks it paged
            for added in await conn.fetch(_QUEUE_MISSING_TRIGGER, row["incident_id"], sinks):
                queued.append((row["incident_id"], added["sink"]))
    return queued


async def claim_next(
    conn: Any, *, claimer: str, claim_seconds: float, sinks: list[str]
) -> Claimed | None:
    """The next due row of one of `sinks`, claimed for `claim_seconds`; None when none is."""
    rows = await conn.fetch(_CLAIM, claimer, claim_seconds, sinks, 1)
    return _claimed(rows[0]) if rows else None


async def claim_due(
    conn: Any, *, claimer: str, claim_seconds: float, sink: str, limit: int
) -> list[Claimed]:
    """Up to `limit` due rows of `sink`, claimed for `claim_seconds`, in claim order."""
    rows = await conn.fetch(_CLAIM, claimer, claim_seconds, [sink], limit)
    return [_claimed(r) for r in sorted(rows, key=lambda r: (r["next_attempt_at"], r["id"]))]


def _claimed(row: Any) -> Claimed:
    return Claimed(
        id=row["id"],
        incident_id=row["incident_id"],
        event=row["event"],
        sink=row["sink"],
        message=row["message"],
        attempts=row["attempts"],
    )


async def mark_delivered(conn: Any, *, notification_id: int, claimer: str) -> bool:
    status: str = await conn.execute(_DELIVERED, notification_id, claimer)
    return status.endswith(" 1")


async def mark_failed(
    conn: Any, *, notification_id: int, claimer: str, error: str, retry_in_seconds: float
) -> None:
    await conn.execute(_FAILED, notification_id, claimer, for_storage(error), retry_in_seconds)


async def mark_dead(conn: Any, *, notification_id: int, claimer: str, error: str) -> bool:
    """Give up on the row (see `_DEAD`); False when this claimer no longer holds it."""
    status: str = await conn.execute(_DEAD, notification_id, claimer, for_storage(error))
    return status.endswith(" 1")


async def bury_unserved(
    conn: Any, *, own_sinks: list[str], older_than: float, peer_window: float
) -> list[dict[str, Any]]:
    """Dead-letter the rows no running monitor can deliver (see `_BURY_UNSERVED`)."""
    rows = await conn.fetch(_BURY_UNSERVED, own_sinks, older_than, peer_window)
    return [dict(r) for r in rows]


async def counts(conn: Any) -> dict[str, int]:
    row = await conn.fetchrow(_COUNTS)
    return {k: int(row[k]) for k in ("pending", "delivered", "dead")}


async def dead_letters(conn: Any, *, within_seconds: float = 7 * 86400) -> list[dict[str, Any]]:
    """Notifications given up on in the last `within_seconds` (a week), newest first."""
    return [dict(r) for r in await conn.fetch(_DEAD_LETTERS, within_seconds)]
