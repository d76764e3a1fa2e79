"""`cronwarden audit`: what should have run, set against what committed, what is running, and
what Temporal says it skipped or missed.

Temporal's UI shows what ran; nothing there lists the fires that never became an execution
(skipped for overlap, dropped beyond the catchup window, lost while paused). Here the expected
set is Temporal's own evaluation of the spec, and the outbox says which of those committed.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

import asyncpg
from temporalio.client import Client, ScheduleActionExecutionStartWorkflow

from activities.contract import format_fire_time, logical_key, parse_fire_time
from schedules.backfill import ManagedSchedule, plan
from schedules.window import Window
from store import outbox
from workflows.scheduled_run import WORKFLOW_NAME


@dataclass
class Audit:
    schedule_id: str
    window: Window
    expected: int
    committed: int
    """Expected fire times with an outbox record."""
    committed_off_spec: int
    """Outbox records in the window at times the current spec does not produce (a manual
    trigger, a spec changed since)."""
    in_flight: list[datetime]
    """Expected fire times whose run is executing now (no outbox record yet)."""
    missing: list[datetime]
    """Expected fire times with neither an outbox record nor a run in flight."""
    actions_total: int
    skipped_overlap_total: int
    missed_catchup_window_total: int
    paused: bool

    def as_json(self) -> dict[str, Any]:
        return {
            "schedule_id": self.schedule_id,
            "window": self.window.as_json(),
            "expected": self.expected,
            "committed": self.committed,
            "in_flight": len(self.in_flight),
            "missing": len(self.missing),
            "committed_off_spec": self.committed_off_spec,
            "missing_keys": [logical_key(self.schedule_id, t) for t in self.missing],
            "in_flight_keys": [logical_key(self.schedule_id, t) for t in self.in_flight],
            "temporal": {
                "paused": self.paused,
                "actions_total": self.actions_total,
                "skipped_overlap_total": self.skipped_overlap_total,
                "missed_catchup_window_total": self.missed_catchup_window_total,
            },
        }


async def audit(
    client: Client, pool: asyncpg.Pool, schedule: ManagedSchedule, window: Window
) -> Audit:
    planned = await plan(client, pool, schedule, window)
    running = await running_fire_times(client, schedule)
    missing_times = list(planned.missing_times())
    in_flight = [t for t in missing_times if t in running]
    async with pool.acquire() as conn:
        in_window = (
            0
            if planned.window.empty
            else await outbox.done_in_window(
                conn, schedule.schedule_id, planned.window.start, planned.window.end
            )
        )
    info = schedule.description.info
    return Audit(
        schedule_id=schedule.schedule_id,
        window=planned.window,
        expected=planned.expected,
        committed=planned.done,
        committed_off_spec=in_window - planned.done,
        in_flight=in_flight,
        missing=[t for t in missing_times if t not in running],
        actions_total=info.num_actions,
        skipped_overlap_total=info.num_actions_skipped_overlap,
        missed_catchup_window_total=info.num_actions_missed_catchup_window,
        paused=schedule.description.schedule.state.paused,
    )


async def running_fire_times(client: Client, schedule: ManagedSchedule) -> set[datetime]:
    """Fire times of the schedule's runs executing now: scheduled fires (describe's running
    actions, exact) and replays (visibility, which may lag a second or two behind a start)."""
    prefix = f"{schedule.schedule_id}-"
    ids = {
        action.workflow_id
        for action in schedule.description.info.running_actions
        if isinstance(action, ScheduleActionExecutionStartWorkflow)
    }
    query = (
        f"WorkflowType = '{WORKFLOW_NAME}' AND ExecutionStatus = 'Running' "
        f"AND WorkflowId STARTS_WITH '{prefix}'"
    )
    async for execution in client.list_workflows(query):
        ids.add(execution.id)
    times = set()
    for workflow_id in ids:
        fire_time = fire_time_of(schedule.schedule_id, workflow_id)
        if fire_time is not None:
            times.add(fire_time)
    return times


def fire_time_of(schedule_id: str, workflow_id: str) -> datetime | None:
    """The fire time a run's workflow id names (`{id}-{time}` or `{id}-replay-{time}`); None for
    an id of another shape (another schedule whose id merely starts with this one)."""
    rest = workflow_id.removeprefix(f"{schedule_id}-")
    if rest == workflow_id:
        return None
    rest = rest.removeprefix("replay-")
    try:
        fire_time = parse_fire_time(rest)
    except ValueError:
        return None
    return fire_time if format_fire_time(fire_time) == rest else None
