"""ScheduledRunWorkflow: derive the logical key, call the guarded activity.

The key is built from the NOMINAL fire time (`TemporalScheduledStartTime`), not from when the
workflow actually started: a fire that starts late after an outage, or a retry, names the same
slot, which is what lets the outbox recognise it.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy, SearchAttributeKey
from temporalio.exceptions import ApplicationError

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
        )
        waiting = (
            timedelta(seconds=inp.lock_wait_seconds)
            if inp.replay and inp.lock_wait_seconds is not None
            else timeout
        )
        give_up_at = workflow.now() + waiting
        backoff = timedelta(seconds=1)  # only for runs started before the lease queue
        while True:
            # The activity waits for the lease itself (activities/lease.py), for as long as is
            # left of the wait; its start-to-close covers that wait plus the job's own timeout.
            left = max(give_up_at - workflow.now(), timedelta(0))
            activity_input.lock_wait_seconds = left.total_seconds()
            outcome: RunOutcome = await workflow.execute_activity(
                RUN_GUARDED,
                activity_input,
                result_type=RunOutcome,
                start_to_close_timeout=timeout + left,
                heartbeat_timeout=min(ACTIVITY_HEARTBEAT_TIMEOUT, timeout),
                retry_policy=run_retry_policy(inp.max_attempts, NON_RETRYABLE_TYPES),
            )
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


def _overlap_timeout(key: str, outcome: RunOutcome, inp: ScheduledRunInput) -> ApplicationError:
    return ApplicationError(
        f"{key}: the lease stayed held by {outcome.held_by or 'another run'} for "
        f"longer than the schedule's timeout ({inp.timeout_seconds:g}s)",
        type=OVERLAP_TIMEOUT,
        non_retryable=True,
    )
