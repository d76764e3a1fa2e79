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


# `schedules unpause` lifts the heartbeat row's pause first (closing the pause here, by the
# trigger) and unpauses Temporal after. Interrupted in between, Temporal held the schedule on
# until the command was run again: the pause is carried on to when Temporal really let go,
# unless the row is paused again meanwhile (an open pause stands).
_EXTEND_LAST = """
UPDATE cronwarden.pause_history AS p
   SET resumed_at = statement_timestamp()
 WHERE p.schedule_id = $1
   AND p.resumed_at IS NOT NULL
   AND p.paused_at = (SELECT max(paused_at) FROM cronwarden.pause_history
                       WHERE schedule_id = $1)
"""


async def extend_last(conn: Any, schedule_id: str) -> None:
    """Carry the schedule's last closed pause on to now (see `_EXTEND_LAST`)."""
    await conn.execute(_EXTEND_LAST, schedule_id)


# A pause lifted in Temporal's UI ends here when the monitor notices, a pass or more later; Temporal
# had let go by its first action since, at the latest. Never before the pause began.
_ENDED_BY = """
UPDATE cronwarden.pause_history
   SET resumed_at = GREATEST(paused_at, LEAST(resumed_at, $2))
 WHERE schedule_id = $1
   AND resumed_at IS NOT NULL
   AND paused_at = (SELECT max(paused_at) FROM cronwarden.pause_history WHERE schedule_id = $1)
"""


async def ended_by(conn: Any, schedule_id: str, *, at: datetime) -> None:
    """End the schedule's last closed pause at `at` if that is earlier (see `_ENDED_BY`)."""
    await conn.execute(_ENDED_BY, schedule_id, at)
