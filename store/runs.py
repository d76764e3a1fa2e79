"""The run's commit: fencing check, lease release, outbox record and heartbeat in ONE statement.

It runs either alone (autocommit, when the job made no writes of its own) or as the last
statement of the transaction holding the job's writes. Every part hangs off the previous one:
no fence, no outbox record; no outbox record (the key committed meanwhile), no heartbeat.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

_COMMIT = """
WITH fence AS (
    -- Takes the lock row's lock until COMMIT, so no takeover can slip in between this check
    -- and the commit; the release itself only becomes visible with the commit.
    UPDATE cronwarden.locks
       SET holder = NULL, expires_at = now()
     WHERE name = $1 AND token = $2
    RETURNING token
), recorded AS (
    INSERT INTO cronwarden.outbox AS o
           (logical_key, schedule_id, fire_time, result, committed_at, attempt, fencing_token,
            worker, args_digest, workflow_id, run_id)
    SELECT $3, $4, $5, $6::jsonb, now(), $7, fence.token, $8, $9, $10, $11 FROM fence
    ON CONFLICT (logical_key) DO NOTHING
    RETURNING o.logical_key
), beat AS (
    -- UPDATE only, never an upsert: rows are created by `schedules apply` and removed by
    -- `schedules delete`. A delete landing between the guard's look at Temporal and this
    -- commit must stay deleted; re-creating the row would page "overdue" for ever about a
    -- schedule that no longer exists.
    UPDATE cronwarden.heartbeats AS h SET
        -- A replay of an old key must not move "last fire" backwards.
        last_logical_key = CASE WHEN h.last_fire_time IS NULL OR $5 >= h.last_fire_time
                                THEN $3 ELSE h.last_logical_key END,
        last_fire_time = GREATEST(h.last_fire_time, $5),
        last_success_at = now(),
        next_expected_at = COALESCE($12, h.next_expected_at),
        grace = $13,
        last_error = NULL,
        updated_at = now()
      FROM recorded
     WHERE h.schedule_id = $4 AND $14
    RETURNING 1
)
SELECT EXISTS (SELECT 1 FROM fence) AS fenced, EXISTS (SELECT 1 FROM recorded) AS recorded
"""


@dataclass(frozen=True)
class CommitRecord:
    lock_name: str
    token: int
    logical_key: str
    schedule_id: str
    fire_time: datetime
    result: Any
    attempt: int
    worker: str
    args_digest: str
    workflow_id: str | None
    run_id: str | None
    next_expected_at: datetime | None
    grace: timedelta
    write_heartbeat: bool


@dataclass(frozen=True)
class CommitOutcome:
    fenced: bool
    """Our token was still current: False means the lease was lost and nothing was written."""
    recorded: bool
    """The outbox record is ours: False means the key had committed already."""


async def commit_run(conn: Any, rec: CommitRecord) -> CommitOutcome:
    row = await conn.fetchrow(
        _COMMIT,
        rec.lock_name,
        rec.token,
        rec.logical_key,
        rec.schedule_id,
        rec.fire_time,
        rec.result,
        rec.attempt,
        rec.worker,
        rec.args_digest,
        rec.workflow_id,
        rec.run_id,
        rec.next_expected_at,
        rec.grace,
        rec.write_heartbeat,
    )
    return CommitOutcome(fenced=row["fenced"], recorded=row["recorded"])
