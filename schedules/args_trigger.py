"""`schedules trigger ID --args '{...}'`: a run now with other args than the schedule's.

Temporal's trigger cannot override the args of a schedule's action, so this starts
ScheduledRunWorkflow itself, as a replay does, with the schedule's live action input (described
now) whose `args` and `args_digest` are replaced. The run is named as Temporal names a trigger's:
workflow id `{schedule id}-{now, whole seconds}`, logical key `{schedule id}@{now}`, and it is a
live run (not a replay): it takes the schedule's lease like a live fire, and a `skip` schedule
whose lease is held by a running run skips it at once (recorded as a skip at the lease, nothing
run), which this reports. Temporal's own overlap policy does not see a run it did not start; the
lease is what keeps the two apart.

The second is chosen so that the id is none a schedule's own run has or will take: not the
second of a fire Temporal lists ahead, nor of one of its recent runs (a manual start that takes
an id a schedule will generate can wedge that schedule: temporalio/temporal#10579), and a start
refused because the id is taken moves to the next second.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta

from temporalio.client import Client, WorkflowFailureError
from temporalio.common import WorkflowIDReusePolicy
from temporalio.exceptions import WorkflowAlreadyStartedError

from cronwarden.activities.contract import (
    ALREADY_DONE,
    OVERLAP_LOCKED,
    RAN,
    RunOutcome,
    format_fire_time,
    logical_key,
)
from cronwarden.activities.jobs import JobRegistry
from cronwarden.errors import CronwardenError
from cronwarden.logs import get_logger
from cronwarden.schedules.inventory import get_managed
from cronwarden.schedules.operations import (
    TRIGGER_WAIT_SECONDS,
    Triggered,
    TriggerNotStarted,
    same_second_wait,
    server_time_floor,
)
from cronwarden.schedules.overridden_args import OverriddenArgs, check_for_job
from cronwarden.workflows.scheduled_run import WORKFLOW_NAME

log = get_logger("cronwarden.schedules")

# Seconds tried after the first one before giving up on a free workflow id.
MAX_ID_TRIES = 5


class TriggeredRunFailed(CronwardenError):
    """The run a trigger with args started failed (its job raised, a worker refused the args)."""


@dataclass
class ArgsTriggered(Triggered):
    args_digest: str = ""
    """The digest of the args the run was given: what the outbox records for its key."""
    outcome: str | None = None
    """`ran` or `already-done` when the run ended within the wait; None while it runs."""


async def trigger_with_args(
    client: Client,
    schedule_id: str,
    given: OverriddenArgs,
    registry: JobRegistry | None,
    *,
    wait_seconds: float = TRIGGER_WAIT_SECONDS,
) -> ArgsTriggered:
    """Start a run of the schedule now with `given` args, checked against its job's model
    first (nothing starts otherwise), and wait up to `wait_seconds` for its outcome."""
    from cronwarden.backfill.plan import load_managed

    schedule = await load_managed(client, schedule_id)
    check_for_job(given, schedule.run_input.job, registry)
    view = await get_managed(client, schedule_id)
    taken = {t.replace(microsecond=0) for t in view.next_fire_times}
    taken |= {r.scheduled_at.replace(microsecond=0) for r in view.recent_runs}
    newest = max((r.scheduled_at for r in view.recent_runs), default=None)
    wait = same_second_wait(newest, server_time_floor(view))
    if wait > 0:
        await asyncio.sleep(wait)
    base = replace(
        schedule.run_input,
        args=dict(given.args),
        args_digest=given.digest,
        replay=False,
        lock_wait_seconds=None,
    )
    fire = datetime.now(UTC).replace(microsecond=0)
    for _ in range(MAX_ID_TRIES + 1):
        while fire in taken:
            fire += timedelta(seconds=1)
        workflow_id = f"{schedule_id}-{format_fire_time(fire)}"
        try:
            handle = await client.start_workflow(
                WORKFLOW_NAME,
                replace(base, fire_time=format_fire_time(fire)),
                id=workflow_id,
                task_queue=schedule.task_queue,
                execution_timeout=schedule.execution_timeout,
                # A run of this id already (a trigger in the same second): the next second.
                id_reuse_policy=WorkflowIDReusePolicy.REJECT_DUPLICATE,
                result_type=RunOutcome,
            )
            break
        except WorkflowAlreadyStartedError:
            taken.add(fire)
    else:
        raise TriggerNotStarted(
            f"no free second to name the triggered run of '{schedule_id}' after "
            f"{MAX_ID_TRIES + 1} tries: nothing started"
        )
    key = logical_key(schedule_id, fire)
    # The run's args in the logs, with its key: what it was given is not in the schedule.
    log.info(
        "schedule.triggered-with-args",
        schedule_id=schedule_id,
        logical_key=key,
        workflow_id=workflow_id,
        args_digest=given.digest,
        args=given.args,
        source=given.source,
    )
    started = ArgsTriggered(
        schedule_id=schedule_id,
        workflow_id=workflow_id,
        logical_key=key,
        fire_time=fire,
        note="off the schedule's grid: the key names the trigger time, not a fire time",
        args_digest=given.digest,
    )
    try:
        outcome = await asyncio.wait_for(handle.result(), timeout=wait_seconds)
    except TimeoutError:
        return replace(started, note=f"{started.note}; still running")
    except WorkflowFailureError as exc:
        from cronwarden.backfill.replay import _error_detail

        raise TriggeredRunFailed(
            f"the triggered run {workflow_id} ({key}) failed: {_error_detail(exc)}"
        ) from None
    return _ended(started, outcome, overlap=schedule.run_input.overlap)


def _ended(started: ArgsTriggered, outcome: RunOutcome, *, overlap: str) -> ArgsTriggered:
    if outcome.outcome == RAN:
        return replace(started, outcome=RAN)
    if outcome.outcome == ALREADY_DONE and not outcome.args_mismatch:
        return replace(started, outcome=ALREADY_DONE, note=f"{started.note}; already done")
    if outcome.outcome == ALREADY_DONE:
        raise TriggerNotStarted(
            f"{started.logical_key} was already done with other args: the args conflict is "
            "reported, nothing ran again"
        )
    if outcome.outcome == OVERLAP_LOCKED:
        raise TriggerNotStarted(
            f"the triggered run of '{started.schedule_id}' ({started.logical_key}) was skipped "
            f"at the schedule's lease, held by {outcome.held_by or 'another run'}: overlap is "
            f"{overlap} and a run was still going, so nothing ran; try again when it has "
            "finished"
        )
    notes = "; ".join(outcome.notes) or outcome.outcome
    raise TriggerNotStarted(f"the triggered run {started.logical_key} did not run: {notes}")
