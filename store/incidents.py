"""Incidents (`cronwarden.incidents`): at most one open per schedule, opened and resolved by
conditional statements so that several monitor replicas never page twice.

The race these statements close: two monitor replicas scan at the same moment, both see the
same schedule overdue, and both try to open an incident for it. The partial unique index
`incidents_one_open` lets exactly one INSERT through; the other gets no row back from
`ON CONFLICT DO NOTHING ... RETURNING` and therefore enqueues no notification. Resolving is an
`UPDATE ... WHERE resolved_at IS NULL ... RETURNING`: only the replica whose UPDATE changed the
row enqueues the resolve notification.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from cronwarden.redact import for_storage, storable_value

OVERDUE = "overdue"
NEVER_RAN = "never-ran"
RUNNING_TOO_LONG = "running-too-long"
SYSTEM = "system"
HORIZON = "horizon"
"""A local-time schedule whose compiled entries end soon: past them Temporal fires nothing."""

TOO_FAST = "too-fast"
"""The last live run ended sooner than its `expected_duration.min`: did the job do nothing?"""
TOO_SLOW = "too-slow"
"""The last live run ended later than its `expected_duration.max`."""
LATE_START = "late-start"
"""The last live run's job started more than `late_start` after its nominal fire time."""
RUN_BOUNDS = (TOO_SLOW, TOO_FAST, LATE_START)
UNPAUSE_FAILED = "unpause-failed"
"""A timed pause has ended and the monitor could not unpause the schedule (migration 0027)."""
"""The kinds a run's bounds page with, as the commit statement picks one per run."""

HORIZON_LEAD = timedelta(days=30)
"""How long before a compiled horizon a `horizon` incident opens, unless configured
(`monitor_horizon_lead`): time for a re-apply before the last compiled fire."""

# The condition is checked again at write time, not only in the (possibly stale) snapshot the
# monitor planned from: a heartbeat that landed meanwhile, or a replica that resolved the
# incident a moment ago, must not lead to a fresh page for a schedule that is fine.
_OPEN = """
INSERT INTO cronwarden.incidents (schedule_id, kind, summary, details, parent_id)
SELECT $1, $2, $3, $4::jsonb, $5
 WHERE CASE WHEN $2 = 'running-too-long' THEN EXISTS (
           SELECT 1 FROM cronwarden.locks l
            WHERE l.schedule_id = $1 AND l.holder IS NOT NULL
              AND l.expires_at > now() AND l.run_deadline < now())
       WHEN $2 = 'horizon' THEN EXISTS (
           SELECT 1 FROM cronwarden.heartbeats h
            WHERE h.schedule_id = $1 AND NOT h.paused
              AND h.compiled_until <= now() + $6::interval)
       WHEN $2 IN ('too-fast', 'too-slow', 'late-start') THEN EXISTS (
           -- Still the last live run's judgement: a run within bounds since clears it.
           SELECT 1 FROM cronwarden.heartbeats h
            WHERE h.schedule_id = $1 AND NOT h.paused AND h.last_run_breach = $2)
       WHEN $2 = 'unpause-failed' THEN EXISTS (
           -- Still held past its end, and the monitor's last try to end it failed.
           SELECT 1 FROM cronwarden.heartbeats h
            WHERE h.schedule_id = $1 AND h.paused AND h.unpause_error IS NOT NULL)
       ELSE EXISTS (
           SELECT 1 FROM cronwarden.heartbeats h
            WHERE h.schedule_id = $1 AND NOT h.paused AND h.alert_after < now())
       END
ON CONFLICT DO NOTHING
RETURNING id, schedule_id, kind, summary, details, opened_at
"""

_OPEN_SYSTEM = """
INSERT INTO cronwarden.incidents (schedule_id, kind, summary, details)
VALUES (NULL, 'system', $1, $2::jsonb)
ON CONFLICT DO NOTHING
RETURNING id, schedule_id, kind, summary, details, opened_at
"""

# Taken before any member is added under the system incident, and held until that
# transaction commits; see `open_system` for the race it closes.
_LOCK_OPEN_SYSTEM = """
SELECT id FROM cronwarden.incidents
 WHERE schedule_id IS NULL AND resolved_at IS NULL
   FOR UPDATE
"""

_RESOLVE = """
UPDATE cronwarden.incidents
   SET resolved_at = now(), resolution = $2
 WHERE id = $1 AND resolved_at IS NULL
RETURNING id, schedule_id, kind, summary, details, opened_at, resolved_at, resolution, parent_id
"""

# A system incident resolves once none of the schedules it paged for is still open. Three
# statements in one transaction, not one: the open system row is locked FOR UPDATE first, which
# waits for any replica adding members under it (it holds the same lock), and only then are the
# members counted, by a new statement whose snapshot includes what that replica committed.
_LOCK_SYSTEMS = """
SELECT id FROM cronwarden.incidents
 WHERE kind = 'system' AND resolved_at IS NULL
   FOR UPDATE
"""

_HAS_OPEN_MEMBERS = """
SELECT EXISTS (SELECT 1 FROM cronwarden.incidents WHERE parent_id = $1 AND resolved_at IS NULL)
"""

_RESOLVE_SYSTEM = """
UPDATE cronwarden.incidents
   SET resolved_at = now(), resolution = 'members-resolved'
 WHERE id = $1 AND resolved_at IS NULL
RETURNING id, schedule_id, kind, summary, details, opened_at, resolved_at, resolution, parent_id
"""

# The safety net behind those locks: an open schedule incident that nobody pages for. Either
# its parent system incident is resolved (or gone), or it has no parent and no trigger was ever
# queued for it. Whatever let it happen, it must page on its own.
_UNPAGED = """
SELECT i.id, i.schedule_id, i.kind, i.summary, i.details, i.opened_at, i.parent_id
  FROM cronwarden.incidents i
  LEFT JOIN cronwarden.incidents p ON p.id = i.parent_id
 WHERE i.schedule_id IS NOT NULL AND i.resolved_at IS NULL
   AND CASE WHEN i.parent_id IS NOT NULL THEN p.id IS NULL OR p.resolved_at IS NOT NULL
            ELSE NOT EXISTS (SELECT 1 FROM cronwarden.notifications n
                              WHERE n.incident_id = i.id AND n.event = 'trigger')
       END
"""

# Detach from the dead parent (so its resolve pages too); conditional, so one replica wins.
_DETACH = """
UPDATE cronwarden.incidents i
   SET parent_id = NULL
 WHERE i.id = $1 AND i.resolved_at IS NULL AND i.parent_id IS NOT DISTINCT FROM $2
RETURNING id, schedule_id, kind, summary, details, opened_at, parent_id
"""

_OPEN_INCIDENTS = """
SELECT id, schedule_id, kind, summary, details, parent_id, opened_at
  FROM cronwarden.incidents
 WHERE resolved_at IS NULL
 ORDER BY schedule_id NULLS FIRST, opened_at
"""


async def open_incident(
    conn: Any,
    *,
    schedule_id: str,
    kind: str,
    summary: str,
    details: dict[str, Any],
    parent_id: int | None = None,
    horizon_lead: timedelta = HORIZON_LEAD,
) -> dict[str, Any] | None:
    """The new incident, or None when one is open already (or the condition no longer holds).
    `horizon_lead`: how far ahead a compiled horizon opens a `horizon` incident."""
    summary, details = _scrubbed(summary, details)
    row = await conn.fetchrow(_OPEN, schedule_id, kind, summary, details, parent_id, horizon_lead)
    return dict(row) if row is not None else None


async def open_system(
    conn: Any, *, summary: str, details: dict[str, Any]
) -> tuple[int, dict[str, Any] | None]:
    """The open system incident's id, LOCKED until the caller's transaction ends, and its row
    when THIS call opened it (and must page). Call inside the transaction that adds members.

    The race: replica B adds members under open system incident S while replica A resolves S
    because it has no open member. A's NOT EXISTS cannot see B's uncommitted members, and the
    members' foreign key takes only a KEY SHARE lock on S, which A's UPDATE does not wait for:
    S closes while members open under it, and nobody is paged for them. So B locks S FOR UPDATE
    before adding members and A takes the same lock before counting them. If S was resolved
    between B's conflicting INSERT and B's lock (FOR UPDATE re-checks `resolved_at IS NULL` on
    the newest row version and then finds nothing), B tries again and opens a fresh one."""
    summary, details = _scrubbed(summary, details)
    for _ in range(5):
        row = await conn.fetchrow(_OPEN_SYSTEM, summary, details)
        if row is not None:
            return int(row["id"]), dict(row)
        existing = await conn.fetchval(_LOCK_OPEN_SYSTEM)
        if existing is not None:
            return int(existing), None
    raise RuntimeError("the open system incident kept vanishing while joining it")


SUMMARY_LIMIT = 4000
"""Characters of a summary kept: a page's one line, never a list of thousands of ids."""


def _scrubbed(summary: str, details: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """What an incident keeps of its text: every page, the status page and `status` read it
    back from here, so secrets (a job's error quoted in the summary) are blanked at this one
    write, and a summary is bounded."""
    return for_storage(summary, limit=SUMMARY_LIMIT), storable_value(details)


async def resolve(conn: Any, *, incident_id: int, resolution: str) -> dict[str, Any] | None:
    """The resolved incident, or None when it was resolved already (by another replica)."""
    row = await conn.fetchrow(_RESOLVE, incident_id, resolution)
    return dict(row) if row is not None else None


async def resolve_finished_systems(conn: Any) -> list[dict[str, Any]]:
    """Resolve every system incident with no open member. Call inside a transaction: the lock
    on the system row must be held until the resolve commits (see `open_system`)."""
    resolved = []
    for system_id in [r["id"] for r in await conn.fetch(_LOCK_SYSTEMS)]:
        if await conn.fetchval(_HAS_OPEN_MEMBERS, system_id):
            continue
        row = await conn.fetchrow(_RESOLVE_SYSTEM, system_id)
        if row is not None:
            resolved.append(dict(row))
    return resolved


async def unpaged(conn: Any) -> list[dict[str, Any]]:
    """Open schedule incidents that no trigger pages for (see `_UNPAGED`)."""
    return [dict(r) for r in await conn.fetch(_UNPAGED)]


async def detach(conn: Any, *, incident_id: int, parent_id: int | None) -> dict[str, Any] | None:
    """The incident, now on its own; None when another replica took it first."""
    row = await conn.fetchrow(_DETACH, incident_id, parent_id)
    return dict(row) if row is not None else None


async def open_incidents(conn: Any) -> list[dict[str, Any]]:
    """Every open incident (system incidents first), for `status` and the metrics."""
    return [dict(r) for r in await conn.fetch(_OPEN_INCIDENTS)]
