"""Operator pauses, past and present (`cronwarden.pause_history`, written by a trigger on the
heartbeat row's `paused` flag: migration 0013). Read by `backfill plan|run` and `audit`, which
show a fire inside a pause as paused rather than missing."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from cronwarden.times import utc_text, utc_text_or_none


@dataclass(frozen=True)
class Pause:
    paused_at: datetime
    resumed_at: datetime | None
    """None: paused now."""
    reason: str | None

    def as_json(self) -> dict[str, Any]:
        return {
            "paused_at": utc_text(self.paused_at),
            "resumed_at": utc_text_or_none(self.resumed_at),
            "reason": self.reason,
        }


_OVERLAPPING = """
SELECT paused_at, resumed_at, reason
  FROM cronwarden.pause_history
 WHERE schedule_id = $1
   AND paused_at <= $3
   AND (resumed_at IS NULL OR resumed_at >= $2)
 ORDER BY paused_at
"""


async def overlapping(conn: Any, schedule_id: str, start: datetime, end: datetime) -> list[Pause]:
    """The schedule's pauses that overlap [start, end], oldest first."""
    rows = await conn.fetch(_OVERLAPPING, schedule_id, start, end)
    return [Pause(r["paused_at"], r["resumed_at"], r["reason"]) for r in rows]
