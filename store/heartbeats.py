"""Heartbeat rows (`cronwarden.heartbeats`): what the absence monitor watches."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from cronwarden.redact import for_storage

# Written by `schedules apply`: the first expected fire, so a schedule that never runs at all is
# noticed too. Last-success fields are left alone on an update.
# The definition digest is written with them: a worker's cached next fire times count only for
# the definition they were described from (store/runs.py). So is the horizon of a local-time
# schedule's compiled entries (`compiled_until`, migration 0023), NULL for any other: a schedule
# that stops being zoned stops being watched for it.
_EXPECT = """
INSERT INTO cronwarden.heartbeats AS h
       (schedule_id, next_expected_at, grace, definition_digest, compiled_until, updated_at)
VALUES ($1, $2, $3, $4, $5, now())
ON CONFLICT (schedule_id) DO UPDATE
   SET next_expected_at = EXCLUDED.next_expected_at,
       grace = EXCLUDED.grace,
       definition_digest = EXCLUDED.definition_digest,
       compiled_until = EXCLUDED.compiled_until,
       updated_at = now()
"""

# One statement for every unchanged schedule of an apply: a file of a thousand schedules must
# not cost a thousand round trips when nothing changed. A row holding another digest (written
# before rows carried it, or an update that reached Temporal while its row transaction failed)
# describes another spec: it takes the deadline and grace of the spec Temporal holds too, else
# the monitor would judge the schedule by the old spec's. A row with no deadline (a create
# whose first fire was never filled in, see `fill_first_fires`) gets Temporal's next fire. Of
# any other row nothing changes: its last success and deadline stay. The horizon goes with the
# digest (the compiled years are part of it), and is written wherever it differs: a row written
# before rows carried it gets it from an unchanged re-apply.
_EXPECT_IF_MISSING = """
INSERT INTO cronwarden.heartbeats AS h
       (schedule_id, next_expected_at, grace, definition_digest, compiled_until, updated_at)
SELECT schedule_id, next_expected_at, grace, definition_digest, compiled_until, now()
  FROM unnest($1::text[], $2::timestamptz[], $3::interval[], $4::text[], $5::timestamptz[])
       AS e(schedule_id, next_expected_at, grace, definition_digest, compiled_until)
ON CONFLICT (schedule_id) DO UPDATE
   SET next_expected_at = CASE
           WHEN h.definition_digest IS DISTINCT FROM EXCLUDED.definition_digest
           THEN EXCLUDED.next_expected_at
           ELSE coalesce(h.next_expected_at, EXCLUDED.next_expected_at) END,
       grace = CASE WHEN h.definition_digest IS DISTINCT FROM EXCLUDED.definition_digest
                    THEN EXCLUDED.grace ELSE h.grace END,
       definition_digest = EXCLUDED.definition_digest,
       compiled_until = EXCLUDED.compiled_until,
       updated_at = now()
 WHERE h.definition_digest IS DISTINCT FROM EXCLUDED.definition_digest
    OR (h.next_expected_at IS NULL AND EXCLUDED.next_expected_at IS NOT NULL)
    OR h.compiled_until IS DISTINCT FROM EXCLUDED.compiled_until
"""

# A schedule just created: its row is written before its first fire is known (NULL: the
# monitor never pages on a row without a deadline), so a fire right after the create finds
# the row its commit updates. The first fire is filled in afterwards, one statement for all,
# only where nothing else set a deadline meanwhile: a run's commit (it expects the fire after
# its own), or a concurrent apply of another definition (its digest).
_FILL_FIRST_FIRES = """
UPDATE cronwarden.heartbeats AS h
   SET next_expected_at = f.next_expected_at, updated_at = now()
  FROM unnest($1::text[], $2::timestamptz[], $3::text[])
       AS f(schedule_id, next_expected_at, definition_digest)
 WHERE h.schedule_id = f.schedule_id
   AND h.definition_digest = f.definition_digest
   AND h.next_expected_at IS NULL
   AND f.next_expected_at IS NOT NULL
"""

_RECORD_FAILURE = """
UPDATE cronwarden.heartbeats
   SET last_error = $2, updated_at = now()
 WHERE schedule_id = $1
"""

# A `backfill run` replay that failed: recorded apart from the live `last_error` (which status,
# the status page, overdue pages and the orphan check read as the live schedule's), with the
# key that failed. `updated_at` is left alone: the monitor lifts a stale pause only from a row
# unchanged since it read it (`_LIFT_STALE_PAUSE`), and `apply` forgets an old pause only when
# nothing was recorded since (`_FORGET_PAUSE`): a replay changes neither the pause nor the live
# grid, so it must not hold either back.
_RECORD_REPLAY_FAILURE = """
UPDATE cronwarden.heartbeats
   SET last_replay_error = $2, last_replay_error_key = $3, last_replay_error_at = now()
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
    compiled_until: datetime | None = None,
) -> None:
    """`compiled_until`: where a local-time schedule's compiled entries end (None: a UTC
    schedule, or one that fires nothing from then on)."""
    await conn.execute(
        _EXPECT, schedule_id, next_expected_at, grace, definition_digest, compiled_until
    )


async def expect_all_if_missing(
    conn: Any,
    expected: Sequence[tuple[str, datetime | None, timedelta, str, datetime | None]],
) -> None:
    """Create the missing rows of (schedule id, next expected fire, grace, definition digest,
    compiled horizon); of the others only a stale digest or horizon is corrected."""
    if expected:
        ids, times, graces, digests, horizons = zip(*expected, strict=True)
        await conn.execute(
            _EXPECT_IF_MISSING,
            list(ids),
            list(times),
            list(graces),
            list(digests),
            list(horizons),
        )


async def fill_first_fires(conn: Any, first: Sequence[tuple[str, datetime | None, str]]) -> None:
    """Set the deadline of each (schedule id, first fire, digest) created with none yet, see
    `_FILL_FIRST_FIRES`."""
    if first:
        ids, times, digests = zip(*first, strict=True)
        await conn.execute(_FILL_FIRST_FIRES, list(ids), list(times), list(digests))


async def record_failure(conn: Any, *, schedule_id: str, error: str) -> None:
    """The live schedule's `last_error`. Scrubbed here, the one write of it: status, the status
    page and every page read it back as it is (see `redact.for_storage`)."""
    await conn.execute(_RECORD_FAILURE, schedule_id, for_storage(error))


async def record_replay_failure(
    conn: Any, *, schedule_id: str, logical_key: str, error: str
) -> None:
    """A failed replay's error, apart from the live one (see `_RECORD_REPLAY_FAILURE`)."""
    await conn.execute(_RECORD_REPLAY_FAILURE, schedule_id, for_storage(error), logical_key)


async def record_lease_skip(
    conn: Any, *, schedule_id: str, logical_key: str, holder: str | None
) -> None:
    await conn.execute(_RECORD_LEASE_SKIP, schedule_id, logical_key, holder)


async def get(conn: Any, schedule_id: str) -> dict[str, Any] | None:
    row = await conn.fetchrow(_GET, schedule_id)
    return dict(row) if row is not None else None


# An operator pause (`schedules pause`): the monitor skips paused rows. Upserted, so a schedule
# whose row is missing still gets its pause recorded instead of paging.
# `paused_until` (migration 0027): when the monitor ends the pause; NULL (an open-ended pause)
# replaces the end of a timed one, and a new pause forgets the last try's failure to end one.
_PAUSE = """
INSERT INTO cronwarden.heartbeats AS h
       (schedule_id, paused, paused_reason, paused_until, updated_at)
VALUES ($1, true, $2, $3, now())
ON CONFLICT (schedule_id) DO UPDATE
   SET paused = true, paused_reason = EXCLUDED.paused_reason,
       paused_until = EXCLUDED.paused_until, unpause_error = NULL, unpause_failed_at = NULL,
       updated_at = now()
"""

# `schedules unpause`, first step, before Temporal is unpaused: the pause is lifted and the
# deadline moved in ONE statement. Two statements (clear the flag, then set the deadline) let a
# monitor pass in between see an unpaused row with the deadline that passed while it was
# paused, and page for nothing. The deadline is never earlier than now: a failure after this
# step leaves the monitor paging after the grace (loud), never a row still marked paused for a
# schedule Temporal runs again (silent). No deadline (a spec with no future fire) stays none.
_LIFT_PAUSE = """
UPDATE cronwarden.heartbeats
   SET paused = false, paused_reason = NULL, updated_at = now(),
       next_expected_at = CASE WHEN coalesce(next_expected_at, $2) IS NULL THEN NULL
                               ELSE GREATEST(next_expected_at, $2, now()) END
 WHERE schedule_id = $1
"""

# `schedules unpause`, last step, once Temporal runs the schedule again: the time spent paused
# is not a missed run, so the next expected fire is the schedule's next one from now. Not on a
# row paused again meanwhile: that pause stands.
_RESUME = """
UPDATE cronwarden.heartbeats
   SET next_expected_at = $2, updated_at = now()
 WHERE schedule_id = $1 AND NOT paused
"""

# The monitor found Temporal running a schedule whose row says paused (unpaused in Temporal's
# UI or CLI): the row's pause no longer holds. Only if the row is unchanged since the monitor
# read it, so a `schedules pause` that landed meanwhile (Temporal first, then this row) stands.
_LIFT_STALE_PAUSE = """
UPDATE cronwarden.heartbeats
   SET paused = false, paused_reason = NULL, next_expected_at = $3, updated_at = now()
 WHERE schedule_id = $1 AND paused AND updated_at = $2
"""

# `apply` created the schedule (again): Temporal creates schedules unpaused, so a pause recorded
# for an earlier schedule of that id (deleted outside cronwarden) no longer holds. A pause
# recorded since the create was requested is of the new schedule (`schedules pause` right
# after it): that one stands.
_FORGET_PAUSE = """
UPDATE cronwarden.heartbeats
   SET paused = false, paused_reason = NULL, updated_at = now()
 WHERE schedule_id = $1 AND paused AND updated_at < $2
"""

_PAUSED = """
SELECT schedule_id, next_expected_at, updated_at
  FROM cronwarden.heartbeats
 WHERE paused
 ORDER BY schedule_id
"""

_DELETE = "DELETE FROM cronwarden.heartbeats WHERE schedule_id = $1"

_ALL = "SELECT * FROM cronwarden.heartbeats ORDER BY schedule_id"


async def pause(
    conn: Any, *, schedule_id: str, reason: str | None, until: datetime | None = None
) -> None:
    """`until`: when the monitor unpauses it (None: paused until `schedules unpause`)."""
    await conn.execute(_PAUSE, schedule_id, reason, until)


# Timed pauses whose end has passed, by the database's clock (index of migration 0027).
_ENDED_PAUSES = """
SELECT schedule_id, paused_until, unpause_error
  FROM cronwarden.heartbeats
 WHERE paused AND paused_until IS NOT NULL AND paused_until <= now()
 ORDER BY paused_until, schedule_id
"""

# The monitor could not end a timed pause: why, and since when (kept from the first failure).
# Only on the pause it tried to end: one re-issued or lifted meanwhile is another story.
# `updated_at` is left alone: the pause itself did not change (`_LIFT_STALE_PAUSE` compares it).
_RECORD_UNPAUSE_FAILURE = """
UPDATE cronwarden.heartbeats
   SET unpause_error = $3, unpause_failed_at = coalesce(unpause_failed_at, now())
 WHERE schedule_id = $1 AND paused AND paused_until = $2
"""


async def ended_pauses(conn: Any) -> list[dict[str, Any]]:
    """Rows whose timed pause has ended (`paused_until` passed) and that are still paused."""
    return [dict(r) for r in await conn.fetch(_ENDED_PAUSES)]


async def record_unpause_failure(
    conn: Any, *, schedule_id: str, paused_until: datetime, error: str
) -> bool:
    """False when the row no longer holds that timed pause (see `_RECORD_UNPAUSE_FAILURE`)."""
    status: str = await conn.execute(
        _RECORD_UNPAUSE_FAILURE, schedule_id, paused_until, for_storage(error)
    )
    return status != "UPDATE 0"


async def lift_pause(conn: Any, schedule_id: str, *, next_expected_at: datetime | None) -> bool:
    """Clear the pause, with a deadline no earlier than now (see `_LIFT_PAUSE`). False when
    the schedule has no heartbeat row."""
    status: str = await conn.execute(_LIFT_PAUSE, schedule_id, next_expected_at)
    return status != "UPDATE 0"


async def resume(conn: Any, *, schedule_id: str, next_expected_at: datetime | None) -> bool:
    """Expect the next fire from now. False when the row is missing or paused again."""
    status: str = await conn.execute(_RESUME, schedule_id, next_expected_at)
    return status != "UPDATE 0"


def lifted_deadline(recorded: datetime | None, temporal_next: datetime | None) -> datetime | None:
    """The deadline of a row whose pause Temporal no longer holds: Temporal's next fire (the
    fires that passed while it was paused were not missed), or the row's own if that is later.
    None when Temporal expects no fire at all. `status` judges such a row with it too, so it
    and the monitor agree before the monitor has written it."""
    if temporal_next is None:
        return None
    return max(recorded, temporal_next) if recorded is not None else temporal_next


async def paused_rows(conn: Any) -> list[dict[str, Any]]:
    """Rows marked paused, with what `lift_stale_pause` needs."""
    return [dict(r) for r in await conn.fetch(_PAUSED)]


async def lift_stale_pause(
    conn: Any, *, schedule_id: str, seen_updated_at: datetime, next_expected_at: datetime | None
) -> bool:
    """False when the row changed since it was read (or is no longer paused)."""
    status: str = await conn.execute(
        _LIFT_STALE_PAUSE, schedule_id, seen_updated_at, next_expected_at
    )
    return status != "UPDATE 0"


async def forget_pause(conn: Any, schedule_id: str, *, recorded_before: datetime) -> None:
    """Clear a pause recorded before `recorded_before` (the time the create was requested)."""
    await conn.execute(_FORGET_PAUSE, schedule_id, recorded_before)


async def delete(conn: Any, schedule_id: str) -> None:
    await conn.execute(_DELETE, schedule_id)


async def all_rows(conn: Any) -> dict[str, dict[str, Any]]:
    return {row["schedule_id"]: dict(row) for row in await conn.fetch(_ALL)}
