"""The guarded activity: lease → outbox check → job → one commit transaction → release.

Nothing here holds a transaction while the job does its long work: the lease (a row with a TTL,
renewed in the background) is what keeps a second runner out, and the fencing token checked in
the commit statement is what keeps a runner that lost its lease from writing anything.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any, TypeVar

import asyncpg
from temporalio import activity
from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.exceptions import ApplicationError, ApplicationErrorCategory
from temporalio.service import RPCError, RPCStatusCode

from cronwarden.activities import next_fires
from cronwarden.activities.context import RunContext
from cronwarden.activities.contract import (
    ALREADY_DONE,
    ATTEMPT_ABANDONED,
    COMMIT_FAILED,
    INVALID_ARGS,
    INVALID_RESULT,
    JOB_FAILED,
    JOB_TIMED_OUT,
    LEASE_LOST,
    LEASE_SKIP_UNRECORDED,
    NOT_IN_RULE,
    ORPHAN_NOTE_PREFIX,
    OVERLAP_LOCKED,
    RAN,
    RUN_GUARDED,
    TRANSACTION_ENDED,
    UNKNOWN_JOB,
    UNKNOWN_JOB_HERE,
    GuardedRunInput,
    RunOutcome,
    parse_fire_time,
)
from cronwarden.activities.jobs import InvalidArgs, JobRegistry, JobSpec, UnknownJob
from cronwarden.activities.lease import AttemptAbandoned, LeaseRequest, acquire_lease
from cronwarden.logs import get_logger
from cronwarden.redact import for_storage
from cronwarden.schedules import zones
from cronwarden.store import heartbeats, locks, outbox
from cronwarden.store.pool import own_statements
from cronwarden.store.runs import CommitOutcome, CommitRecord, commit_run
from cronwarden.tracing import GuardTracer
from cronwarden.worker_metrics import FAILED, LEASE_LOST_OUTCOME, WorkerMetrics
from cronwarden.workflows.hand_back import HANDED_BACK

# Temporal heartbeats go out this often while a run holds its lease; the workflow's heartbeat
# timeout is a few times larger, so a dead worker is noticed in seconds, not at the timeout.
TEMPORAL_HEARTBEAT_EVERY = 2.0
# The first one only this long after the lease is taken: each heartbeat is a call to Temporal's
# server, and a run done sooner (most are) needs none. Short enough that a run which heartbeat
# while it waited for the lease (activities/lease.py) goes no longer without one than the SDK's
# own throttle could make it (worker_runtime.py: 3 s).
FIRST_TEMPORAL_HEARTBEAT_AFTER = 1.0
# A job that keeps its transaction open this long after leaving `ctx.transaction()` gets a
# warning: the commit waits for the job to return.
SLOW_RETURN_WARNING_SECONDS = 1.0
# Describing the schedule (for the next expected fire) must not stall a finished run's commit.
DESCRIBE_TIMEOUT = timedelta(seconds=5)

T = TypeVar("T")

_DB_ERRORS = (asyncpg.PostgresError, asyncpg.InterfaceError, OSError, TimeoutError)


class JobTimedOut(Exception):
    """The job ran past the schedule's timeout, counted from the moment the lease was taken."""


class TransactionAbandoned(Exception):
    """The job entered `ctx.transaction()`, the block failed and rolled back, and the job
    returned normally anyway: marking the key done would record a run whose writes are gone."""


class GuardedRun:
    """Holds what the activity needs; `worker.py` registers `run_guarded`."""

    def __init__(
        self,
        *,
        pool: asyncpg.Pool,
        registry: JobRegistry,
        client: Client | None,
        worker_identity: str,
        metrics: WorkerMetrics | None = None,
        tracer: GuardTracer | None = None,
    ) -> None:
        """`metrics`: where the runs are counted (none given: a registry nobody reads).
        `tracer`: the spans of the guard's phases (none given: tracing off)."""
        self._pool = pool
        self._registry = registry
        self._client = client
        self._worker = worker_identity
        self._metrics = metrics or WorkerMetrics()
        self._tracer = tracer or GuardTracer()
        self._next_fires = next_fires.NextFireCache(
            client, timeout=DESCRIBE_TIMEOUT, on_describe=self._metrics.describe_called
        )

    @activity.defn(name=RUN_GUARDED)
    async def run_guarded(self, inp: GuardedRunInput) -> RunOutcome:
        self._tracer.run(
            logical_key=inp.logical_key, schedule_id=inp.schedule_id, job=inp.job, replay=inp.replay
        )
        # Every outcome is decided below; it is counted here, once, whichever path decided it.
        try:
            outcome = await self._run(inp)
        except asyncio.CancelledError:
            if not _cut_by_shutdown():
                raise
            # Every path below released the lease (or left it to its TTL) and rolled the job's
            # transaction back on its way out: what is left is to say why, so no attempt is
            # spent on it. Counted by no outcome, like any cut: the run's next activity is.
            raise self.handed_back(inp, where="running") from None
        except ApplicationError as exc:
            if exc.type != HANDED_BACK:
                self._finished(inp, LEASE_LOST_OUTCOME if exc.type == LEASE_LOST else FAILED)
            raise
        except Exception:
            self._finished(inp, FAILED)
            raise
        self._finished(inp, outcome.outcome)
        return outcome

    def _finished(self, inp: GuardedRunInput, outcome: str) -> None:
        self._metrics.run_finished(inp.schedule_id, outcome, replay=inp.replay, labels=inp.labels)
        self._tracer.outcome(outcome)

    @contextmanager
    def _phase(self, name: str, inp: GuardedRunInput) -> Iterator[None]:
        """Times the phase into its histogram and spans it (when tracing is on)."""
        with (
            self._metrics.phase(name),
            self._tracer.phase(name, logical_key=inp.logical_key, schedule_id=inp.schedule_id),
        ):
            yield

    async def _run(self, inp: GuardedRunInput) -> RunOutcome:
        info = activity.info()
        log = get_logger("cronwarden.run").bind(
            schedule_id=inp.schedule_id,
            logical_key=inp.logical_key,
            attempt=info.attempt,
            workflow_id=info.workflow_id,
        )
        refusal = _not_in_rule(inp)
        if refusal is not None:
            # Before the lease and the outbox: the rule never fires this instant, so nothing of
            # it may run or be recorded, whoever started it.
            log.info("run.not-in-rule", reason=refusal)
            return RunOutcome(NOT_IN_RULE, inp.logical_key, attempt=info.attempt, notes=[refusal])
        spec = await self._job_spec(inp, info, log)
        if isinstance(spec, outbox.CommittedRecord):
            # Replaying a key that is already done must neither fail nor pause anything.
            return self._already_done(inp, spec.args_digest, info.attempt, log)
        args = await self._validate_args(spec, inp, log)
        fire_time = parse_fire_time(inp.fire_time)
        # Same workflow run + activity id = a Temporal retry of this very activity; the attempt
        # number decides between two of them (see store/locks.py).
        holder = f"{info.workflow_id}/{info.workflow_run_id}/{info.activity_id}"

        request = LeaseRequest(
            name=inp.lock_name,
            holder=holder,
            attempt=info.attempt,
            ttl_seconds=inp.lock_ttl_seconds,
            logical_key=inp.logical_key,
            schedule_id=inp.schedule_id,
            run_deadline_seconds=_run_deadline_seconds(info, inp),
            replay=inp.replay,
            wait_for_any=inp.wait_for_any,
            wait_seconds=lease_wait_seconds(
                inp.lock_wait_seconds,
                scheduled=info.scheduled_time,
                # This attempt's start, not its scheduling: time it spent in the job's queue
                # waiting for a worker with the job is spent too.
                attempt_scheduled=info.started_time,
            ),
            per_key=inp.per_key_lease,
        )
        with self._phase("acquire", inp):
            try:
                got = await _unless_worker_stops(
                    acquire_lease(
                        self._pool,
                        request,
                        log=log,
                        heartbeat=activity.heartbeat,
                        still_current=self._still_current_check(info),
                    )
                )
            except AttemptAbandoned as exc:
                raise await self._abandoned(inp, log, where="queued for the lease") from exc
        if got is None:
            # The worker began to stop while this run waited for its lease: handed back at
            # once (it left the queue), rather than waiting out the graceful time for a lease
            # it would then be cut from.
            raise self.handed_back(inp, where="waiting for its lease")
        if got.took_over:
            self._metrics.lease_taken_over()
        if got.already_done:
            return self._already_done(inp, got.done_args_digest, info.attempt, log)
        if got.token is None:
            log.info("run.overlap-locked", lock=inp.lock_name, held_by=got.held_for)
            # Only a `skip` fire is skipped here. A buffer_one fire (`wait_for_any`) waited for
            # the lease: its workflow asks again or fails it loudly as OverlapTimeout, and a
            # skip recorded as well would count one fire twice, once skipped and once failed.
            if not inp.replay and not inp.wait_for_any:
                await self._record_lease_skip(inp, got.held_for, log)
            return RunOutcome(
                OVERLAP_LOCKED, inp.logical_key, attempt=info.attempt, held_by=got.held_for
            )
        token = got.token
        # The job's timeout counts from here: the activity's start-to-close also covers the wait
        # for the lease, so Temporal's timeout alone would let a hung job hold the lease (and
        # renew it) for the wait's length again.
        # (An input from before runs carried their timeout has none: its start-to-close is it.)
        job_deadline = (
            None
            if inp.timeout_seconds is None
            else asyncio.get_running_loop().time() + inp.timeout_seconds
        )
        log = log.bind(fencing_token=token)
        if not inp.replay:
            # Looked up while the job runs, and waited for before any transaction opens.
            self._next_fires.refresh_if_needed(
                inp.schedule_id,
                inp.definition_digest,
                fire_time=fire_time,
                grace=timedelta(seconds=inp.heartbeat_grace_seconds),
            )
        ctx = RunContext(
            pool=self._pool,
            schedule_id=inp.schedule_id,
            fire_time=fire_time,
            logical_key=inp.logical_key,
            attempt=info.attempt,
            args=args,
            log=log,
            before_transaction=self._before_transaction(inp),
            idle_timeout_seconds=_job_idle_timeout(info, inp),
            commit_idle_timeout_seconds=inp.lock_ttl_seconds,
        )
        record = CommitRecord(
            lock_name=inp.lock_name,
            token=token,
            logical_key=inp.logical_key,
            schedule_id=inp.schedule_id,
            fire_time=fire_time,
            result=None,
            attempt=info.attempt,
            worker=self._worker,
            args_digest=inp.args_digest,
            workflow_id=info.workflow_id,
            run_id=info.workflow_run_id,
            grace=timedelta(seconds=inp.heartbeat_grace_seconds),
            write_heartbeat=True,
            replay=inp.replay,
            min_duration=_bound(inp.min_duration_seconds),
            max_duration=_bound(inp.max_duration_seconds),
            late_start=_bound(inp.late_start_seconds),
        )
        return await self._holding_lease(inp, spec, ctx, record, log, job_deadline=job_deadline)

    async def _record_lease_skip(self, inp: GuardedRunInput, held_by: str | None, log: Any) -> None:
        """A live fire skipped at the lease (not by Temporal's overlap policy): counted on the
        heartbeat row with the holder, so audit and status show it instead of a silent success."""
        try:
            async with own_statements(self._pool) as conn:
                await heartbeats.record_lease_skip(
                    conn, schedule_id=inp.schedule_id, logical_key=inp.logical_key, holder=held_by
                )
        except _DB_ERRORS as exc:
            log.warning("run.record-lease-skip-failed", error=str(exc))
            # Returning overlap-locked now would be the "success with nothing recorded" the
            # record exists to prevent. The retry asks for the lease again: it records the skip,
            # or runs the fire if the lease is free by then; out of attempts, the run fails loud.
            raise ApplicationError(
                f"the fire {inp.logical_key} was skipped at the lease (held by {held_by}) and "
                f"the skip could not be recorded ({type(exc).__name__}: {exc}); retrying",
                type=LEASE_SKIP_UNRECORDED,
            ) from exc

    async def _holding_lease(
        self,
        inp: GuardedRunInput,
        spec: JobSpec,
        ctx: RunContext,
        record: CommitRecord,
        log: Any,
        *,
        job_deadline: float | None,
    ) -> RunOutcome:
        """Everything done while we hold the lease. Every exit releases it or commits."""
        lost = asyncio.Event()
        # Heartbeats run on their own timer and need no connection: a starved pool delays a
        # lease renewal but never makes Temporal think this worker died.
        beating = asyncio.create_task(_heartbeat_temporal(), name=f"heartbeat:{ctx.logical_key}")
        renewing: asyncio.Task[None] | None = None
        # No second look at the outbox here: the acquire read it after it locked the lease row,
        # so a run of this key that committed under this lease is already seen. (One under
        # another lease name, after `apply` changed `lock:`, is stopped by the commit: its
        # outbox conflict rolls the job's writes back.)
        phase = "job"
        try:
            # Which args this run applies, with its key: a trigger or a backfill may give other
            # args than the schedule's (the outbox keeps only their digest).
            log.info("run.started", lock=inp.lock_name, args_digest=inp.args_digest, args=inp.args)
            with self._phase("job", inp):
                # Started inside the phase: spans the job makes itself (an instrumented HTTP
                # client, say) are children of the job's span.
                # The job's duration, judged against its bounds at commit: monotonic, so a
                # worker's clock stepping meanwhile changes nothing.
                job_started = time.monotonic()
                job_task: asyncio.Future[Any] = asyncio.ensure_future(spec.func(ctx))
                renewing = asyncio.create_task(
                    self._renew_lease(inp, record.token, lost, job_task, log),
                    name=f"lease:{ctx.logical_key}",
                )
                returned = await _within_timeout(job_task, job_deadline, inp)
            job_took = timedelta(seconds=time.monotonic() - job_started)
            result = self._check_result(spec, returned, log)
            if ctx.abandoned:
                raise TransactionAbandoned(
                    "the job caught an error raised inside ctx.transaction() and returned "
                    "normally; its writes were rolled back, so the key is not marked done"
                )
            if ctx.block_exited_at is not None:
                held = time.monotonic() - ctx.block_exited_at
                if held > SLOW_RETURN_WARNING_SECONDS:
                    log.warning("run.transaction-held-after-block", seconds=round(held, 3))

            phase = "commit"
            with self._phase("commit", inp):
                fires = await self._next_fires_known(inp, ctx)
                record = replace(
                    record,
                    result=result,
                    next_fire_times=fires.times,
                    times_digest=fires.digest,
                    # A describe that answered for a definition and listed no next action time:
                    # the spec has run out (end_at passed, its last year done).
                    schedule_finished=(
                        fires.digest is not None and fires.exists and not fires.times
                    ),
                    write_heartbeat=fires.exists,
                    transaction_marker=ctx.marker,
                    commit_idle_timeout=ctx.commit_idle_timeout if ctx.in_transaction else None,
                    duration=job_took,
                )
                if ctx.in_transaction and not ctx.conn.is_in_transaction():
                    # The job ended the transaction itself (a COMMIT, ROLLBACK or script): its
                    # writes may have landed without the outbox record. Never write the record.
                    raise _transaction_ended(inp, log)
                if await self._abandoned_by_temporal():
                    raise await self._abandoned(inp, log, where="about to commit")
                committed = await self._commit(ctx, record)
        except asyncio.CancelledError as exc:
            await ctx.rollback()
            if ctx.ended_by_job:
                raise await asyncio.shield(self._ended_by_job(inp, record, exc, log)) from None
            current = asyncio.current_task()
            if lost.is_set() and current is not None and current.cancelling() == 0:
                # Our own renewal cancelled the job: we are not being cancelled ourselves.
                raise self._lease_lost(log) from None
            # Worker shutdown past its graceful timeout, or Temporal cancelled the run: free
            # the lease so the retry does not wait out the TTL.
            released = await asyncio.shield(self._release(record, log))
            if released is False and await asyncio.shield(self._lost_at_release(record, phase)):
                # A holder frozen or cut off past its lease and its timeout is cancelled by
                # Temporal the moment it talks to it again, often before its renewal or its
                # commit could notice: the release is where it learns the lease was taken.
                log.warning("run.lease-lost", noticed="at release, on cancellation")
            log.warning("run.cancelled", phase=phase)
            raise
        except ApplicationError as exc:
            await ctx.rollback()
            if ctx.ended_by_job:
                then = None if exc.type == TRANSACTION_ENDED else exc
                raise await self._ended_by_job(inp, record, then, log) from exc
            await self._release(record, log)
            raise
        except JobTimedOut as exc:
            await ctx.rollback()
            if ctx.ended_by_job:
                raise await self._ended_by_job(inp, record, exc, log) from exc
            released = await self._release_after_timeout(record, log)
            if lost.is_set() or released is False:
                # Cut off past its lease too (a frozen worker): someone else holds the key now.
                raise self._lease_lost(log) from exc
            return await self._job_failed(inp, exc, log, error_type=JOB_TIMED_OUT)
        except Exception as exc:
            await ctx.rollback()
            if ctx.ended_by_job:
                raise await self._ended_by_job(inp, record, exc, log) from exc
            if phase == "commit":
                return await self._after_failed_commit(inp, record, exc, log)
            await self._release(record, log)
            if lost.is_set():
                raise self._lease_lost(log) from exc
            return await self._job_failed(inp, exc, log)
        finally:
            for task in (renewing, beating):
                if task is not None:
                    task.cancel()
            # wait(), not gather(): it never raises the tasks' CancelledError into us, so a
            # cancellation of this activity itself is not swallowed here.
            await asyncio.wait([t for t in (renewing, beating) if t is not None])

        return await self._finish(inp, record, committed, log)

    async def _finish(
        self, inp: GuardedRunInput, record: CommitRecord, committed: CommitOutcome, log: Any
    ) -> RunOutcome:
        if not committed.own_transaction:
            raise await self._ended_by_job(inp, record, None, log)
        if not committed.fenced:
            raise self._lease_lost(log)
        if not record.replay:
            self._next_fires.used(
                inp.schedule_id,
                fires_ahead=committed.fires_ahead,
                accepted=committed.times_accepted,
                grace=record.grace,
                database_now=committed.database_now,
            )
        if not committed.recorded:
            # Someone committed this key between our check and our commit; the job's writes
            # were rolled back with our transaction, and the lease is released. The commit
            # statement cannot report that record's args: it may have committed while our
            # insert waited on it, after the statement's snapshot was taken.
            done = await self._committed(inp.logical_key)
            digest = None if done is None else done.args_digest
            return self._already_done(inp, digest, record.attempt, log)
        log.info(
            "run.committed",
            replay=record.replay,
            cached_fires_ahead=committed.fires_ahead,
            cached_fires_accepted=committed.times_accepted,
            duration_seconds=None if record.duration is None else record.duration.total_seconds(),
            breach=committed.breach,
        )
        return _ran(record)

    async def _after_failed_commit(
        self, inp: GuardedRunInput, record: CommitRecord, exc: Exception, log: Any
    ) -> RunOutcome:
        """The commit raised (connection killed at COMMIT, server restart): it may or may not
        have landed. Look, on a fresh connection, instead of guessing."""
        if await self._own_commit_landed(record):
            log.info(
                "run.committed", note="commit outcome confirmed after an error", error=str(exc)
            )
            return _ran(record)
        self._metrics.commit_failed()
        await self._release(record, log)
        log.warning("run.commit-failed", error=f"{type(exc).__name__}: {exc}")
        # Retryable: the retry either finds the key committed or runs it again, and the outbox
        # keeps either from applying twice.
        raise ApplicationError(
            f"the commit failed and did not land: {type(exc).__name__}: {exc}", type=COMMIT_FAILED
        ) from exc

    async def _job_spec(
        self, inp: GuardedRunInput, info: activity.Info, log: Any
    ) -> JobSpec | outbox.CommittedRecord:
        """The job, or the key's outbox record when this worker lacks the job but the key is
        already done."""
        try:
            return self._registry.get(inp.job)
        except UnknownJob as exc:
            error = str(exc)
        done = await self._committed(inp.logical_key)
        if done is not None:
            return done
        # Only a run started before per-job task queues gets here (its activity is on the
        # schedule's queue, which every worker polls; today's runs wait in the job's own queue
        # for a worker that has it). During a rolling deploy an old worker may pick up a run
        # for a job only the new workers have: retries go to any worker polling the queue, so
        # only the run's last attempt decides that the job is really gone.
        max_attempts = info.retry_policy.maximum_attempts if info.retry_policy else 1
        if max_attempts == 0 or info.attempt < max_attempts:
            log.warning("run.unknown-job-retrying", job=inp.job, max_attempts=max_attempts)
            raise ApplicationError(
                f"{error} on worker {self._worker}; retrying (attempt {info.attempt} of "
                f"{max_attempts or 'unlimited'})",
                type=UNKNOWN_JOB_HERE,
            )
        log.error("run.unknown-job", job=inp.job)
        if inp.replay:
            # A replay is no live fire: its failure is recorded as the replay's and the live
            # schedule keeps running. The live fires find out for themselves (and pause it, if
            # their worker lacks the job too); pausing here would stop a schedule whose live
            # workers may well have the job, for a replay started from somewhere else.
            await self._record_failure(inp, error, log)
        else:
            await self._pause_orphan(inp, error, log)
        raise ApplicationError(error, type=UNKNOWN_JOB, non_retryable=True)

    async def _pause_orphan(self, inp: GuardedRunInput, error: str, log: Any) -> None:
        """A worker without the schedule's job (redeployed without it): every fire would fail
        the same way, so pause the schedule with a note saying why. The heartbeat row is NOT
        marked paused: this is not an operator's pause, and the monitor must keep paging."""
        note = f"{ORPHAN_NOTE_PREFIX}'{inp.job}' is not registered on worker {self._worker}"
        await self._record_failure(inp, error, log)
        if self._client is None:
            return
        try:
            await self._client.get_schedule_handle(inp.schedule_id).pause(
                note=note, rpc_timeout=DESCRIBE_TIMEOUT
            )
        except RPCError as exc:
            # A schedule deleted meanwhile has nothing to pause; anything else is logged, and
            # the run still fails non-retryably.
            if exc.status != RPCStatusCode.NOT_FOUND:
                log.warning("run.orphan-pause-failed", error=str(exc))
            return
        log.warning("schedule.paused-orphan", job=inp.job, note=note)

    async def _validate_args(self, spec: JobSpec, inp: GuardedRunInput, log: Any) -> Any:
        try:
            return spec.validate_args(inp.args)
        except InvalidArgs as exc:
            log.error("run.invalid-args", error=str(exc))
            # On the row like any failure: `status`, `describe`, the status page and the overdue
            # page say why the schedule stopped committing, not just that it did.
            await self._record_failure(inp, str(exc), log)
            raise ApplicationError(str(exc), type=INVALID_ARGS, non_retryable=True) from exc

    def _check_result(self, spec: JobSpec, result: Any, log: Any) -> dict[str, Any] | None:
        if result is None:
            return None
        try:
            if not isinstance(result, Mapping):
                raise TypeError(f"a {type(result).__name__}, not a mapping")
            as_dict = dict(result)
            # jsonb refuses NaN and infinities; find out here, not at commit.
            json.dumps(as_dict, allow_nan=False)
        except (TypeError, ValueError) as exc:
            msg = f"job '{spec.name}' returned a result that is not a JSON object: {exc}"
            log.error("run.invalid-result", error=msg)
            raise ApplicationError(msg, type=INVALID_RESULT, non_retryable=True) from exc
        return as_dict

    async def _commit(self, ctx: RunContext, record: CommitRecord) -> CommitOutcome:
        if ctx.in_transaction:
            outcome = await commit_run(ctx.conn, record)
            if outcome.fenced and outcome.recorded:
                await ctx.commit()
                return outcome
            # Lease lost, key done meanwhile, or the job ended our transaction and began another
            # (the statement's marker check wrote nothing): the job's writes must not land. The
            # rollback also undoes the commit statement's release, so release on its own.
            await ctx.rollback()
            if outcome.fenced or not outcome.own_transaction:
                await self._release(record, None)
            return outcome
        async with own_statements(self._pool) as conn:
            return await commit_run(conn, record)

    async def _lost_at_release(self, record: CommitRecord, phase: str) -> bool:
        """A release found another token on the lock: was our lease taken? Not if our commit
        landed before the cancellation did: the commit released the lock itself, and a later
        fire of the schedule may hold it by now."""
        if phase != "commit":
            return True
        return not await self._own_commit_landed(record)

    async def _committed(self, logical_key: str) -> outbox.CommittedRecord | None:
        """Is the key done, with which args digest and fencing token? The guard's one look at
        the key's outbox record (besides the acquire statement's): a statement of its own on a
        fresh connection, because a record that landed after this run's earlier snapshots
        (the acquire's, the commit's) is only visible to a new one."""
        async with own_statements(self._pool) as conn:
            return await outbox.committed(conn, logical_key)

    async def _own_commit_landed(self, record: CommitRecord) -> bool:
        """Whether the key's record is the one our commit wrote, after the commit's outcome was
        lost (an error at COMMIT, a cancellation): the fencing token tells our record from one
        written by a run that took the lease since. A look that fails counts as not landed:
        the caller takes the cautious branch (commit failed, lease lost), and the retry, kept
        by the outbox from applying the key twice, finds out for sure."""
        try:
            done = await self._committed(record.logical_key)
        except _DB_ERRORS:
            return False
        return done is not None and done.fencing_token == record.token

    async def _renew_lease(
        self,
        inp: GuardedRunInput,
        token: int,
        lost: asyncio.Event,
        job_task: asyncio.Future[Any],
        log: Any,
    ) -> None:
        """Extend the lease every third of its TTL; stop the job the moment it is lost."""
        renew_every = max(inp.lock_ttl_seconds / 3, 0.5)
        while True:
            await asyncio.sleep(renew_every)
            try:
                async with own_statements(self._pool, timeout=renew_every) as conn:
                    still_ours = await locks.renew(
                        conn, name=inp.lock_name, token=token, ttl_seconds=inp.lock_ttl_seconds
                    )
            except _DB_ERRORS as exc:
                # Keep the job going: if the lease does lapse meanwhile, the fencing check at
                # commit still refuses our writes.
                log.warning("run.lease-renew-failed", error=f"{type(exc).__name__}: {exc}")
                continue
            if not still_ours:
                lost.set()
                job_task.cancel()
                return

    async def _release_after_timeout(self, record: CommitRecord, log: Any) -> bool | None:
        """Release a timed-out run's lease. Temporal may cancel the same attempt meanwhile (its
        own timeout, noticed late by a worker that was frozen): the release still finishes, and
        a lease found taken is reported before the cancellation goes on."""
        release = asyncio.ensure_future(self._release(record, log))
        try:
            return await asyncio.shield(release)
        except asyncio.CancelledError:
            if await asyncio.shield(release) is False:
                log.warning("run.lease-lost", noticed="at release, after the job's timeout")
            raise

    async def _release(self, record: CommitRecord, log: Any) -> bool | None:
        """True: released; False: the lease was someone else's already; None: unknown."""
        try:
            async with own_statements(self._pool) as conn:
                return await locks.release(conn, name=record.lock_name, token=record.token)
        except _DB_ERRORS as exc:
            # The lease expires by itself after its TTL; a failed release only delays the next run.
            if log is not None:
                log.warning("run.release-failed", error=str(exc))
            return None

    def _before_transaction(self, inp: GuardedRunInput) -> Callable[[], Awaitable[None]] | None:
        """What `ctx.transaction()` waits for before BEGIN: the look-up of the next fires, so
        no network wait ever happens while the job's transaction holds its row locks."""
        if inp.replay:
            return None
        return lambda: self._next_fires.settled(inp.schedule_id)

    async def _next_fires_known(
        self, inp: GuardedRunInput, ctx: RunContext
    ) -> next_fires.NextFires:
        """The cached next fire times for the commit statement (a replay takes none)."""
        if inp.replay:
            return next_fires.UNKNOWN
        if not ctx.in_transaction:
            # No transaction is open yet: the commit statement runs alone, after the look-up.
            await self._next_fires.settled(inp.schedule_id)
        return self._next_fires.get(inp.schedule_id)

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

    async def _ended_by_job(
        self, inp: GuardedRunInput, record: CommitRecord, exc: BaseException | None, log: Any
    ) -> ApplicationError:
        """The job ended its own transaction, and maybe (`exc`) the run then failed another way
        (the job raised, hung past its timeout, lost its lease, was cancelled). Whatever that
        failure would have been, it is not retried now: writes the job committed itself may
        have landed, and a retry would apply them again."""
        await self._release(record, log)
        error = _transaction_ended(inp, log, then=exc)
        await self._record_failure(inp, error.message, log)
        return error

    def _lease_lost(self, log: Any) -> ApplicationError:
        log.warning("run.lease-lost")
        # Retryable: the retry either finds the key committed by whoever took the lease, or
        # takes the lease itself.
        return ApplicationError(
            "lease lost to another runner before commit; nothing was written", type=LEASE_LOST
        )

    async def _job_failed(
        self, inp: GuardedRunInput, exc: Exception, log: Any, *, error_type: str = JOB_FAILED
    ) -> RunOutcome:
        # Scrubbed here too: the message becomes the run's failure in Temporal, which the
        # status page links to.
        error = for_storage(f"{type(exc).__name__}: {exc}")
        if error_type == JOB_TIMED_OUT:
            log.error("run.timed-out", error=error, timeout_seconds=inp.timeout_seconds)
        else:
            log.error("run.failed", error=error, exc_info=exc)
        await self._record_failure(inp, error, log)
        raise ApplicationError(error, type=error_type) from exc

    def _still_current_check(self, info: activity.Info) -> Callable[[], Awaitable[bool]] | None:
        if self._client is None or not _last_attempt(info):
            return None

        async def still_current() -> bool:
            return await self._attempt_current(info)

        return still_current

    async def _abandoned_by_temporal(self) -> bool:
        """Only a run's last attempt asks, right before its commit (the job's transaction is
        open: the ask is bounded by DESCRIBE_TIMEOUT, and the server's idle timeout ends the
        transaction should it take longer). A worker cut off from Temporal but not from
        Postgres never hears that Temporal timed its attempt out: the Python SDK cancels an
        activity only when a heartbeat comes back refused, and there is no heartbeat coming
        back. An earlier attempt may commit regardless: its retry finds the key done. The last
        one would commit a key whose run Temporal has already failed (the schedule paused on
        failure, a page sent, backfill listing it), so it asks first."""
        info = activity.info()
        if self._client is None or not _last_attempt(info):
            return False
        return not await self._attempt_current(info)

    async def _attempt_current(self, info: activity.Info) -> bool:
        """Temporal still waits for this attempt: its run is open and this is the attempt it
        has pending. False when Temporal cannot be asked: the attempt's heartbeats cannot reach
        it either, and its heartbeat timeout will end the attempt."""
        assert self._client is not None
        handle = self._client.get_workflow_handle(
            info.workflow_id or "", run_id=info.workflow_run_id
        )
        try:
            desc = await handle.describe(rpc_timeout=DESCRIBE_TIMEOUT)
        except (RPCError, TimeoutError, OSError):
            return False
        if desc.status != WorkflowExecutionStatus.RUNNING:
            return False
        return any(
            pending.activity_id == info.activity_id and pending.attempt == info.attempt
            for pending in desc.raw_description.pending_activities
        )

    async def _abandoned(self, inp: GuardedRunInput, log: Any, *, where: str) -> ApplicationError:
        error = (
            f"the last attempt of {inp.logical_key} was given up: Temporal no longer waits for "
            f"it, or could not be reached ({where}); this worker may be cut off from Temporal. "
            "Nothing was committed"
        )
        log.error("run.abandoned-by-temporal", where=where)
        await self._record_failure(inp, error, log)
        return ApplicationError(error, type=ATTEMPT_ABANDONED)

    def handed_back(self, inp: GuardedRunInput, *, where: str) -> ApplicationError:
        """The run given back by a stopping worker (workflows/hand_back.py). Not the job's
        failure: `last_error` is left alone, and the workflow runs it again as a new activity.
        The attempt rides along, so the workflow knows how many real ones came before."""
        info = activity.info()
        get_logger("cronwarden.run").warning(
            "run.handed-back",
            schedule_id=inp.schedule_id,
            logical_key=inp.logical_key,
            attempt=info.attempt,
            workflow_id=info.workflow_id,
            where=where,
        )
        return ApplicationError(
            f"worker {self._worker} stopped while {inp.logical_key} was {where}; nothing was "
            "committed, the lease is released, and the run goes on on another worker without "
            "spending an attempt",
            info.attempt,
            type=HANDED_BACK,
            # Benign: Temporal and the SDK log it as the routine event it is, not a failure.
            category=ApplicationErrorCategory.BENIGN,
        )

    async def _record_failure(self, inp: GuardedRunInput, error: str, log: Any) -> None:
        """The run's error on the heartbeat row: a live fire's as the schedule's `last_error`,
        a replay's apart from it (the live picture shows live fires only)."""
        try:
            async with own_statements(self._pool) as conn:
                if inp.replay:
                    await heartbeats.record_replay_failure(
                        conn, schedule_id=inp.schedule_id, logical_key=inp.logical_key, error=error
                    )
                else:
                    await heartbeats.record_failure(conn, schedule_id=inp.schedule_id, error=error)
        except _DB_ERRORS as db_exc:
            log.warning("run.record-failure-failed", error=str(db_exc))


def _cut_by_shutdown() -> bool:
    """This activity is being cancelled because its worker is stopping (past the graceful
    time), not because Temporal cancelled the run or timed the attempt out."""
    details = activity.cancellation_details()
    return details is not None and details.worker_shutdown


async def _unless_worker_stops(work: Awaitable[T]) -> T | None:
    """`work`'s result, or None when the worker begins to stop first: `work` is cancelled then
    (the lease acquire is cancel-safe: it leaves no lease and no queue place behind). A result
    that is already there wins, so a lease just taken is used, not dropped."""
    task = asyncio.ensure_future(work)
    stopping = asyncio.ensure_future(activity.wait_for_worker_shutdown())
    try:
        await asyncio.wait([task, stopping], return_when=asyncio.FIRST_COMPLETED)
    except asyncio.CancelledError:
        task.cancel()
        # Its own cleanup (leave the queue, release what it got) finishes before we go on.
        await asyncio.wait([task])
        raise
    finally:
        stopping.cancel()
    if not task.done():
        task.cancel()
        await asyncio.wait([task])
        if task.cancelled():
            return None
    return task.result()


async def _within_timeout(
    job_task: asyncio.Future[Any], deadline: float | None, inp: GuardedRunInput
) -> Any:
    """The job's result, or JobTimedOut once the loop's clock passes `deadline` (the job is
    cancelled then: its transaction rolls back and it stops renewing the lease)."""
    timer = asyncio.timeout_at(deadline)
    try:
        async with timer:
            result = await job_task
    except TimeoutError:
        if not timer.expired():
            raise  # the job's own TimeoutError: a failure like any other
        raise _timed_out(inp) from None
    if timer.expired():
        # The job swallowed its cancellation and returned anyway: its result is too late.
        raise _timed_out(inp)
    return result


def _timed_out(inp: GuardedRunInput) -> JobTimedOut:
    return JobTimedOut(
        f"job '{inp.job}' ran past its timeout ({inp.timeout_seconds or 0:g}s) on "
        f"{inp.logical_key} and was cancelled; nothing it wrote was committed. Raise the "
        "schedule's `timeout` if the job needs longer"
    )


async def _heartbeat_temporal() -> None:
    await asyncio.sleep(FIRST_TEMPORAL_HEARTBEAT_AFTER)
    while True:
        activity.heartbeat()
        await asyncio.sleep(TEMPORAL_HEARTBEAT_EVERY)


def _ran(record: CommitRecord) -> RunOutcome:
    return RunOutcome(
        RAN,
        record.logical_key,
        result=record.result,
        fencing_token=record.token,
        attempt=record.attempt,
    )


# Past the job's own timeout, what may still happen in its transaction before the commit
# statement: the next fires (cached, or a describe of at most DESCRIBE_TIMEOUT), a last attempt's
# question to Temporal (the same bound), the guard's own scheduling on a loaded worker.
JOB_IDLE_MARGIN_SECONDS = 30.0


def _job_idle_timeout(info: activity.Info, inp: GuardedRunInput) -> float | None:
    """How long the job's transaction may sit idle while the job runs: never less than the
    job may take, so only a stopped or cut-off holder is ended by it (the guard times a slow
    job out itself, counted from the lease, and rolls its transaction back)."""
    if inp.timeout_seconds is not None:
        return inp.timeout_seconds + JOB_IDLE_MARGIN_SECONDS
    timeout = info.start_to_close_timeout
    return timeout.total_seconds() + JOB_IDLE_MARGIN_SECONDS if timeout else None


def _last_attempt(info: activity.Info) -> bool:
    policy = info.retry_policy
    return policy is not None and 0 < policy.maximum_attempts <= info.attempt


def lease_wait_seconds(
    wait_seconds: float, *, scheduled: datetime, attempt_scheduled: datetime
) -> float:
    """What is left of the run's wait for the lease at this attempt. Every retry of the activity
    carries the same input: without this each attempt could wait the whole of it again, and the
    run's execution timeout (one wait, then every attempt's job timeout) would cut the last job
    short. Both times are Temporal's, so a skewed worker clock changes nothing. The guard
    passes the attempt's start as `attempt_scheduled`, so a wait in the job's queue counts."""
    spent = (attempt_scheduled - scheduled).total_seconds()
    return max(wait_seconds - max(spent, 0.0), 0.0)


def _not_in_rule(inp: GuardedRunInput) -> str | None:
    """Why a zoned schedule's rule never fires this replay's instant (the second reading of a
    repeated wall time it fires once), or None.

    Replays only: a live fire comes from the compiled entries, which hold the rule's instants
    only, and a trigger is the operator's own instant. And only with the zone data the entries
    were compiled from: a worker on other data (a rolling release, a country's new rules)
    could take a real fire for a second reading."""
    zone = inp.zone
    if not zone or not inp.replay or zone.get("tzdata") != zones.ZONE_DB_VERSION:
        return None
    try:
        local = zones.LocalSpec(
            zone=str(zone["timezone"]),
            crons=tuple(zone.get("crons") or ()),
            dst_repeat=zone.get("dst_repeat"),
        )
        return zones.repeat_refusal(local, parse_fire_time(inp.fire_time))
    except (ValueError, KeyError, OSError):
        # A zone or cron this worker cannot read: no reason to refuse what the plan chose.
        return None


def _bound(seconds: float | None) -> timedelta | None:
    """A run input's duration bound for the commit statement (None: unset)."""
    return None if seconds is None else timedelta(seconds=seconds)


def _run_deadline_seconds(info: activity.Info, inp: GuardedRunInput) -> float | None:
    """How long this attempt may hold the lease before the monitor pages: timeout + grace."""
    if inp.timeout_seconds is not None:
        # The activity's start-to-close also covers the wait for the lease, over by now.
        return inp.timeout_seconds + inp.heartbeat_grace_seconds
    timeout = info.start_to_close_timeout
    return timeout.total_seconds() + inp.heartbeat_grace_seconds if timeout else None


def _transaction_ended(
    inp: GuardedRunInput, log: Any, *, then: BaseException | None = None
) -> ApplicationError:
    """`then`: how the run failed after the job ended its transaction, if it did not return."""
    ending = ""
    if isinstance(then, asyncio.CancelledError):
        ending = ", and the run was then cancelled"
    elif then is not None:
        ending = f", and then failed ({type(then).__name__}: {then})"
    log.error(
        "run.transaction-ended-by-job", job=inp.job, then=ending.removeprefix(", and ") or None
    )
    # Not retryable: writes the job committed itself may have landed, and a retry would apply
    # them again. The run fails loudly; the key stays uncommitted and `backfill plan` lists it.
    return ApplicationError(
        f"job '{inp.job}' ended the run's transaction itself (a COMMIT or ROLLBACK inside "
        f"ctx.transaction(), or a script containing one) while running {inp.logical_key}"
        f"{ending}; the outbox record was not written, the lease is released and the run is "
        "not retried, since what the job committed itself may have landed. Remove that "
        "statement: the guard commits the job's writes together with the outbox record",
        type=TRANSACTION_ENDED,
        non_retryable=True,
    )
