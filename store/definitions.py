"""Definition history (`cronwarden.definition_history`): what each schedule's spec was, when."""

from __future__ import annotations

import json
from collections.abc import Sequence
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

# For schedules found unchanged by an apply: the definition Temporal holds is recorded unless it
# is already the schedule's latest entry (a write to Temporal whose history row was lost, e.g. an
# apply interrupted between the two, is recorded by the next apply).
_RECORD_IF_NOT_LATEST = """
INSERT INTO cronwarden.definition_history
       (schedule_id, applied_at, definition_digest, definition)
SELECT u.schedule_id, u.applied_at, u.digest, u.definition::jsonb
  FROM unnest($1::text[], $2::timestamptz[], $3::text[], $4::text[])
       AS u(schedule_id, applied_at, digest, definition)
 WHERE u.digest IS DISTINCT FROM (
       SELECT h.definition_digest
         FROM cronwarden.definition_history h
        WHERE h.schedule_id = u.schedule_id
        ORDER BY h.applied_at DESC
        LIMIT 1)
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


async def record_if_not_latest(
    conn: Any, applied: Sequence[tuple[str, datetime, str, dict[str, Any]]]
) -> None:
    """Record each (schedule id, applied at, digest, definition) whose digest is not already the
    schedule's latest recorded one; one statement for all of them."""
    if applied:
        ids, times, digests, definitions = zip(*applied, strict=True)
        await conn.execute(
            _RECORD_IF_NOT_LATEST,
            list(ids),
            list(times),
            list(digests),
            [json.dumps(d) for d in definitions],
        )


async def history(conn: Any, schedule_id: str) -> list[tuple[datetime, str, dict[str, Any]]]:
    """Every recorded definition of the schedule, oldest first."""
    rows = await conn.fetch(_HISTORY, schedule_id)
    return [(r["applied_at"], r["definition_digest"], dict(r["definition"])) for r in rows]


# One row per schedule, its newest entry: `schedules list` and `status` read every managed
# schedule's definition here instead of describing each schedule in Temporal.
_LATEST_ALL = """
SELECT DISTINCT ON (schedule_id) schedule_id, definition
  FROM cronwarden.definition_history
 ORDER BY schedule_id, applied_at DESC
"""


async def latest_all(conn: Any) -> dict[str, dict[str, Any]]:
    """Schedule id -> the definition most recently recorded for it."""
    return {r["schedule_id"]: dict(r["definition"]) for r in await conn.fetch(_LATEST_ALL)}
