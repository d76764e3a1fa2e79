"""Heartbeat rows (`cronwarden.heartbeats`): what the absence monitor watches."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

# Written by `schedules apply`: the first expected fire, so a schedule that never runs at all is
# noticed too. Last-success fields are left alone on an update.
# The definition digest is written with them: a worker's cached next fire times count only for
# the definition they were described from (store/runs.py).
_EXPECT = """
INSERT INTO cronwarden.heartbeats AS h
       (schedule_id, next_expected_at, grace, definition_digest, updated_at)
VALUES ($1, $2, $3, $4, now())
ON CONFLICT (schedule_id) DO UPDATE
   SET next_expected_at = EXCLUDED.next_expected_at,
       grace = EXCLUDED.grace,
       definition_digest = EXCLUDED.definition_digest,
       updated_at = now()
"""

# One statement for every unchanged schedule of an apply: a file of a thousand schedules must
# not cost a thousand round trips when nothing changed. A row without the digest (written before
# rows carried it) gets it; nothing else of an existing row changes.
_EXPECT_IF_MISSING = """
INSERT INTO cronwarden.heartbeats AS h
       (schedule_id, next_expected_at, grace, definition_digest, updated_at)
SELECT schedule_id, next_expected_at, grace, definition_digest, now()
  FROM unnest($1::text[], $2::timestamptz[], $3::interval[], $4::text[])
       AS e(schedule_id, next_expected_at, grace, definition_digest)
ON CONFLICT (schedule_id) DO UPDATE
   SET definition_digest = EXCLUDED.definition_digest
 WHERE h.definition_digest IS DISTINCT FROM EXCLUDED.definition_digest
"""

_RECORD_FAILURE = """
UPDATE cronwarden.heartbeats
   SET last_error = $2, updated_at = now()
 WHERE schedule_id = $1
"""

# A live fire that ended `overlap-locked` at the lease. UPDATE only, like the commit: a
# schedule deleted meanwhile keeps no row.
_RECORD_LEASE_SKIP = """
UPDATE cronwarden.heartbeats
   SET lease_skips = lease_skips + 1,
       last_lease_skip_key = $2,
       last_lease_skip_holder = $3,
       last_lease_skip_at = now(),
       updated_at = now()
 WHERE schedule_id = $1
"""

_GET = "SELECT * FROM cronwarden.heartbeats WHERE schedule_id = $1"


async def expect(
    conn: Any,
    *,
    schedule_id: str,
    next_expected_at: datetime | None,
    grace: timedelta,
    definition_digest: str | None,
) -> None:
    await conn.execute(_EXPECT, schedule_id, next_expected_at, grace, definition_digest)


async def expect_all_if_missing(
    conn: Any, expected: Sequence[tuple[str, datetime | None, timedelta, str]]
) -> None:
    """Create the missing rows of (schedule id, next expected fire, grace, definition digest);
    of the others only a stale digest is corrected."""
    if expected:
        ids, times, graces, digests = zip(*expected, strict=True)
        await conn.execute(_EXPECT_IF_MISSING, list(ids), list(times), list(graces), list(digests))


async def record_failure(conn: Any, *, schedule_id: str, error: str) -> None:
    await conn.execute(_RECORD_FAILURE, schedule_id, error[:2000])


async def record_lease_skip(
    conn: Any, *, schedule_id: str, logical_key: str, holder: str | None
) -> None:
    await conn.execute(_RECORD_LEASE_SKIP, schedule_id, logical_key, holder)


async def get(conn: Any, schedule_id: str) -> dict[str, Any] | None:
    row = await conn.fetchrow(_GET, schedule_id)
    return dict(row) if row is not None else None


# An operator pause (`schedules pause`): the monitor skips paused rows. Upserted, so a schedule
# whose row is missing still gets its pause recorded instead of paging.
_PAUSE = """
INSERT INTO cronwarden.heartbeats AS h (schedule_id, paused, paused_reason, updated_at)
VALUES ($1, true, $2, now())
ON CONFLICT (schedule_id) DO UPDATE
   SET paused = true, paused_reason = EXCLUDED.paused_reason, updated_at = now()
"""

# `schedules unpause`: the time spent paused is not a missed run, so the next expected fire is
# the schedule's next one from now, not the one that passed while paused.
_RESUME = """
UPDATE cronwarden.heartbeats
   SET paused = false, paused_reason = NULL, next_expected_at = $2, updated_at = now()
 WHERE schedule_id = $1
"""

# `schedules unpause`, first step: a failure after it leaves the monitor paging (loud), never a
# row still marked paused for a schedule Temporal runs again (silent).
_CLEAR_PAUSE = """
UPDATE cronwarden.heartbeats
   SET paused = false, paused_reason = NULL, updated_at = now()
 WHERE schedule_id = $1
"""

_DELETE = "DELETE FROM cronwarden.heartbeats WHERE schedule_id = $1"

_ALL = "SELECT * FROM cronwarden.heartbeats ORDER BY schedule_id"


async def pause(conn: Any, *, schedule_id: str, reason: str | None) -> None:
    await conn.execute(_PAUSE, schedule_id, reason)


async def resume(conn: Any, *, schedule_id: str, next_expected_at: datetime | None) -> bool:
    """False when the schedule has no heartbeat row (nothing to resume)."""
    status: str = await conn.execute(_RESUME, schedule_id, next_expected_at)
    return status != "UPDATE 0"


async def clear_pause(conn: Any, schedule_id: str) -> bool:
    """False when the schedule has no heartbeat row."""
    status: str = await conn.execute(_CLEAR_PAUSE, schedule_id)
    return status != "UPDATE 0"


async def delete(conn: Any, schedule_id: str) -> None:
    await conn.execute(_DELETE, schedule_id)


async def all_rows(conn: Any) -> dict[str, dict[str, Any]]:
    return {row["schedule_id"]: dict(row) for row in await conn.fetch(_ALL)}
