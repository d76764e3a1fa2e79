"""The run's commit: fencing check, lease release, outbox record and heartbeat in ONE statement.

It runs either alone (autocommit, when the job made no writes of its own) or as the last
statement of the transaction holding the job's writes. Every part hangs off the previous one:
no fence, no outbox record; no outbox record (the key committed meanwhile), no heartbeat.
No network call is made while it runs: the next expected fire is picked here, by the database's
clock, from the times the worker cached (activities/next_fires.py). By this statement's clock
(`statement_timestamp()`), not now(): inside the job's transaction now() is the time of its
BEGIN, and a job that took long would pick a fire that has already passed by its COMMIT.
Every time it writes is that clock too (the last success, the outbox record's `committed_at`,
the released lease's `expires_at`, the last replay): a job that held its transaction for an
hour committed at its end, not at its start.

The run's duration bounds are judged here too, in the same statement (no round trip of their
own): its start is when its lease was taken (the lock row's `acquired_at`, the database's
clock; the job starts right after), its duration the job's own, measured by the worker's
monotonic clock from the job's start to its return. The bound broken (`breach`) goes on the
outbox record, and a live run's on the heartbeat row, where the monitor reads it.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

_COMMIT = """
WITH fence AS (
    -- Takes the lock row's lock until COMMIT, so no takeover can slip in between this check
    -- and the commit; the release itself only becomes visible with the commit.
    -- The job's transaction must still be the one `ctx.transaction()` opened (its marker is
    -- local to it): a job that committed it and began another must not commit the outbox
    -- record with the writes it made after that.
    UPDATE cronwarden.locks
       SET holder = NULL, expires_at = statement_timestamp()
     WHERE name = $1 AND token = $2
       AND ($17::text IS NULL OR current_setting('cronwarden.run_marker', true) = $17)
    RETURNING token, acquired_at
), judged AS (
    -- One bound per run: a duration out of bounds first (it says what the job did), then a
    -- late start, which a replay never is (it runs a past fire on purpose). A NULL bound or
    -- duration compares to NULL and breaks nothing.
    SELECT CASE WHEN $20::interval > $22::interval THEN 'too-slow'
                WHEN $20::interval < $21::interval THEN 'too-fast'
                WHEN NOT $16 AND fence.acquired_at - $5 > $23::interval THEN 'late-start'
           END AS breach
      FROM fence
), recorded AS (
    INSERT INTO cronwarden.outbox AS o
           (logical_key, schedule_id, fire_time, result, committed_at, attempt, fencing_token,
            worker, args_digest, workflow_id, run_id, started_at, duration, breach)
    SELECT $3, $4, $5, $6::jsonb, statement_timestamp(), $7, fence.token, $8, $9, $10, $11,
           fence.acquired_at, $20::interval, judged.breach
      FROM fence, judged
    -- The one unique index is (logical_key, fire_time) (partitioned by fire time, migration
    -- 0019); no arbiter named, so the statement reads the same on an outbox not yet converted.
    ON CONFLICT DO NOTHING
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
        last_success_at = statement_timestamp(),
        -- The first cached fire after this statement's time, never the worker's clock; only
        -- times described from the definition the row was applied with (a row applied before
        -- rows carried a digest takes them as before). None: the row keeps its deadline.
        -- Temporal listing no fire at all ahead for the row's own definition means the spec
        -- has run out (its end_at passed): nothing is expected any more, so the monitor does
        -- not page about a schedule that finished.
        next_expected_at = CASE WHEN $18 AND h.definition_digest = $15 THEN NULL ELSE COALESCE(
            CASE WHEN h.definition_digest IS NULL OR h.definition_digest = $15
                 THEN (SELECT min(t) FROM unnest($12::timestamptz[]) AS t
                        WHERE t > statement_timestamp())
            END,
            h.next_expected_at) END,
        grace = $13,
        last_error = NULL,
        -- The last live run's judgement: the monitor pages while it names a broken bound,
        -- and resolves once a run within its bounds clears it.
        duration_min = $21::interval,
        duration_max = $22::interval,
        late_start = $23::interval,
        last_run_key = $3,
        last_run_started_at = (SELECT acquired_at FROM fence),
        last_run_duration = $20::interval,
        last_run_breach = judged.breach,
        updated_at = statement_timestamp()
      FROM recorded, judged
     WHERE h.schedule_id = $4 AND $14 AND NOT $16
    RETURNING h.definition_digest IS NULL OR h.definition_digest = $15 AS times_accepted
), replayed AS (
    -- A replay re-applies a past fire: it records itself apart and never moves the live
    -- grid's last success, next expected fire or last error, so it cannot hide a live fire
    -- that has not committed. Nor `updated_at`: the monitor lifts a stale pause only from a
    -- row unchanged since it read it, and `apply` forgets an old pause only when nothing was
    -- recorded since (store/heartbeats.py); a replay changes neither the pause nor the grid.
    -- Committing the key a replay failed on clears that failure; another key's commit does
    -- not (the failed key is still not done).
    UPDATE cronwarden.heartbeats AS h SET
        last_replay_at = statement_timestamp(),
        last_replay_key = $3,
        last_replay_error = CASE WHEN h.last_replay_error_key = $3 THEN NULL
                                 ELSE h.last_replay_error END,
        last_replay_error_at = CASE WHEN h.last_replay_error_key = $3 THEN NULL
                                    ELSE h.last_replay_error_at END,
        last_replay_error_key = CASE WHEN h.last_replay_error_key = $3 THEN NULL
                                     ELSE h.last_replay_error_key END
      FROM recorded
     WHERE h.schedule_id = $4 AND $14 AND $16
    RETURNING 1
)
SELECT EXISTS (SELECT 1 FROM fence) AS fenced,
       -- From here to COMMIT (the next round trip) the fence keeps the lease row locked: a
       -- holder stopped or cut off in between is ended by the server after this long idle
       -- ($19, the lease's TTL), instead of holding every acquire of the lease for as long as
       -- it stays stopped. NULL: no job transaction (the statement commits by itself).
       CASE WHEN $19::text IS NOT NULL
            THEN set_config('idle_in_transaction_session_timeout', $19, true) END AS idle_set,
       EXISTS (SELECT 1 FROM recorded) AS recorded,
       ($17::text IS NULL OR current_setting('cronwarden.run_marker', true) = $17)
           AS own_transaction,
       (SELECT count(*) FROM unnest($12::timestamptz[]) AS t WHERE t > statement_timestamp())
           AS fires_ahead,
       COALESCE((SELECT times_accepted FROM beat), false) AS times_accepted,
       statement_timestamp() AS database_now,
       (SELECT breach FROM judged) AS breach
"""

# Sent by `ctx.transaction()` right after BEGIN, in the same round trip as each other (a simple
# query, the only kind that carries two statements; so its values are spelled out, and both are
# the guard's own, checked below):
# - a savepoint that exists only in this transaction. An aborted transaction answers nothing but
#   ROLLBACK (and ROLLBACK TO SAVEPOINT): rolling back to it is how the guard asks an aborted
#   transaction whether it is still ours, or one the job began after ending ours
#   (`ROLLBACK_TO_RUN_START` below);
# - the marker, local to this transaction, which the commit statement checks;
# - how long the transaction may sit idle while the job runs (e.g. '960000ms': the job's timeout
#   and a margin, so it never ends a healthy job, which the guard times out first; it ends the
#   transaction of a holder stopped or cut off mid-job, whose row locks would otherwise block the
#   taker's job). The commit statement tightens it to the lease's TTL until COMMIT.
RUN_SAVEPOINT = "cronwarden_run_start"
_MARKER = re.compile(r"[0-9a-z_]{1,64}")
_TIMEOUT = re.compile(r"0|[1-9][0-9]*ms")


def begin_run_script(marker: str, idle_timeout: str) -> str:
    if not _MARKER.fullmatch(marker) or not _TIMEOUT.fullmatch(idle_timeout):
        raise ValueError(f"not a run marker and timeout: {marker!r}, {idle_timeout!r}")
    return (
        f"SAVEPOINT {RUN_SAVEPOINT};"
        f" SELECT set_config('cronwarden.run_marker', '{marker}', true),"
        f" set_config('idle_in_transaction_session_timeout', '{idle_timeout}', true)"
    )


ROLLBACK_TO_RUN_START = f"ROLLBACK TO SAVEPOINT {RUN_SAVEPOINT}"
CURRENT_MARKER = "SELECT current_setting('cronwarden.run_marker', true)"


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
    grace: timedelta
    write_heartbeat: bool
    next_fire_times: Sequence[datetime] = ()
    """Cached next action times; the statement takes the first after its own time."""
    times_digest: str | None = None
    """The definition digest those times were described from."""
    replay: bool = False
    """A replay's commit records itself apart from the live heartbeat."""
    transaction_marker: str | None = None
    """The marker `ctx.transaction()` set in the job's transaction (None: no job transaction)."""
    schedule_finished: bool = False
    """Temporal's describe (the one `times_digest` names) listed no next action time at all."""
    commit_idle_timeout: str | None = None
    """How long the job's transaction may sit idle between this statement and COMMIT (e.g.
    '60000ms'); None when there is no job transaction."""
    duration: timedelta | None = None
    """How long the job took, from its start to its return (None: not measured)."""
    min_duration: timedelta | None = None
    """The schedule's `expected_duration.min` (None: no bound)."""
    max_duration: timedelta | None = None
    """The schedule's `expected_duration.max` (None: no bound)."""
    late_start: timedelta | None = None
    """The schedule's `late_start` (None: no bound)."""


@dataclass(frozen=True)
class CommitOutcome:
    fenced: bool
    """Our token was still current: False means the lease was lost and nothing was written."""
    recorded: bool
    """The outbox record is ours: False means the key had committed already."""
    own_transaction: bool = True
    """False: the job ended the transaction `ctx.transaction()` opened; nothing was written."""
    fires_ahead: int = 0
    """How many cached next fire times were after the statement's time."""
    times_accepted: bool = False
    """The heartbeat row took cached times (their definition digest matched the row's)."""
    database_now: datetime | None = None
    """The statement's time by the database's clock."""
    breach: str | None = None
    """The bound the run broke (`too-fast`, `too-slow`, `late-start`), or None."""


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
        list(rec.next_fire_times),
        rec.grace,
        rec.write_heartbeat,
        rec.times_digest,
        rec.replay,
        rec.transaction_marker,
        rec.schedule_finished,
        rec.commit_idle_timeout,
        rec.duration,
        rec.min_duration,
        rec.max_duration,
        rec.late_start,
    )
    return CommitOutcome(
        fenced=row["fenced"],
        recorded=row["recorded"],
        own_transaction=row["own_transaction"],
        fires_ahead=row["fires_ahead"],
        times_accepted=row["times_accepted"],
        database_now=row["database_now"],
        breach=row["breach"],
    )


# The schedule's newest runs that recorded a start (records from before migration 0026 have
# none), by the outbox's (schedule_id, fire_time) index.
_RECENT_TIMINGS = """
SELECT logical_key, fire_time, started_at, duration, breach, workflow_id
  FROM cronwarden.outbox
 WHERE schedule_id = $1 AND started_at IS NOT NULL
 ORDER BY fire_time DESC
 LIMIT $2
"""


async def recent_timings(conn: Any, schedule_id: str, *, limit: int) -> list[dict[str, Any]]:
    """The newest `limit` runs of the schedule with their start, duration and broken bound."""
    return [dict(r) for r in await conn.fetch(_RECENT_TIMINGS, schedule_id, limit)]
