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

from typing import Any

OVERDUE = "overdue"
NEVER_RAN = "never-ran"
RUNNING_TOO_LONG = "running-too-long"
SYSTEM = "system"

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

_OPEN_SYSTEM_ID = """
SELECT id FROM cronwarden.incidents WHERE schedule_id IS NULL AND resolved_at IS NULL
"""

_RESOLVE = """
UPDATE cronwarden.incidents
   SET resolved_at = now(), resolution = $2
 WHERE id = $1 AND resolved_at IS NULL
RETURNING id, schedule_id, kind, summary, details, opened_at, resolved_at, resolution, parent_id
"""

# A system incident resolves once none of the schedules it paged for is still open.
_RESOLVE_FINISHED_SYSTEM = """
UPDATE cronwarden.incidents s
   SET resolved_at = now(), resolution = 'members-resolved'
 WHERE s.kind = 'system' AND s.resolved_at IS NULL
   AND NOT EXISTS (SELECT 1 FROM cronwarden.incidents m
                    WHERE m.parent_id = s.id AND m.resolved_at IS NULL)
RETURNING id, schedule_id, kind, summary, details, opened_at, resolved_at, resolution, parent_id
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
) -> dict[str, Any] | None:
    """The new incident, or None when one is open already (or the condition no longer holds)."""
    row = await conn.fetchrow(_OPEN, schedule_id, kind, summary, details, parent_id)
    return dict(row) if row is not None else None


async def open_system(
    conn: Any, *, summary: str, details: dict[str, Any]
) -> tuple[int, dict[str, Any] | None]:
    """The open system incident's id, and its row when THIS call opened it (and must page)."""
    row = await conn.fetchrow(_OPEN_SYSTEM, summary, details)
    if row is not None:
        return int(row["id"]), dict(row)
    # Another replica opened it first: its INSERT committed before ours gave up, so we see it.
    existing: int = await conn.fetchval(_OPEN_SYSTEM_ID)
    return existing, None


async def resolve(conn: Any, *, incident_id: int, resolution: str) -> dict[str, Any] | None:
    """The resolved incident, or None when it was resolved already (by another replica)."""
    row = await conn.fetchrow(_RESOLVE, incident_id, resolution)
    return dict(row) if row is not None else None


async def resolve_finished_systems(conn: Any) -> list[dict[str, Any]]:
    return [dict(r) for r in await conn.fetch(_RESOLVE_FINISHED_SYSTEM)]


async def open_incidents(conn: Any) -> list[dict[str, Any]]:
    """Every open incident (system incidents first), for `status` and the metrics."""
    return [dict(r) for r in await conn.fetch(_OPEN_INCIDENTS)]
