"""Runs started by the workflow code before the lease queue (the activity waits for the lease
itself) still replay on today's workflow code, so a deploy never fails a run that is under way.

The histories in tests/histories/ were recorded from that previous code (workflows/
scheduled_run.py before the lease queue) on real servers: a `buffer_one` run found its lease held
by another run three times, slept 1, 2 and 4 s between the tries, and then ran. One of them is a
replay (`replay=True`), which today's code reports at once instead of sleeping.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from temporalio.client import WorkflowHistory
from temporalio.worker import Replayer

from cronwarden.workflows.scheduled_run import ScheduledRunWorkflow

HISTORIES = Path(__file__).resolve().parents[1] / "histories"


@pytest.mark.parametrize(
    "name", ["buffer_one_replay_overlap_locked", "buffer_one_live_overlap_locked"]
)
async def test_a_run_recorded_before_the_lease_queue_replays_on_the_current_workflow(
    name: str,
) -> None:
    history = WorkflowHistory.from_json(
        f"before-lease-queue-{name}", (HISTORIES / f"{name}.json").read_text()
    )
    result = await Replayer(workflows=[ScheduledRunWorkflow]).replay_workflow(history)
    assert result.replay_failure is None
