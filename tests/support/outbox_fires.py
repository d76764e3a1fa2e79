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
        return await commit_run(
            conn, commit_record(per_key_lock_name(key), got.token, schedule_id, fire_time)
        )


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
