from __future__ import annotations

from datetime import timedelta
from typing import Any

from temporalio.client import ScheduleActionStartWorkflow, ScheduleOverlapPolicy

from schedules.mapping import definition_digest, execution_timeout, run_input, to_temporal
from schedules.model import ScheduleDefinition


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


def test_a_run_is_bounded_by_all_its_attempts_and_buffer_one_waits_longer() -> None:
    skip = execution_timeout(defn(timeout="10m", max_attempts=3))
    assert skip >= timedelta(minutes=30)
    assert execution_timeout(defn(timeout="10m", max_attempts=3, overlap="buffer_one")) > skip
