"""Outbox records in bulk, and fires committed through the guard's own statements.

`fill` writes records the way years of fires would leave them, generated inside Postgres
(generate_series), so a million rows cost one statement and no client traffic. `commit_fire`
takes a fire's per-key lease and commits it with the run's commit statement (store/locks.py,
store/runs.py: the two round trips a worker makes around a job that writes nothing), and
`Committer` keeps doing so in the background, remembering every key it committed.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from cronwarden.activities.contract import logical_key, per_key_lock_name
from cronwarden.store import locks
from cronwarden.store.runs import CommitOutcome, CommitRecord, commit_run
from tests.support.waiting import wait_for

# Rows shaped like a worker's: a sha256 digest, Temporal-style ids, a small result. Schedule
# `{prefix}{g % schedules}` fires every `step` seconds from `start`; row g is its (g / schedules)th.
_FILL = """
INSERT INTO cronwarden.outbox
       (logical_key, schedule_id, fire_time, result, committed_at, attempt, fencing_token,
        worker, args_digest, workflow_id, run_id)
SELECT x.sid || '@' || to_char(x.t AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"'),
       x.sid, x.t, '{"rows": 1}'::jsonb, x.t + interval '2 seconds', 1, g,
       'worker-7f9c2d/12', md5(g::text) || md5((g + 1)::text),
       'cronwarden-' || x.sid || '-' || extract(epoch FROM x.t)::bigint,
       md5((g * 7)::text)::uuid::text
  FROM generate_series($1::bigint, $2::bigint - 1) AS g
 CROSS JOIN LATERAL (
       SELECT $3 || (g % $4) AS sid,
              $5::timestamptz + make_interval(secs => (g / $4) * $6) AS t) AS x
"""


async def fill(
    conn: Any,
    *,
    rows: int,
    schedules: int,
    start: datetime,
    step: timedelta,
    prefix: str = "fleet-",
    first: int = 0,
) -> None:
    """Insert records `first .. first + rows - 1` of the fleet (see `_FILL`)."""
    await conn.execute(_FILL, first, first + rows, prefix, schedules, start, step.total_seconds())


# The commit statement a worker of the release before duration bounds sends (store/runs.py as of
# migration 0025, frozen here): the conversion of migration 0019 runs while the workers of the
# previous release commit, and an outbox not yet migrated has none of 0026's columns.
_COMMIT_BEFORE_0026 = """
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
    RETURNING token
), recorded AS (
    INSERT INTO cronwarden.outbox AS o
           (logical_key, schedule_id, fire_time, result, committed_at, attempt, fencing_token,
            worker, args_digest, workflow_id, run_id)
    SELECT $3, $4, $5, $6::jsonb, statement_timestamp(), $7, fence.token, $8, $9, $10, $11
      FROM fence
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
        updated_at = statement_timestamp()
      FROM recorded
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
       statement_timestamp() AS database_now
"""


async def _commit_before_0026(conn: Any, rec: CommitRecord) -> CommitOutcome:
    row = await conn.fetchrow(
        _COMMIT_BEFORE_0026,
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
    )
    return CommitOutcome(
        fenced=row["fenced"],
        recorded=row["recorded"],
        own_transaction=row["own_transaction"],
        fires_ahead=row["fires_ahead"],
        times_accepted=row["times_accepted"],
        database_now=row["database_now"],
    )


async def _has_bounds_columns(conn: Any) -> bool:
    return bool(
        await conn.fetchval(
            "SELECT EXISTS (SELECT FROM pg_attribute WHERE attrelid = 'cronwarden.outbox'::regclass"
            " AND attname = 'breach' AND NOT attisdropped)"
        )
    )


async def commit_fire(
    pool: Any, schedule_id: str, fire_time: datetime, *, worker: str = "committer"
) -> CommitOutcome | None:
    """Lease and commit one fire; None when its key was done before the lease was taken."""
    key = logical_key(schedule_id, fire_time)
    async with pool.acquire() as conn:
        for _ in range(120):
            got = await locks.acquire(
                conn,
                name=per_key_lock_name(key),
                holder=f"{worker}/{key}",
                ttl_seconds=30,
                logical_key=key,
                schedule_id=schedule_id,
            )
            # Its lock timeout ran out (a migration's or upkeep's lock held the outbox): the
            # guard asks again, and so does this.
            if not got.row_locked:
                break
        if got.already_done:
            return None
        assert got.token is not None, got
        record = commit_record(per_key_lock_name(key), got.token, schedule_id, fire_time)
        # This release's statement on a migrated outbox, the previous release's on one that is
        # still being migrated (what the workers committing during a release send).
        if await _has_bounds_columns(conn):
            return await commit_run(conn, record)
        return await _commit_before_0026(conn, record)


def commit_record(
    lock: str, token: int, schedule_id: str, fire_time: datetime, *, args_digest: str = "digest"
) -> CommitRecord:
    """What the guard commits for a fire of a job that wrote nothing, heartbeat left alone."""
    return CommitRecord(
        lock_name=lock,
        token=token,
        logical_key=logical_key(schedule_id, fire_time),
        schedule_id=schedule_id,
        fire_time=fire_time,
        result={"ok": True},
        attempt=1,
        worker="committer",
        args_digest=args_digest,
        workflow_id=None,
        run_id=None,
        grace=timedelta(minutes=1),
        write_heartbeat=False,
    )


@dataclass
class Committer:
    """Commits one fire after another of `schedule_id`, every `step` from `start`, until
    stopped; each is also tried a second time (a retry that must find it done)."""

    pool: Any
    schedule_id: str
    start: datetime
    step: timedelta = timedelta(seconds=1)
    committed: list[str] = field(default_factory=list)
    """Keys whose commit recorded them."""
    duplicates: list[str] = field(default_factory=list)
    """Keys recorded twice (never expected)."""
    errors: list[str] = field(default_factory=list)
    latencies: list[float] = field(default_factory=list)
    """Seconds each fire's lease and commit took, in order."""
    _stop: asyncio.Event = field(default_factory=asyncio.Event)
    _task: asyncio.Task[None] | None = None

    def begin(self) -> None:
        self._task = asyncio.create_task(self._run())

    async def until(self, n: int, *, what: str, timeout: float = 120) -> None:
        """Wait until `n` fires have committed."""

        async def enough() -> bool:
            return len(self.committed) >= n

        await wait_for(enough, timeout=timeout, what=what)

    async def stop(self) -> None:
        self._stop.set()
        if self._task is not None:
            await self._task

    async def _run(self) -> None:
        n = 0
        while not self._stop.is_set():
            fire = self.start + n * self.step
            n += 1
            began = time.perf_counter()
            try:
                outcome = await commit_fire(self.pool, self.schedule_id, fire)
                again = await commit_fire(self.pool, self.schedule_id, fire)
            except Exception as exc:  # recorded, judged by the test
                self.errors.append(f"{fire.isoformat()}: {type(exc).__name__}: {exc}")
                continue
            self.latencies.append(time.perf_counter() - began)
            key = logical_key(self.schedule_id, fire)
            if outcome is not None and outcome.recorded:
                self.committed.append(key)
            if again is not None and again.recorded:
                self.duplicates.append(key)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop.wait(), timeout=0.005)


async def create_months(conn: Any, start: datetime, end: datetime) -> None:
    """The monthly partitions from `start`'s month up to (not including) `end`'s: an
    installation that has run since `start` holds them, created ahead month after month.
    Direct DDL, as the owner: `create_outbox_partitions` creates months from now on only."""
    await conn.execute(
        """
        DO $$
        DECLARE m timestamp := date_trunc('month', $1::timestamptz AT TIME ZONE 'UTC');
        BEGIN
            WHILE m < date_trunc('month', $2::timestamptz AT TIME ZONE 'UTC') LOOP
                EXECUTE format('CREATE TABLE cronwarden_outbox.%I PARTITION OF cronwarden.outbox'
                               ' FOR VALUES FROM (%L) TO (%L)', 'outbox_' || to_char(m, 'YYYY_MM'),
                               m AT TIME ZONE 'UTC', (m + interval '1 month') AT TIME ZONE 'UTC');
                m := m + interval '1 month';
            END LOOP;
        END $$
        """.replace("$1", f"'{start.isoformat()}'").replace("$2", f"'{end.isoformat()}'")
    )
