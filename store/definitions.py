"""Definition history (`cronwarden.definition_history`): what each schedule's spec was, when."""

from __future__ import annotations

from datetime import datetime
from typing import Any

# ON CONFLICT: a retried apply records the same change at the same Temporal time once.
_RECORD = """
INSERT INTO cronwarden.definition_history
       (schedule_id, applied_at, definition_digest, definition)
VALUES ($1, $2, $3, $4)
ON CONFLICT (schedule_id, applied_at) DO NOTHING
"""

# Only while the schedule has no history at all: seeds it with what held before the first
# recorded apply.
_RECORD_FIRST = """
INSERT INTO cronwarden.definition_history
       (schedule_id, applied_at, definition_digest, definition)
SELECT $1, $2, $3, $4
 WHERE NOT EXISTS (SELECT 1 FROM cronwarden.definition_history WHERE schedule_id = $1)
ON CONFLICT (schedule_id, applied_at) DO NOTHING
"""

_HISTORY = """
SELECT applied_at, definition_digest, definition
  FROM cronwarden.definition_history
 WHERE schedule_id = $1
 ORDER BY applied_at
"""


async def record(
    conn: Any,
    *,
    schedule_id: str,
    applied_at: datetime,
    definition_digest: str,
    definition: dict[str, Any],
    first_only: bool = False,
) -> None:
    """Record one apply; `first_only`: only if the schedule has no history yet."""
    # The pool's jsonb codec encodes the mapping (store/pool.py).
    await conn.execute(
        _RECORD_FIRST if first_only else _RECORD,
        schedule_id,
        applied_at,
        definition_digest,
        definition,
    )


async def history(conn: Any, schedule_id: str) -> list[tuple[datetime, str, dict[str, Any]]]:
    """Every recorded definition of the schedule, oldest first."""
    rows = await conn.fetch(_HISTORY, schedule_id)
    return [(r["applied_at"], r["definition_digest"], dict(r["definition"])) for r in rows]
