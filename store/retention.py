"""Retention: old incidents and notifications deleted in small batches.

Nothing else ever deletes them, and both tables grow by every page. The monitor calls
`prune` once per pass: rows settled longer ago than the retention go, oldest first, at most
`batch` rows per statement and `statements` statements per table, each statement its own short
transaction, so a pass never holds many row locks for long and a backlog (the first pass after
an upgrade) is worked off over several passes. Ages are judged by Postgres' clock.

What is never deleted: a pending notification (not delivered, not given up on), nor any other
notification of its incident (the history of a page still owed stays whole); any notification
of an incident still open; an open incident; an incident that still has a
notification or a member incident; a member of an open system incident (the monitor reads
those members to let a schedule rejoin that outage instead of paging alone).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Any

# SKIP LOCKED: a row a sender is marking right now (it cannot be one of these, being settled
# and old, unless the retention is shorter than a send) is left for the next pass instead of
# making the prune wait on it. FOR UPDATE re-checks the conditions on the newest version of a
# row changed since the statement's snapshot.
_PRUNE_NOTIFICATIONS = """
DELETE FROM cronwarden.notifications
 WHERE id IN (
        SELECT n.id
          FROM cronwarden.notifications n
          JOIN cronwarden.incidents i ON i.id = n.incident_id
         WHERE coalesce(n.delivered_at, n.dead_at) < now() - $1::interval
           AND i.resolved_at IS NOT NULL
           AND NOT EXISTS (SELECT 1 FROM cronwarden.notifications p
                            WHERE p.incident_id = n.incident_id
                              AND p.delivered_at IS NULL AND p.dead_at IS NULL)
         ORDER BY coalesce(n.delivered_at, n.dead_at)
         LIMIT $2
           FOR UPDATE OF n SKIP LOCKED)
"""

# An incident goes only once its notifications are gone (the foreign key requires it, and a
# pending one means a page still owed) and its members are gone (a system incident's). New
# notifications are never queued for an incident resolved this long ago: the monitor queues
# a resolve with the resolution, and late triggers only for open incidents.
_PRUNE_INCIDENTS = """
DELETE FROM cronwarden.incidents
 WHERE id IN (
        SELECT i.id
          FROM cronwarden.incidents i
         WHERE i.resolved_at < now() - $1::interval
           AND NOT EXISTS (SELECT 1 FROM cronwarden.notifications n WHERE n.incident_id = i.id)
           AND NOT EXISTS (SELECT 1 FROM cronwarden.incidents c WHERE c.parent_id = i.id)
           AND NOT EXISTS (SELECT 1 FROM cronwarden.incidents p
                            WHERE p.id = i.parent_id AND p.resolved_at IS NULL)
         ORDER BY i.resolved_at
         LIMIT $2
           FOR UPDATE SKIP LOCKED)
"""


@dataclass(frozen=True)
class RetentionPolicy:
    keep: timedelta = timedelta(days=90)
    """Rows settled longer ago than this are deleted."""
    batch: int = 1000
    """Rows per DELETE statement."""
    statements: int = 3
    """DELETE statements per table and pass, at most: a backlog takes several passes."""


@dataclass(frozen=True)
class Pruned:
    notifications: int
    incidents: int
    more: bool
    """A statement deleted a full batch on the last allowed try: rows may be left to delete."""


async def prune(conn: Any, policy: RetentionPolicy) -> Pruned:
    """One pass's share of the deletions. Call outside a transaction: each statement commits
    on its own, releasing its locks at once."""
    notifications, more_notifications = await _in_batches(conn, _PRUNE_NOTIFICATIONS, policy)
    incidents, more_incidents = await _in_batches(conn, _PRUNE_INCIDENTS, policy)
    return Pruned(notifications, incidents, more_notifications or more_incidents)


async def _in_batches(conn: Any, statement: str, policy: RetentionPolicy) -> tuple[int, bool]:
    deleted = 0
    for _ in range(policy.statements):
        status: str = await conn.execute(statement, policy.keep, policy.batch)
        count = int(status.split()[-1])
        deleted += count
        if count < policy.batch:
            return deleted, False
    return deleted, True
