"""The model's steps run as the real statements on Postgres, and the real outcome read back in
the model's terms, so a test can hold the two side by side after every step.

Each model worker has a connection of its own; the environment (a lease or a place expiring)
has one more, and sets `expires_at` into the past directly. Leases and queue places are taken
with TTLs far longer than a walk lasts: only the environment's steps make them expire, as in
the model. A crashed worker's connection holds no transaction between steps (a commit is one
model step), so it is simply never used again.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from cronwarden.store import locks
from cronwarden.store.runs import CommitRecord, commit_run
from tests.model.protocol import Step
from tests.model.state import KEYS, NONE, Pc, Place, State, is_replay
from tests.model.statements import Acquired, Committed, Result

# Far longer than any walk: nothing expires unless the environment's step says so.
TTL_SECONDS = 3600.0
FIRE = datetime(2026, 1, 1, tzinfo=UTC)

_SNAPSHOT = """
SELECT
  (SELECT row_to_json(l) FROM (
      SELECT holder, attempt, token, expires_at > clock_timestamp() AS live, logical_key
        FROM cronwarden.locks WHERE name = $1) l) AS lease,
  (SELECT COALESCE(json_agg(w ORDER BY w.enqueued_at, w.waiter), '[]') FROM (
      SELECT waiter, attempt, expires_at <= clock_timestamp() AS expired, enqueued_at
        FROM cronwarden.lock_waiters WHERE name = $1) w) AS places,
  ARRAY(SELECT logical_key FROM cronwarden.outbox WHERE logical_key = ANY($2::text[]))
      AS recorded,
  ARRAY(SELECT logical_key FROM public.test_effects WHERE logical_key = ANY($2::text[]))
      AS effects
"""


class RealLease:
    """One walk's lease, keys and holders, named apart from every other walk's."""

    def __init__(self, workers: Sequence[Any], environment: Any, tag: str) -> None:
        self.workers = workers
        self.environment = environment
        self.schedule_id = f"model-{tag}"
        self.lock = f"schedule:{self.schedule_id}"
        self.fires = [FIRE + timedelta(minutes=key) for key in range(len(KEYS))]
        self.keys = [f"{self.schedule_id}@{fire.isoformat()}" for fire in self.fires]
        self.holders = [f"{self.schedule_id}-{spec.name}/run/activity" for spec in KEYS]
        self.tokens: dict[tuple[int, int], int] = {}
        """The real token each attempt took (the model numbers its own)."""

    async def run(self, step: Step) -> Result:
        """Run the statements of one model step; what they answered, in the model's terms."""
        key, attempt = step.key, step.attempt
        if step.name.startswith("acquire_lease"):
            got = await locks.acquire(
                self.workers[step.worker],
                name=self.lock,
                holder=self.holders[key],
                attempt=attempt,
                ttl_seconds=TTL_SECONDS,
                logical_key=self.keys[key],
                schedule_id=self.schedule_id,
                replay=is_replay(key),
                wait_for_any=KEYS[key].wait_for_any,
                queue_ttl_seconds=TTL_SECONDS,
            )
            assert not got.row_locked, "no transaction stays open between model steps"
            if got.token is not None:
                self.tokens[(key, attempt)] = got.token
            held_for = NONE if got.held_for is None else self.keys.index(got.held_for)
            return Acquired(
                NONE if got.token is None else got.token,
                got.already_done,
                got.queued,
                held_for,
                got.held_by_replay,
                got.took_over,
            )
        conn = self.workers[step.worker] if step.worker != NONE else self.environment
        if step.name == "renew":
            return await locks.renew(
                conn, name=self.lock, token=self.tokens[(key, attempt)], ttl_seconds=TTL_SECONDS
            )
        if step.name == "commit":
            return await self._commit(conn, key, attempt)
        if step.name.startswith("release (the job failed)"):
            return await locks.release(conn, name=self.lock, token=self.tokens[(key, attempt)])
        if step.name == "release_holder":
            return await locks.release_holder(
                conn, name=self.lock, holder=self.holders[key], attempt=attempt
            )
        if step.name.startswith("leave_queue"):
            await locks.leave_queue(conn, name=self.lock, waiter=self.holders[key], attempt=attempt)
            return None
        if step.name == "expire lease":
            await self.environment.execute(
                "UPDATE cronwarden.locks SET expires_at = now() - interval '1 second'"
                " WHERE name = $1",
                self.lock,
            )
            return None
        if step.name == "expire queue place":
            await self.environment.execute(
                "UPDATE cronwarden.lock_waiters SET expires_at = now() - interval '1 second'"
                " WHERE name = $1 AND waiter = $2",
                self.lock,
                self.holders[key],
            )
            return None
        # Temporal's steps and a worker stopping, resuming or crashing run no statement.
        return None

    async def _commit(self, conn: Any, key: int, attempt: int) -> Committed:
        """As the guard commits a job that wrote in its transaction: the job's write, the commit
        statement, then COMMIT only when fenced and recorded; fenced but already recorded, the
        rollback undoes the fence's release, so the lease is released on its own."""
        token = self.tokens[(key, attempt)]
        record = CommitRecord(
            lock_name=self.lock,
            token=token,
            logical_key=self.keys[key],
            schedule_id=self.schedule_id,
            fire_time=self.fires[key],
            result=None,
            attempt=attempt,
            worker="model",
            args_digest="model",
            workflow_id=None,
            run_id=None,
            grace=timedelta(0),
            write_heartbeat=False,
            replay=is_replay(key),
        )
        try:
            async with conn.transaction():
                await conn.execute(
                    "INSERT INTO public.test_effects (logical_key, attempt, started_at)"
                    " VALUES ($1, $2, now())",
                    self.keys[key],
                    attempt,
                )
                outcome = await commit_run(conn, record)
                if not (outcome.fenced and outcome.recorded):
                    raise _RollBack
        except _RollBack:
            if outcome.fenced:
                await locks.release(conn, name=self.lock, token=token)
            return Committed(outcome.fenced, False)
        return Committed(True, True)

    async def differences(self, state: State) -> list[str]:
        """Where the database disagrees with the model's state, in words (empty: nowhere)."""
        row = await self.environment.fetchrow(_SNAPSHOT, self.lock, self.keys)
        found: list[str] = []
        lease = state.lease
        real = json.loads(row["lease"]) if row["lease"] is not None else None
        if (real is not None) != lease.exists:
            return [f"lease row exists: model {lease.exists}, database {real is not None}"]
        if real is not None:
            holder = NONE if real["holder"] is None else self.holders.index(real["holder"])
            last = NONE if real["logical_key"] is None else self.keys.index(real["logical_key"])
            live = holder != NONE and bool(real["live"])
            model_live = lease.holder != NONE and not lease.expired
            if holder != lease.holder:
                found.append(f"lease holder: model {lease.holder}, database {holder}")
            elif holder != NONE and real["attempt"] != lease.attempt:
                found.append(f"lease attempt: model {lease.attempt}, database {real['attempt']}")
            if live != model_live:
                found.append(f"lease live: model {model_live}, database {live}")
            if last != lease.last_key:
                found.append(f"lease logical_key: model {lease.last_key}, database {last}")
            for key, run in enumerate(state.runs):
                for a in run.attempts:
                    if a.pc != Pc.HOLDING:
                        continue
                    model_current = a.token == lease.token
                    real_current = self.tokens.get((key, a.number)) == real["token"]
                    if model_current != real_current:
                        found.append(
                            f"{KEYS[key].name}#{a.number}'s token is current: model "
                            f"{model_current}, database {real_current}"
                        )
        places = [
            Place(self.holders.index(p["waiter"]), p["attempt"], bool(p["expired"]))
            for p in json.loads(row["places"])
        ]
        if places != list(state.places):
            found.append(f"queue: model {list(state.places)}, database {places}")
        recorded = tuple(k in row["recorded"] for k in self.keys)
        if recorded != state.recorded:
            found.append(f"outbox: model {state.recorded}, database {recorded}")
        effects = tuple(min(list(row["effects"]).count(k), 2) for k in self.keys)
        if effects != state.effects:
            found.append(f"effects: model {state.effects}, database {effects}")
        return found


class _RollBack(Exception):
    """Leaves `conn.transaction()` by rolling it back."""
