"""Workflow ids of a schedule's runs: Temporal's for scheduled fires, ours for replays.

Temporal names a scheduled run `{schedule_id}-{fire time}`, and schedule ids are
`[a-z0-9][a-z0-9-]{0,62}`. A replay is named `{schedule_id}~replay-{fire time}`: `~` is outside
the schedule id alphabet and never occurs in a fire time, so no schedule's run can ever carry a
replay's id. (The older form `{id}-replay-{time}` was exactly the run id of a schedule named
`{id}-replay`, and a manual start that takes an id a schedule will generate can wedge that
schedule: temporalio/temporal#10579.)
"""

from __future__ import annotations

from datetime import datetime

from cronwarden.activities.contract import format_fire_time, parse_fire_time

REPLAY_INFIX = "~replay-"


def replay_workflow_id(schedule_id: str, fire_time: datetime) -> str:
    return f"{schedule_id}{REPLAY_INFIX}{format_fire_time(fire_time)}"


def scheduled_fire_time(schedule_id: str, workflow_id: str) -> datetime | None:
    """The fire time a scheduled run's id (`{id}-{time}`) names; None for any other shape."""
    return _fire_time_after(f"{schedule_id}-", workflow_id)


def replay_fire_time(schedule_id: str, workflow_id: str) -> datetime | None:
    """The fire time a replay's id (`{id}~replay-{time}`) names; None for any other shape."""
    return _fire_time_after(f"{schedule_id}{REPLAY_INFIX}", workflow_id)


def _fire_time_after(prefix: str, workflow_id: str) -> datetime | None:
    if not workflow_id.startswith(prefix):
        return None
    rest = workflow_id[len(prefix) :]
    try:
        fire_time = parse_fire_time(rest)
    except ValueError:
        return None
    # Only the exact form the id was built with: `2026-11-30T04:00:00Z`, nothing before or after.
    return fire_time if format_fire_time(fire_time) == rest else None
