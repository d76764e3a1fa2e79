"""ScheduledRunWorkflow: derive the logical key, call the guarded activity.

The key is built from the NOMINAL fire time (`TemporalScheduledStartTime`), not from when the
workflow actually started: a fire that starts late after an outage, or a retry, names the same
slot, which is what lets the outbox recognise it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RetryPolicy, SearchAttributeKey
from temporalio.exceptions import ApplicationError

with workflow.unsafe.imports_passed_through():
    from activities.contract import (
        NO_FIRE_TIME,
        NON_RETRYABLE_TYPES,
        OVERLAP_LOCKED,
        OVERLAP_TIMEOUT,
        RUN_GUARDED,
        GuardedRunInput,
        RunOutcome,
        format_fire_time,
        logical_key,
        parse_fire_time,
    )

WORKFLOW_NAME = "ScheduledRunWorkflow"
SCHEDULED_START_TIME = SearchAttributeKey.for_datetime("TemporalScheduledStartTime")
# Heartbeats from a live activity come every 2 s: missing them this long means the worker died.
ACTIVITY_HEARTBEAT_TIMEOUT = timedelta(seconds=10)


def run_retry_policy(max_attempts: int, non_retryable: Sequence[str] = ()) -> RetryPolicy:
    """How a run's activity is retried (the benchmark's bare baseline uses the same policy)."""
    return RetryPolicy(
        initial_interval=timedelta(seconds=1),
        backoff_coefficient=2.0,
        maximum_interval=timedelta(seconds=60),
        maximum_attempts=max_attempts,
        non_retryable_error_types=list(non_retryable),
    )


@dataclass
class ScheduledRunInput:
    """The schedule's action argument: one object, so it can grow without breaking histories."""

    schedule_id: str
    job: str
    args: dict[str, Any] = field(default_factory=dict)
    args_digest: str = ""
    definition_digest: str = ""
    """The digest of the definition `schedules apply` wrote (also on the heartbeat row): the
    worker's cache of next fire times is keyed by it."""
    overlap: str = "skip"
    lock_name: str = ""
    lock_ttl_seconds: float = 60.0
    timeout_seconds: float = 900.0
    heartbeat_grace_seconds: float = 900.0
    max_attempts: int = 3
    fire_time: str | None = None
    """Set by replays (backfill, tests): the nominal fire time to run. Scheduled fires leave it
    empty and the workflow reads `TemporalScheduledStartTime`."""
    replay: bool = False
    """Set by `backfill run`: this run re-applies a past fire, it is not the schedule's live fire.
    A live fire has priority over replays for the lease, and a replay's commit never moves the
    live grid's heartbeat."""
    lock_wait_seconds: float | None = None
    """Set by `backfill run`: how long a replay may wait for the lease. Live fires wait at most
    their timeout."""


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
            # lease is per logical key, and keeps out only a second run of the same key (a
            # replay, a retry racing a live attempt). `@` never occurs in a schedule's lock name
            # `schedule:{id}`, so a per-key lease never collides with a schedule's lease.
            lock_name = f"{lock_name}@{format_fire_time(fire_time)}"
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
            if outcome.outcome != OVERLAP_LOCKED or inp.overlap != "buffer_one" or inp.replay:
                # A replay left overlap-locked is reported by `backfill run`, which lists it.
                return outcome
            # buffer_one: this fire waits its turn behind whoever holds the lease (another
            # schedule sharing the lock, a replay) instead of being dropped, for the whole of
            # its timeout: the activity only returns overlap-locked early if its attempt was
            # cut short, so go again while time is left.
            if workflow.now() >= give_up_at:
                # Fail loudly rather than report success for a fire that never ran: the run
                # fails, a pause_on_failure schedule pauses, and backfill lists the key.
                raise ApplicationError(
                    f"{key}: the lease stayed held by {outcome.held_by or 'another run'} for "
                    f"longer than the schedule's timeout ({inp.timeout_seconds:g}s)",
                    type=OVERLAP_TIMEOUT,
                    non_retryable=True,
                )
            await workflow.sleep(min(timedelta(seconds=1), give_up_at - workflow.now()))

    @staticmethod
    def _fire_time(inp: ScheduledRunInput) -> datetime:
        if inp.fire_time:
            try:
                return parse_fire_time(inp.fire_time)
            except ValueError as exc:
                # An ApplicationError fails the run; any other exception would fail the
                # workflow task and retry it for ever.
                raise ApplicationError(str(exc), type=NO_FIRE_TIME, non_retryable=True) from exc
        scheduled = workflow.info().typed_search_attributes.get(SCHEDULED_START_TIME)
        if scheduled is None:
            raise ApplicationError(
                "no fire time: this run was started outside a schedule without `fire_time`",
                type=NO_FIRE_TIME,
                non_retryable=True,
            )
        return parse_fire_time(scheduled.isoformat())
