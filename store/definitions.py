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

# The definition an update replaces, from the memo Temporal held, unless it is already the
# schedule's latest recorded one. With no history at all it is seeded as holding since the
# schedule's creation ($2: a schedule applied before definitions were recorded); so it is when
# the latest row is a delete (this life was created outside `apply`, after cronwarden deleted
# the one before). Otherwise a
# write whose own row was lost (an apply interrupted between Temporal and Postgres, and the next
# apply brought a newer definition instead of re-running that one): it held from Temporal's last
# write of the schedule ($3), or the fires of its time would be judged, and replayed, by the one
# before it.
_RECORD_REPLACED = """
INSERT INTO cronwarden.definition_history
       (schedule_id, applied_at, definition_digest, definition)
SELECT $1, CASE WHEN latest.digest IS NULL OR latest.deleted THEN $2::timestamptz
                 ELSE $3::timestamptz END,
       $4::text, $5::jsonb
  FROM (SELECT 1) AS one
  LEFT JOIN LATERAL (SELECT h.definition_digest AS digest, h.deleted
                       FROM cronwarden.definition_history h
                      WHERE h.schedule_id = $1
                      ORDER BY h.applied_at DESC
                      LIMIT 1) AS latest ON true
 WHERE latest.digest IS DISTINCT FROM $4::text
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
SELECT applied_at, definition_digest, definition, deleted
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
) -> None:
    """Record one apply."""
    # The pool's jsonb codec encodes the mapping (store/pool.py).
    await conn.execute(
        _RECORD,
        schedule_id,
        applied_at,
        definition_digest,
        definition,
    )


async def record_replaced(
    conn: Any,
    *,
    schedule_id: str,
    created_at: datetime,
    last_written_at: datetime,
    definition_digest: str,
    definition: dict[str, Any],
) -> None:
    """Record the definition an update replaces, unless it is the latest recorded one (see
    `_RECORD_REPLACED`)."""
    await conn.execute(
        _RECORD_REPLACED, schedule_id, created_at, last_written_at, definition_digest, definition
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


async def history(conn: Any, schedule_id: str) -> list[tuple[datetime, str, dict[str, Any], bool]]:
    """Every recorded definition of the schedule, oldest first, as (applied at, digest,
    definition, deleted); a deleted row ends a life of the schedule id (`record_deleted`)."""
    rows = await conn.fetch(_HISTORY, schedule_id)
    return [
        (r["applied_at"], r["definition_digest"], dict(r["definition"]), r["deleted"]) for r in rows
    ]


# A delete, at Temporal's clock read just before it (the schedule may fire up to the delete
# itself: those fires are done or in flight, never missed). The digest is empty so that no
# definition ever reads as already recorded after it: the next apply of the id records its
# definition again, as the first of a new life.
_RECORD_DELETED = """
INSERT INTO cronwarden.definition_history
       (schedule_id, applied_at, definition_digest, definition, deleted)
VALUES ($1, $2, '', '{}'::jsonb, true)
ON CONFLICT (schedule_id, applied_at) DO NOTHING
"""


async def record_deleted(conn: Any, schedule_id: str, *, at: datetime) -> None:
    """Record that the schedule was deleted at `at` (Temporal's clock, read before the delete),
    once Temporal has deleted it (schedules/lives.py)."""
    await conn.execute(_RECORD_DELETED, schedule_id, at)


# One row per schedule, its newest entry unless that is a delete: `schedules list` and `status`
# read every managed schedule's definition here instead of describing each schedule in Temporal.
_LATEST_ALL = """
SELECT schedule_id, definition
  FROM (SELECT DISTINCT ON (schedule_id) schedule_id, definition, deleted
          FROM cronwarden.definition_history
         ORDER BY schedule_id, applied_at DESC) AS latest
 WHERE NOT deleted
"""


async def latest_all(conn: Any) -> dict[str, dict[str, Any]]:
    """Schedule id -> the definition most recently recorded for it."""
    return {r["schedule_id"]: dict(r["definition"]) for r in await conn.fetch(_LATEST_ALL)}


_FIRST_APPLIED_AT = """
SELECT min(applied_at) FROM cronwarden.definition_history WHERE schedule_id = $1 AND NOT deleted
"""


async def first_applied_at(conn: Any, schedule_id: str) -> datetime | None:
    """When the id's first recorded definition took effect (of its first known life); a
    delete row alone says nothing of when the life it ended began."""
    first: datetime | None = await conn.fetchval(_FIRST_APPLIED_AT, schedule_id)
    return first


# The newest entry's digest of each id asked for; a delete's row has the empty digest, so a
# schedule cronwarden deleted never reads as holding any definition.
_LATEST_DIGESTS = """
SELECT DISTINCT ON (schedule_id) schedule_id, definition_digest
  FROM cronwarden.definition_history
 WHERE schedule_id = ANY($1::text[])
 ORDER BY schedule_id, applied_at DESC
"""


async def latest_digests(conn: Any, schedule_ids: Sequence[str]) -> dict[str, str]:
    """Schedule id -> the digest of its latest recorded entry ('' after a delete)."""
    rows = await conn.fetch(_LATEST_DIGESTS, list(schedule_ids))
    return {r["schedule_id"]: r["definition_digest"] for r in rows}
