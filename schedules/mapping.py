"""A `ScheduleDefinition` as a Temporal `Schedule`. UTC only: no time zone ever reaches the spec."""

from __future__ import annotations

import hashlib
import json
from datetime import timedelta
from typing import Any

from temporalio.client import (
    Schedule,
    ScheduleActionStartWorkflow,
    ScheduleIntervalSpec,
    ScheduleOverlapPolicy,
    SchedulePolicy,
    ScheduleSpec,
    ScheduleState,
)

from activities.contract import DIGEST_MEMO as DIGEST_MEMO  # re-exported: apply and tests use it
from schedules.model import Overlap, ScheduleDefinition
from workflows.scheduled_run import WORKFLOW_NAME, ScheduledRunInput

# Schedule-level memo marking what cronwarden created (set once, at creation).
MANAGED_MEMO = "cronwarden"
# Action-level memo (updatable with the schedule): the definition we applied and its digest.
# Temporal turns cron strings into calendars, so comparing specs with what describe returns would
# report changes that are not; comparing our own digest is exact.
DEFINITION_MEMO = "cronwarden_definition"

# Part of the digest: bump it when the mapping below changes (workflow input shape, timeouts), so
# the next apply pushes the new shape to schedules whose file entry did not change.
MAPPING_VERSION = 2

_OVERLAP = {
    Overlap.skip: ScheduleOverlapPolicy.SKIP,
    Overlap.buffer_one: ScheduleOverlapPolicy.BUFFER_ONE,
    Overlap.allow_all: ScheduleOverlapPolicy.ALLOW_ALL,
}


def run_input(defn: ScheduleDefinition, *, task_queue: str) -> ScheduledRunInput:
    return ScheduledRunInput(
        schedule_id=defn.id,
        job=defn.job,
        args=dict(defn.args),
        args_digest=defn.args_digest(),
        overlap=defn.overlap.value,
        lock_name=defn.lock_name,
        lock_ttl_seconds=defn.lock_ttl.total_seconds(),
        timeout_seconds=defn.timeout.total_seconds(),
        heartbeat_grace_seconds=defn.heartbeat_grace.total_seconds(),
        max_attempts=defn.max_attempts,
        definition_digest=definition_digest(defn, task_queue=task_queue),
    )


def definition_json(defn: ScheduleDefinition, *, task_queue: str) -> dict[str, Any]:
    # allow_duplicate only steers apply's guard; it is not part of what runs, so flipping it
    # must not count as a change to the schedule.
    data: dict[str, Any] = defn.model_dump(mode="json", exclude={"allow_duplicate"})
    data["task_queue"] = task_queue
    data["workflow"] = WORKFLOW_NAME
    data["mapping_version"] = MAPPING_VERSION
    return data


def definition_digest(defn: ScheduleDefinition, *, task_queue: str) -> str:
    canonical = json.dumps(
        definition_json(defn, task_queue=task_queue), sort_keys=True, separators=(",", ":")
    )
    return hashlib.sha256(canonical.encode()).hexdigest()


def execution_timeout(defn: ScheduleDefinition) -> timedelta:
    """Bound on a whole run (every attempt plus the backoff between them), so a run stuck
    without a worker cannot hold a Skip schedule's overlap slot for ever."""
    backoff = timedelta(seconds=60) * defn.max_attempts
    # buffer_one may first wait up to one timeout for the lease.
    waiting = defn.timeout if defn.overlap == Overlap.buffer_one else timedelta(0)
    return waiting + defn.timeout * defn.max_attempts + backoff + timedelta(minutes=5)


def to_temporal(defn: ScheduleDefinition, *, task_queue: str) -> Schedule:
    if defn.cron is not None:
        spec = ScheduleSpec(cron_expressions=[defn.cron])
    else:
        assert defn.every is not None
        spec = ScheduleSpec(intervals=[ScheduleIntervalSpec(every=defn.every)])
    action = ScheduleActionStartWorkflow(
        WORKFLOW_NAME,
        run_input(defn, task_queue=task_queue),
        id=defn.id,
        task_queue=task_queue,
        execution_timeout=execution_timeout(defn),
        memo={
            DIGEST_MEMO: definition_digest(defn, task_queue=task_queue),
            DEFINITION_MEMO: definition_json(defn, task_queue=task_queue),
        },
    )
    policy = SchedulePolicy(
        overlap=_OVERLAP[defn.overlap],
        catchup_window=defn.catchup_window,
        pause_on_failure=defn.pause_on_failure,
    )
    return Schedule(action=action, spec=spec, policy=policy, state=ScheduleState())
