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
"""

from __future__ import annotations

from pathlib import Path

import pytest
from temporalio.client import WorkflowHistory
from temporalio.worker import Replayer

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
