"""Runs recorded by earlier workflow code still replay on today's, so a deploy never fails a run
that is under way; and runs recorded by today's keep replaying as the code changes.

The histories in tests/histories/ were recorded on real servers:

- before the lease queue (the activity waits for the lease itself): a `buffer_one` run found
  its lease held by another run three times, slept 1, 2 and 4 s between the tries, and then
  ran. One of them is a replay (`replay=True`), which today's code reports at once instead of
  sleeping.
- before per-job task queues: a plain run whose guarded activity went to the schedule's own
  task queue (`skip_run_before_job_queues`).
- with per-job task queues: a run whose activity went to its job's queue and ran
  (`skip_run_on_job_queue`), and one that no worker with its job took within its timeout: the
  activity timed out before it started, a worker on the schedule's queue recorded the failure,
  and the run failed (`no_worker_with_job`).
- with hand-backs: a run whose worker was stopped while its job ran; the guard handed it back
  (`HandedBack`, not retried by Temporal), and the workflow ran it again as a new activity,
  which committed at its first attempt (`hand_back_while_running`).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import WorkflowHistory
from temporalio.worker import Replayer

from cronwarden.workflows.hand_back import HANDED_BACK
from cronwarden.workflows.scheduled_run import ScheduledRunWorkflow

HISTORIES = Path(__file__).resolve().parents[1] / "histories"


async def replay_failure(name: str) -> Exception | None:
    history = WorkflowHistory.from_json(name, (HISTORIES / f"{name}.json").read_text())
    result = await Replayer(workflows=[ScheduledRunWorkflow]).replay_workflow(
        history, raise_on_replay_failure=False
    )
    return result.replay_failure


@pytest.mark.parametrize(
    "name", ["buffer_one_replay_overlap_locked", "buffer_one_live_overlap_locked"]
)
async def test_a_run_recorded_before_the_lease_queue_replays_on_the_current_workflow(
    name: str,
) -> None:
    assert await replay_failure(name) is None


async def test_a_run_recorded_before_per_job_queues_replays_on_the_current_workflow() -> None:
    assert await replay_failure("skip_run_before_job_queues") is None


@pytest.mark.parametrize("name", ["skip_run_on_job_queue", "no_worker_with_job"])
async def test_a_run_recorded_on_a_job_queue_replays_on_the_current_workflow(name: str) -> None:
    assert await replay_failure(name) is None


async def test_a_run_handed_back_by_a_stopping_worker_replays_on_the_current_workflow() -> None:
    assert await replay_failure("hand_back_while_running") is None


async def test_a_recorded_hand_back_is_a_new_activity_at_its_first_attempt() -> None:
    # What the recording shows, checked so a later re-recording cannot quietly lose it: the
    # cut activity was not retried, and the one scheduled after it committed.
    history = WorkflowHistory.from_json(
        "hand_back_while_running", (HISTORIES / "hand_back_while_running.json").read_text()
    )
    attempts = [
        e.activity_task_started_event_attributes.attempt
        for e in history.events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED
    ]
    failures = [
        e.activity_task_failed_event_attributes.failure.application_failure_info.type
        for e in history.events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_FAILED
    ]
    assert attempts == [1, 1]
    assert failures == [HANDED_BACK]
