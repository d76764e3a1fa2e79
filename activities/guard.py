"""The guarded activity: lease → outbox check → job → one commit transaction → release.

Nothing here holds a transaction while the job does its long work: the lease (a row with a TTL,
renewed in the background) is what keeps a second runner out, and the fencing token checked in
the commit statement is what keeps a runner that lost its lease from writing anything.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

import asyncpg
from temporalio import activity
from temporalio.client import Client
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError, RPCStatusCode

from activities.context import RunContext
from activities.contract import (
    ALREADY_DONE,
    INVALID_ARGS,
    INVALID_RESULT,
    JOB_FAILED,
    LEASE_LOST,
    OVERLAP_LOCKED,
    RAN,
    RUN_GUARDED,
    UNKNOWN_JOB,
    GuardedRunInput,
    RunOutcome,
    parse_fire_time,
)
from activities.jobs import InvalidArgs, JobRegistry, JobSpec, UnknownJob
from cronwarden.logs import get_logger
from store import heartbeats, locks, outbox
from store.runs import CommitRecord, commit_run

# Temporal heartbeats go out this often while a job runs; the workflow's heartbeat timeout is a
# few times larger, so a dead worker is noticed in seconds, not at the job's timeout.
TEMPORAL_HEARTBEAT_EVERY = 2.0
# A job that keeps its transaction open this long after leaving `ctx.transaction()` gets a
# warning: the commit waits for the job to return.
SLOW_RETURN_WARNING_SECONDS = 1.0

_DB_ERRORS = (asyncpg.PostgresError, asyncpg.InterfaceError, OSError)


class LeaseLost(Exception):
    """Our fencing token is no longer current: another runner took the lease."""


class GuardedRun:
    """Holds what the activity needs; `worker.py` registers `run_guarded`."""

    def __init__(
        self,
        *,
        pool: asyncpg.Pool,
        registry: JobRegistry,
        client: Client | None,
        worker_identity: str,
    ) -> None:
        self._pool = pool
        self._registry = registry
        self._client = client
        self._worker = worker_identity

    @activity.defn(name=RUN_GUARDED)
    async def run_guarded(self, inp: GuardedRunInput) -> RunOutcome:
        info = activity.info()
        log = get_logger("cronwarden.run").bind(
            schedule_id=inp.schedule_id,
            logical_key=inp.logical_key,
            attempt=info.attempt,
            workflow_id=info.workflow_id,
        )
        spec = self._job_spec(inp, log)
        args = self._validate_args(spec, inp, log)
        fire_time = parse_fire_time(inp.fire_time)
        holder = f"{info.workflow_id}/{info.workflow_run_id}/{info.activity_id}"

        async with self._pool.acquire() as conn:
            got = await locks.acquire(
                conn,
                name=inp.lock_name,
                holder=holder,
                ttl_seconds=inp.lock_ttl_seconds,
                logical_key=inp.logical_key,
            )
        if got.already_done:
            return self._already_done(inp, got.done_args_digest, info.attempt, log)
        if got.token is None:
            log.info("run.overlap-locked", lock=inp.lock_name, held_by=got.held_for)
            return RunOutcome(
                OVERLAP_LOCKED, inp.logical_key, attempt=info.attempt, held_by=got.held_for
            )
        token = got.token
        log = log.bind(fencing_token=token)

        # The acquire statement read the outbox from a snapshot taken before it waited on the
        # lock row: a run of this key that committed (and released) while we waited is only
        # visible to a fresh statement.
        async with self._pool.acquire() as conn:
            digest = await outbox.done_digest(conn, inp.logical_key)
        if digest is not None:
            await self._release(inp.lock_name, token, log)
            return self._already_done(inp, digest, info.attempt, log)

        log.info("run.started", lock=inp.lock_name)
        ctx = RunContext(
            pool=self._pool,
            schedule_id=inp.schedule_id,
            fire_time=fire_time,
            logical_key=inp.logical_key,
            attempt=info.attempt,
            args=args,
            log=log,
        )
        lost = asyncio.Event()
        job_task: asyncio.Task[Any] = asyncio.ensure_future(spec.func(ctx))
        keeper = asyncio.create_task(
            self._keep_alive(inp, token, lost, job_task, log), name=f"lease:{inp.logical_key}"
        )
        try:
            try:
                result = await job_task
            finally:
                keeper.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await keeper
            result = self._check_result(spec, result, log)
            if ctx.block_exited_at is not None:
                held = time.monotonic() - ctx.block_exited_at
                if held > SLOW_RETURN_WARNING_SECONDS:
                    log.warning("run.transaction-held-after-block", seconds=round(held, 3))
            next_expected, schedule_exists = await self._next_expected(inp.schedule_id, log)
            record = CommitRecord(
                lock_name=inp.lock_name,
                token=token,
                logical_key=inp.logical_key,
                schedule_id=inp.schedule_id,
                fire_time=fire_time,
                result=result,
                attempt=info.attempt,
                worker=self._worker,
                args_digest=inp.args_digest,
                workflow_id=info.workflow_id,
                run_id=info.workflow_run_id,
                next_expected_at=next_expected,
                grace=timedelta(seconds=inp.heartbeat_grace_seconds),
                write_heartbeat=schedule_exists,
            )
            committed = await self._commit(ctx, record)
        except asyncio.CancelledError:
            if lost.is_set():
                await ctx.rollback()
                raise self._lease_lost(log) from None
            # Worker shutdown or Temporal cancelled us: undo, free the lease for the retry.
            await ctx.rollback()
            await asyncio.shield(self._release(inp.lock_name, token, log))
            log.warning("run.cancelled")
            raise
        except ApplicationError:
            await ctx.rollback()
            await self._release(inp.lock_name, token, log)
            raise
        except Exception as exc:
            await ctx.rollback()
            await self._release(inp.lock_name, token, log)
            if lost.is_set():
                raise self._lease_lost(log) from exc
            return await self._job_failed(inp, exc, log)

        if not committed.fenced:
            raise self._lease_lost(log)
        if not committed.recorded:
            # Someone committed this key between our check and our commit; the job's writes
            # were rolled back with our transaction.
            await self._release(inp.lock_name, token, log)
            async with self._pool.acquire() as conn:
                digest = await outbox.done_digest(conn, inp.logical_key)
            return self._already_done(inp, digest, info.attempt, log)
        log.info("run.committed", next_expected_at=_iso(next_expected))
        return RunOutcome(
            RAN,
            inp.logical_key,
            result=result,
            fencing_token=token,
            attempt=info.attempt,
        )

    def _job_spec(self, inp: GuardedRunInput, log: Any) -> JobSpec:
        try:
            return self._registry.get(inp.job)
        except UnknownJob as exc:
            log.error("run.unknown-job", job=inp.job)
            raise ApplicationError(str(exc), type=UNKNOWN_JOB, non_retryable=True) from exc

    def _validate_args(self, spec: JobSpec, inp: GuardedRunInput, log: Any) -> Any:
        try:
            return spec.validate_args(inp.args)
        except InvalidArgs as exc:
            log.error("run.invalid-args", error=str(exc))
            raise ApplicationError(str(exc), type=INVALID_ARGS, non_retryable=True) from exc

    def _check_result(self, spec: JobSpec, result: Any, log: Any) -> dict[str, Any] | None:
        if result is None:
            return None
        try:
            if not isinstance(result, Mapping):
                raise TypeError(f"a {type(result).__name__}, not a mapping")
            as_dict = dict(result)
            json.dumps(as_dict)
        except (TypeError, ValueError) as exc:
            msg = f"job '{spec.name}' returned a result that is not a JSON object: {exc}"
            log.error("run.invalid-result", error=msg)
            raise ApplicationError(msg, type=INVALID_RESULT, non_retryable=True) from exc
        return as_dict

    async def _commit(self, ctx: RunContext, record: CommitRecord) -> Any:
        if ctx.in_transaction:
            outcome = await commit_run(ctx.conn, record)
            if outcome.fenced and outcome.recorded:
                await ctx.commit()
            else:
                # Lease lost or key done meanwhile: the job's writes must not land.
                await ctx.rollback()
            return outcome
        async with self._pool.acquire() as conn:
            return await commit_run(conn, record)

    async def _keep_alive(
        self,
        inp: GuardedRunInput,
        token: int,
        lost: asyncio.Event,
        job_task: asyncio.Task[Any],
        log: Any,
    ) -> None:
        """Renew the lease every third of its TTL and heartbeat Temporal every few seconds."""
        renew_every = max(inp.lock_ttl_seconds / 3, 0.5)
        next_renewal = time.monotonic() + renew_every
        while True:
            await asyncio.sleep(min(TEMPORAL_HEARTBEAT_EVERY, renew_every))
            activity.heartbeat()
            if time.monotonic() < next_renewal:
                continue
            next_renewal = time.monotonic() + renew_every
            try:
                async with self._pool.acquire() as conn:
                    still_ours = await locks.renew(
                        conn, name=inp.lock_name, token=token, ttl_seconds=inp.lock_ttl_seconds
                    )
            except _DB_ERRORS as exc:
                # Keep the job going: if the lease does lapse meanwhile, the fencing check at
                # commit still refuses our writes.
                log.warning("run.lease-renew-failed", error=str(exc))
                continue
            if not still_ours:
                lost.set()
                job_task.cancel()
                return

    async def _release(self, name: str, token: int, log: Any) -> None:
        try:
            async with self._pool.acquire() as conn:
                await locks.release(conn, name=name, token=token)
        except _DB_ERRORS as exc:
            # The lease expires by itself after its TTL; a failed release only delays the next run.
            log.warning("run.release-failed", error=str(exc))

    async def _next_expected(self, schedule_id: str, log: Any) -> tuple[datetime | None, bool]:
        """The schedule's next fire time, as Temporal computes it (we never evaluate specs)."""
        if self._client is None:
            return None, True
        try:
            desc = await self._client.get_schedule_handle(schedule_id).describe()
        except RPCError as exc:
            if exc.status == RPCStatusCode.NOT_FOUND:
                # A replay for a deleted schedule: its heartbeat row is gone on purpose.
                return None, False
            log.warning("run.next-expected-unknown", error=str(exc))
            return None, True
        times = desc.info.next_action_times
        return (times[0] if times else None), True

    def _already_done(
        self, inp: GuardedRunInput, digest: str | None, attempt: int, log: Any
    ) -> RunOutcome:
        mismatch = digest is not None and digest != inp.args_digest
        notes = []
        if mismatch:
            notes.append("this key committed with different args; it is reported, not run again")
        log.info("run.already-done", args_mismatch=mismatch)
        return RunOutcome(
            ALREADY_DONE, inp.logical_key, attempt=attempt, args_mismatch=mismatch, notes=notes
        )

    def _lease_lost(self, log: Any) -> ApplicationError:
        log.warning("run.lease-lost")
        # Retryable: the retry either finds the key committed by whoever took the lease, or
        # takes the lease itself.
        return ApplicationError(
            "lease lost to another runner before commit; nothing was written", type=LEASE_LOST
        )

    async def _job_failed(self, inp: GuardedRunInput, exc: Exception, log: Any) -> RunOutcome:
        error = f"{type(exc).__name__}: {exc}"
        log.error("run.failed", error=error, exc_info=exc)
        try:
            async with self._pool.acquire() as conn:
                await heartbeats.record_failure(conn, schedule_id=inp.schedule_id, error=error)
        except _DB_ERRORS as db_exc:
            log.warning("run.record-failure-failed", error=str(db_exc))
        raise ApplicationError(error, type=JOB_FAILED) from exc


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None
