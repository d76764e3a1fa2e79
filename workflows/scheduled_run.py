"""ScheduledRunWorkflow: derive the logical key, call the guarded activity.

The key is built from the NOMINAL fire time (`TemporalScheduledStartTime`), not from when the
workflow actually started: a fire that starts late after an outage, or a retry, names the same
slot, which is what lets the outbox recognise it.

The workflow runs on the schedule's task queue; the guarded activity goes to the job's own
queue (workflows/job_queues.py), which only workers that have the job poll.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy, SearchAttributeKey
from temporalio.exceptions import ActivityError, ApplicationError, TimeoutType
from temporalio.exceptions import TimeoutError as ActivityTimeoutError

with workflow.unsafe.imports_passed_through():
    from cronwarden.activities.contract import (
        NO_FIRE_TIME,
        NON_RETRYABLE_TYPES,
        OVERLAP_LOCKED,
        OVERLAP_TIMEOUT,
        RUN_GUARDED,
        GuardedRunInput,
        RunOutcome,
        logical_key,
        nominal_fire_time,
        parse_fire_time,
        per_key_lock_name,
    )
    from cronwarden.activities.run_failures import RECORD_NO_WORKER, NoWorkerInput
    from cronwarden.workflows.hand_back import (
        HAND_BACK_LEASE_MARGIN_SECONDS,
        HAND_BACK_TYPES,
        HANDED_BACK_TOO_OFTEN,
        MAX_HAND_BACKS,
        attempts_spent,
        remaining_attempts,
    )
    from cronwarden.workflows.job_queues import (
        NO_WORKER_WITH_JOB,
        job_queue_problem,
        job_task_queue,
    )

    # Re-exported: schedules, backfill and tests build it from here.
    from cronwarden.workflows.run_input import ScheduledRunInput as ScheduledRunInput

WORKFLOW_NAME = "ScheduledRunWorkflow"
SCHEDULED_START_TIME = SearchAttributeKey.for_datetime("TemporalScheduledStartTime")
# Heartbeats from a live activity come every 2 s: missing them this long means the worker died.
ACTIVITY_HEARTBEAT_TIMEOUT = timedelta(seconds=10)
# Runs started before the lease queue (the activity waits for the lease itself) went on after an
# overlap-locked outcome differently: a replay slept and tried again, and every fire slept 1, 2,
# 4... s. Their histories hold those timers; a worker replaying them must make the same choices.
LEASE_QUEUE_PATCH = "lease-queue"
# Runs started before per-job task queues scheduled their activity on the schedule's own task
# queue, where any worker could take it, with or without the job; their histories replay that way.
JOB_QUEUES_PATCH = "job-task-queues"
# Runs started before hand-backs let Temporal retry an activity cut by a stopping worker (an
# attempt spent) and failed on the last one; their histories replay that way.
HAND_BACK_PATCH = "hand-back"


def run_retry_policy(max_attempts: int, non_retryable: Sequence[str] = ()) -> RetryPolicy:
    """How a run's activity is retried (the benchmark's bare baseline uses the same policy)."""
    return RetryPolicy(
        initial_interval=timedelta(seconds=1),
        backoff_coefficient=2.0,
        maximum_interval=timedelta(seconds=60),
        maximum_attempts=max_attempts,
        non_retryable_error_types=list(non_retryable),
    )


@workflow.defn(name=WORKFLOW_NAME)
class ScheduledRunWorkflow:
    @workflow.run
    async def run(self, inp: ScheduledRunInput) -> RunOutcome:
        fire_time = self._fire_time(inp)
        key = logical_key(inp.schedule_id, fire_time)
        timeout = timedelta(seconds=inp.timeout_seconds)
        lock_name = inp.lock_name or f"schedule:{inp.schedule_id}"
        if inp.overlap == "allow_all":
            # allow_all (read-only jobs only) means runs of different fire times overlap: the
            # lease is per logical key (schedule id and fire time, so two schedules firing at
            # the same moment never share one), and keeps out only a second run of the same
            # key (a replay, a retry racing a live attempt). A definition never pairs allow_all
            # with a shared lock (schedules/model.py), so no shared lock is bypassed here.
            lock_name = per_key_lock_name(key)
        activity_input = GuardedRunInput(
            schedule_id=inp.schedule_id,
            logical_key=key,
            fire_time=fire_time.isoformat(),
            job=inp.job,
            definition_digest=inp.definition_digest,
            args=inp.args,
            args_digest=inp.args_digest,
            labels=inp.labels,
            lock_name=lock_name,
            lock_ttl_seconds=inp.lock_ttl_seconds,
            heartbeat_grace_seconds=inp.heartbeat_grace_seconds,
            replay=inp.replay,
            # Replays wait whoever holds the lease; a live buffer_one fire too. A live skip fire
            # waits only behind a replay (a replay never costs a live fire); behind another
            # live run it is skipped at once, as skip says.
            wait_for_any=inp.replay or inp.overlap == "buffer_one",
            per_key_lease=inp.overlap == "allow_all",
            timeout_seconds=inp.timeout_seconds,
            zone=inp.zone,
            min_duration_seconds=inp.min_duration_seconds,
            max_duration_seconds=inp.max_duration_seconds,
            late_start_seconds=inp.late_start_seconds,
        )
        waiting = (
            timedelta(seconds=inp.lock_wait_seconds)
            if inp.replay and inp.lock_wait_seconds is not None
            else timeout
        )
        give_up_at = workflow.now() + waiting
        job_queue = self._job_queue(inp)
        hand_back = workflow.patched(HAND_BACK_PATCH)
        non_retryable = [*NON_RETRYABLE_TYPES, *(HAND_BACK_TYPES if hand_back else ())]
        handed_back = 0
        spent = 0  # attempts that failed for real in activities handed back since
        # The wait for a worker with the job shares the run's waiting slack with the wait for
        # the lease (the activity counts the time it spent queued against its lease wait): a
        # run that starts still has every attempt's timeout inside its execution timeout.
        no_worker_at = workflow.now() + timeout
        backoff = timedelta(seconds=1)  # only for runs started before the lease queue
        while True:
            # The activity waits for the lease itself (activities/lease.py), for as long as is
            # left of the wait; its start-to-close covers that wait plus the job's own timeout.
            left = max(give_up_at - workflow.now(), timedelta(0))
            activity_input.lock_wait_seconds = left.total_seconds()
            try:
                outcome: RunOutcome = await workflow.execute_activity(
                    RUN_GUARDED,
                    activity_input,
                    result_type=RunOutcome,
                    task_queue=job_queue,
                    # Waiting in the job's queue spends no attempt: Temporal counts one only
                    # when a worker starts it. Unset (no bound but the run's) on the
                    # schedule's queue, as before per-job queues.
                    schedule_to_start_timeout=(
                        max(no_worker_at - workflow.now(), timedelta(seconds=1))
                        if job_queue
                        else None
                    ),
                    start_to_close_timeout=timeout + left,
                    heartbeat_timeout=min(ACTIVITY_HEARTBEAT_TIMEOUT, timeout),
                    retry_policy=run_retry_policy(
                        remaining_attempts(inp.max_attempts, spent), non_retryable
                    ),
                )
            except ActivityError as exc:
                if job_queue and _never_started(exc):
                    error = _no_worker_with_job(key, inp, job_queue)
                    await self._record_no_worker(inp, key, error.message)
                    raise error from exc
                cause = exc.cause
                if (
                    not hand_back
                    or not isinstance(cause, ApplicationError)
                    or cause.type not in HAND_BACK_TYPES
                ):
                    raise
                if handed_back >= MAX_HAND_BACKS:
                    raise _handed_back_too_often(key) from exc
                # A stopping worker gave the run back (its lease released, nothing
                # committed): schedule it again, a new activity whose attempts start over
                # from what the run really spent, so a drain never costs an attempt.
                handed_back += 1
                spent += attempts_spent(cause.type, cause.details)
                # A worker with the job gets as long to take it as the first activity had.
                no_worker_at = workflow.now() + timeout
                # The lease is normally free at once; a stopping worker whose release failed
                # left it to expire within one TTL, so this run waits that long for it,
                # whatever its overlap policy (its fire is under way, not a new one to skip).
                activity_input.wait_for_any = True
                give_up_at = max(
                    give_up_at,
                    workflow.now()
                    + timedelta(seconds=inp.lock_ttl_seconds + HAND_BACK_LEASE_MARGIN_SECONDS),
                )
                workflow.logger.info("%s handed back by a stopping worker (%d)", key, handed_back)
                continue
            if (
                outcome.outcome == OVERLAP_LOCKED
                and handed_back
                and not inp.replay
                and inp.overlap != "buffer_one"
            ):
                # A live fire under way that could not get its lease back: never a silent
                # success, and no skip either (the guard records none for a run that waited
                # for any holder).
                raise _overlap_timeout(key, outcome, inp)
            if outcome.outcome != OVERLAP_LOCKED or inp.overlap != "buffer_one":
                return outcome
            lease_queue = workflow.patched(LEASE_QUEUE_PATCH)
            if inp.replay and lease_queue:
                # A replay left overlap-locked is reported by `backfill run`, which lists it.
                return outcome
            # buffer_one: this fire waits its turn behind whoever holds the lease (another
            # schedule sharing the lock, a replay) instead of being dropped, for the whole of
            # its timeout: the activity only returns overlap-locked early if its attempt was
            # cut short, so go again while time is left.
            if not lease_queue:
                backoff = await self._before_lease_queue(key, outcome, inp, give_up_at, backoff)
                continue
            if workflow.now() >= give_up_at:
                # Fail loudly rather than report success for a fire that never ran: the run
                # fails, a pause_on_failure schedule pauses, and backfill lists the key.
                raise _overlap_timeout(key, outcome, inp)
            await workflow.sleep(min(timedelta(seconds=1), give_up_at - workflow.now()))

    @staticmethod
    async def _before_lease_queue(
        key: str,
        outcome: RunOutcome,
        inp: ScheduledRunInput,
        give_up_at: datetime,
        backoff: timedelta,
    ) -> timedelta:
        """What a run started before the lease queue did after an overlap-locked outcome, kept
        so its history replays: give up if the next sleep would pass the deadline, else sleep
        with a doubling backoff. Returns the next backoff."""
        if workflow.now() + backoff >= give_up_at:
            raise _overlap_timeout(key, outcome, inp)
        await workflow.sleep(backoff)
        return min(backoff * 2, timedelta(seconds=30))

    @staticmethod
    async def _record_no_worker(inp: ScheduledRunInput, key: str, error: str) -> None:
        """Have a worker on the schedule's queue record why the run failed (no guarded activity
        ran to do it). Best effort: the run fails with the same error either way."""
        try:
            await workflow.execute_activity(
                RECORD_NO_WORKER,
                NoWorkerInput(inp.schedule_id, key, inp.job, error, replay=inp.replay),
                start_to_close_timeout=timedelta(seconds=30),
                schedule_to_close_timeout=timedelta(minutes=2),
                retry_policy=RetryPolicy(maximum_interval=timedelta(seconds=10)),
            )
        except ActivityError:
            workflow.logger.warning("could not record the failure of %s", key)

    @staticmethod
    def _job_queue(inp: ScheduledRunInput) -> str | None:
        """The job's activity task queue; None for a run started before per-job queues (its
        activity goes to the schedule's queue, the workflow's own)."""
        if not workflow.patched(JOB_QUEUES_PATCH):
            return None
        task_queue = workflow.info().task_queue
        problem = job_queue_problem(task_queue, inp.job)
        if problem is not None:
            # No worker could ever poll such a queue (a worker refuses to start with the job),
            # and Temporal would refuse the command: fail the run with the reason instead.
            raise ApplicationError(problem, type=NO_WORKER_WITH_JOB, non_retryable=True)
        return job_task_queue(task_queue, inp.job)

    @staticmethod
    def _fire_time(inp: ScheduledRunInput) -> datetime:
        if inp.fire_time:
            try:
                return parse_fire_time(inp.fire_time)
            except ValueError as exc:
                # An ApplicationError fails the run; any other exception would fail the
                # workflow task and retry it for ever.
                raise ApplicationError(str(exc), type=NO_FIRE_TIME, non_retryable=True) from exc
        info = workflow.info()
        nominal = nominal_fire_time(
            schedule_id=inp.schedule_id,
            workflow_id=info.workflow_id,
            scheduled_start=info.typed_search_attributes.get(SCHEDULED_START_TIME),
        )
        if nominal is None:
            raise ApplicationError(
                "no fire time: this run was started outside a schedule without `fire_time`",
                type=NO_FIRE_TIME,
                non_retryable=True,
            )
        return nominal


def _never_started(exc: ActivityError) -> bool:
    """The activity timed out waiting in its queue: no worker took it (Temporal does not retry
    a schedule-to-start timeout)."""
    cause = exc.cause
    return isinstance(cause, ActivityTimeoutError) and cause.type == TimeoutType.SCHEDULE_TO_START


def _no_worker_with_job(key: str, inp: ScheduledRunInput, job_queue: str) -> ApplicationError:
    # "No worker with the job" is the usual reason; workers that all stayed busy for the whole
    # wait are the other one (schedules/pollers.py tells them apart).
    return ApplicationError(
        f"no worker with job '{inp.job}' took {key} within {inp.timeout_seconds:g}s (its "
        f"timeout) from task queue '{job_queue}': none polls it, or every one that does was "
        f"busy, so nothing ran. Start a worker whose CRONWARDEN_JOBS registers '{inp.job}' "
        "(or give the workers more CRONWARDEN_MAX_CONCURRENT_RUNS), then replay the key with "
        "`backfill run`",
        type=NO_WORKER_WITH_JOB,
        non_retryable=True,
    )


def _handed_back_too_often(key: str) -> ApplicationError:
    return ApplicationError(
        f"{key} was handed back by stopping workers {MAX_HAND_BACKS} times in a row and "
        "never finished: workers are stopped more often than the job takes. Nothing was "
        "committed; replay the key with `backfill run` once the workers stay up",
        type=HANDED_BACK_TOO_OFTEN,
        non_retryable=True,
    )


def _overlap_timeout(key: str, outcome: RunOutcome, inp: ScheduledRunInput) -> ApplicationError:
    return ApplicationError(
        f"{key}: the lease stayed held by {outcome.held_by or 'another run'} for "
        f"longer than the schedule's timeout ({inp.timeout_seconds:g}s)",
        type=OVERLAP_TIMEOUT,
        non_retryable=True,
    )
