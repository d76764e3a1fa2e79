"""Who changed what (`cronwarden.change_log`, migration 0024): one append-only row per change an
operator command made. Written by `schedules apply|pause|unpause|trigger|delete` and `backfill
run`; read by `audit log` and the status page. The runtime role may not UPDATE or DELETE a row,
so nothing here does either."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from cronwarden.times import utc_text

APPLY = "apply"
PAUSE = "pause"
UNPAUSE = "unpause"
TRIGGER = "trigger"
DELETE = "delete"
BACKFILL = "backfill"
ACTIONS = (APPLY, PAUSE, UNPAUSE, TRIGGER, DELETE, BACKFILL)


@dataclass(frozen=True)
class Entry:
    """One change to record: `at` is the database's clock when it is inserted."""

    action: str
    schedule_id: str | None
    """None: an event of a whole schedule file."""
    details: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Who:
    """Who makes the changes of one command, and why (`cronwarden.actor` checks both)."""

    actor: str
    reason: str | None


@dataclass(frozen=True)
class Recorded:
    id: int
    at: datetime
    actor: str
    action: str
    schedule_id: str | None
    reason: str | None
    details: dict[str, Any]

    def as_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "at": utc_text(self.at),
            "actor": self.actor,
            "action": self.action,
            "schedule_id": self.schedule_id,
            "reason": self.reason,
            "details": self.details,
        }


# One statement for all the rows of a command (an apply of a thousand schedules is one round
# trip); their `at` is the statement's, their ids in the order given. The details travel as
# text, cast here, so the statement does not depend on a connection's jsonb codec.
_RECORD = """
INSERT INTO cronwarden.change_log (actor, action, schedule_id, reason, details)
SELECT $1, e.action, e.schedule_id, $2, e.details::jsonb
  FROM unnest($3::text[], $4::text[], $5::text[]) WITH ORDINALITY
       AS e(action, schedule_id, details, n)
 ORDER BY e.n
"""

# Newest first; `$1` NULL: every schedule's (and the file events'), `$2` NULL: since ever.
_LISTED = """
SELECT id, at, actor, action, schedule_id, reason, details::text AS details
  FROM cronwarden.change_log
 WHERE ($1::text IS NULL OR schedule_id = $1)
   AND ($2::timestamptz IS NULL OR at >= $2)
 ORDER BY at DESC, id DESC
 LIMIT $3
"""


async def record(conn: Any, who: Who, entries: Sequence[Entry]) -> None:
    """Append `entries`, made by `who`; inside the caller's transaction when it has one."""
    if not entries:
        return
    await conn.execute(
        _RECORD,
        who.actor,
        who.reason,
        [e.action for e in entries],
        [e.schedule_id for e in entries],
        [json.dumps(e.details, sort_keys=True, default=str) for e in entries],
    )


async def listed(
    conn: Any, *, schedule_id: str | None, since: datetime | None, limit: int
) -> list[Recorded]:
    """The latest `limit` changes, newest first: of one schedule or all, since a time or ever."""
    rows = await conn.fetch(_LISTED, schedule_id, since, limit)
    return [
        Recorded(
            id=r["id"],
            at=r["at"],
            actor=r["actor"],
            action=r["action"],
            schedule_id=r["schedule_id"],
            reason=r["reason"],
            details=json.loads(r["details"]),
        )
        for r in rows
    ]
