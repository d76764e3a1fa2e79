from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from temporalio.client import ScheduleActionStartWorkflow, ScheduleOverlapPolicy

from cronwarden.activities.guard import lease_wait_seconds
from cronwarden.schedules.mapping import (
    definition_digest,
    execution_timeout,
    run_input,
    to_temporal,
)
from cronwarden.schedules.model import ScheduleDefinition
from cronwarden.workflows.scheduled_run import run_retry_policy


def defn(**fields: Any) -> ScheduleDefinition:
    return ScheduleDefinition.model_validate(
        {"id": "s1", "job": "probe", "cron": "0 2 * * *", **fields}
    )


def test_the_schedule_carries_overlap_catchup_and_pause_on_failure() -> None:
    schedule = to_temporal(
        defn(overlap="buffer_one", catchup_window="2h", pause_on_failure=False), task_queue="q"
    )
    assert schedule.policy.overlap == ScheduleOverlapPolicy.BUFFER_ONE
    assert schedule.policy.catchup_window == timedelta(hours=2)
    assert schedule.policy.pause_on_failure is False
    assert schedule.spec.cron_expressions == ["0 2 * * *"]
    assert schedule.spec.time_zone_name is None  # UTC only


def test_the_action_starts_the_run_workflow_under_the_schedule_id() -> None:
    action = to_temporal(defn(every="15m", cron=None), task_queue="q").action
    assert isinstance(action, ScheduleActionStartWorkflow)
    assert (action.workflow, action.id, action.task_queue) == ("ScheduledRunWorkflow", "s1", "q")


def test_the_run_input_carries_everything_the_guard_needs() -> None:
    d = defn(lock="billing", lock_ttl="30s", timeout="5m", args={"b": 1, "a": 2})
    inp = run_input(d, task_queue="q")
    assert inp.lock_name == "billing"
    assert (inp.lock_ttl_seconds, inp.timeout_seconds) == (30, 300)
    assert inp.args == {"b": 1, "a": 2}
    assert inp.fire_time is None  # a scheduled fire reads TemporalScheduledStartTime
    # The worker keys its cache of next fire times by it; the heartbeat row holds the same.
    assert inp.definition_digest == definition_digest(d, task_queue="q")


def test_the_digest_changes_with_any_field_or_the_task_queue_but_not_key_order() -> None:
    base = definition_digest(defn(args={"a": 1, "b": 2}), task_queue="q")
    assert base == definition_digest(defn(args={"b": 2, "a": 1}), task_queue="q")
    assert base != definition_digest(defn(args={"a": 1, "b": 2}), task_queue="other")
    assert base != definition_digest(defn(args={"a": 1, "b": 2}, timeout="16m"), task_queue="q")


@pytest.mark.parametrize("overlap", ["skip", "buffer_one", "allow_all"])
def test_a_live_fire_that_waits_a_whole_timeout_still_has_every_attempts_timeout(
    overlap: str,
) -> None:
    # Any live fire may wait up to its timeout for the lease (a skip or allow_all fire behind a
    # replay): every attempt that follows, and the backoff between them, must still fit, or
    # Temporal ends the run mid-job and the job's writes roll back.
    d = defn(timeout="15m", max_attempts=3, overlap=overlap)
    policy = run_retry_policy(d.max_attempts)
    backoff = sum(
        (
            min(
                policy.initial_interval * policy.backoff_coefficient**n,
                policy.maximum_interval or timedelta.max,
            )
            for n in range(d.max_attempts - 1)
        ),
        timedelta(0),
    )
    assert execution_timeout(d) >= d.timeout + d.timeout * d.max_attempts + backoff


def test_a_retried_attempt_waits_only_what_is_left_of_the_runs_wait_for_the_lease() -> None:
    # The execution timeout holds one wait: a retry scheduled after attempts and backoff that
    # took 100 s of a 900 s wait waits at most the 800 s left, and none once it is spent.
    first = datetime(2026, 1, 5, 9, 30, tzinfo=UTC)
    assert lease_wait_seconds(900, scheduled=first, attempt_scheduled=first) == 900
    later = first + timedelta(seconds=100)
    assert lease_wait_seconds(900, scheduled=first, attempt_scheduled=later) == 800
    assert lease_wait_seconds(60, scheduled=first, attempt_scheduled=later) == 0
