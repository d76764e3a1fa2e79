"""What `schedules apply` applied: the files in force, in order (`cronwarden.applied_files`),
and per schedule what Temporal held after its last apply (`cronwarden.applied_schedules`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

# One apply of a task queue at a time, for its whole length: an older file's apply that started
# first must not finish after a newer one and overwrite it. A session lock on a connection the
# apply holds: released when the apply ends, or when its process dies and the connection closes.
_LOCK = "SELECT pg_advisory_lock(hashtextextended('cronwarden.apply:' || $1, 0))"
_UNLOCK = "SELECT pg_advisory_unlock(hashtextextended('cronwarden.apply:' || $1, 0))"

# The file in force (the last row) and when this file was last in force, if ever.
_STANDING = """
SELECT latest.sequence, latest.file_digest, latest.applied_at,
       (SELECT max(f.sequence) FROM cronwarden.applied_files f
         WHERE f.task_queue = $1 AND f.file_digest = $2) AS this_sequence,
       (SELECT max(f.applied_at) FROM cronwarden.applied_files f
         WHERE f.task_queue = $1 AND f.file_digest = $2) AS this_applied_at
  FROM cronwarden.applied_files latest
 WHERE latest.task_queue = $1
 ORDER BY latest.sequence DESC
 LIMIT 1
"""

_RECORD_FILE = """
INSERT INTO cronwarden.applied_files (task_queue, file_digest, schedules, forced)
VALUES ($1, $2, $3, $4)
RETURNING sequence
"""

_RECORDED = """
SELECT schedule_id, definition_digest, listed_digest
  FROM cronwarden.applied_schedules
 WHERE schedule_id = ANY($1::text[])
"""

_RECORD_SCHEDULES = """
INSERT INTO cronwarden.applied_schedules (schedule_id, definition_digest, listed_digest)
SELECT * FROM unnest($1::text[], $2::text[], $3::text[])
ON CONFLICT (schedule_id) DO UPDATE
   SET definition_digest = excluded.definition_digest,
       listed_digest = excluded.listed_digest,
       recorded_at = clock_timestamp()
"""


@dataclass(frozen=True)
class Standing:
    """Where a file stands against the files applied before on its task queue."""

    latest_sequence: int | None
    latest_digest: str | None
    latest_applied_at: datetime | None
    sequence: int | None
    """The last time this file was the one in force (None: never applied)."""
    applied_at: datetime | None

    @property
    def is_latest(self) -> bool:
        return self.latest_digest is not None and self.sequence == self.latest_sequence

    @property
    def superseded(self) -> bool:
        """Applied before, and another file was applied after it."""
        return self.sequence is not None and not self.is_latest


async def lock(conn: Any, task_queue: str) -> None:
    """Wait until no other apply of `task_queue` runs, then hold it off until `unlock`."""
    await conn.execute(_LOCK, task_queue)


async def unlock(conn: Any, task_queue: str) -> None:
    await conn.execute(_UNLOCK, task_queue)


async def standing(conn: Any, task_queue: str, file_digest: str) -> Standing:
    row = await conn.fetchrow(_STANDING, task_queue, file_digest)
    if row is None:
        return Standing(None, None, None, None, None)
    return Standing(
        latest_sequence=row["sequence"],
        latest_digest=row["file_digest"],
        latest_applied_at=row["applied_at"],
        sequence=row["this_sequence"],
        applied_at=row["this_applied_at"],
    )


async def record_file(
    conn: Any, *, task_queue: str, file_digest: str, schedules: int, forced: bool
) -> int:
    """Record that this file is now the one in force; its sequence number."""
    sequence: int = await conn.fetchval(_RECORD_FILE, task_queue, file_digest, schedules, forced)
    return sequence


async def recorded_schedules(conn: Any, schedule_ids: Sequence[str]) -> dict[str, tuple[str, str]]:
    """Schedule id -> (definition digest, listed digest) recorded at its last apply."""
    rows = await conn.fetch(_RECORDED, list(schedule_ids))
    return {r["schedule_id"]: (r["definition_digest"], r["listed_digest"]) for r in rows}


async def record_schedules(conn: Any, rows: Sequence[tuple[str, str, str]]) -> None:
    """Record (schedule id, definition digest, listed digest) of schedules Temporal was just
    seen (described) to hold; one statement for all of them."""
    if rows:
        ids, digests, listed = zip(*rows, strict=True)
        await conn.execute(_RECORD_SCHEDULES, list(ids), list(digests), list(listed))
