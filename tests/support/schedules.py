"""Schedule definitions for tests: fast fires, short leases, everything else the defaults; a
schedule that never fires on its own, one cronwarden did not create, and schedule files."""

from __future__ import annotations

import textwrap
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from temporalio.client import (
    Client,
    Schedule,
    ScheduleActionStartWorkflow,
    ScheduleHandle,
    ScheduleIntervalSpec,
    ScheduleSpec,
)

from cronwarden.schedules.model import ScheduleDefinition

FAR_CRON = "0 3 1 1 *"  # once a year: the schedule never fires on its own during a test


def definition(schedule_id: str, **fields: Any) -> ScheduleDefinition:
    base: dict[str, Any] = {
        "id": schedule_id,
        "job": "probe",
        "every": "2s",
        "catchup_window": "1m",
        "heartbeat_grace": "1m",
        "lock_ttl": "10s",
        "timeout": "30s",
    }
    base.update(fields)
    return ScheduleDefinition.model_validate(base)


def yearly_definition(schedule_id: str, **fields: Any) -> ScheduleDefinition:
    """A definition on `FAR_CRON`, everything else the defaults: it fires only when told to."""
    base: dict[str, Any] = {"id": schedule_id, "job": "probe", "cron": FAR_CRON}
    base.update(fields)
    return ScheduleDefinition.model_validate(base)


def new_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


async def foreign_schedule(
    client: Client, sid: str, task_queue: str, *, memo: dict[str, Any] | None = None
) -> ScheduleHandle:
    """A schedule cronwarden did not create: another workflow's, without cronwarden's memo."""
    return await client.create_schedule(
        sid,
        Schedule(
            action=ScheduleActionStartWorkflow("SomeoneElses", id="x", task_queue=task_queue),
            spec=ScheduleSpec(intervals=[ScheduleIntervalSpec(every=timedelta(days=300))]),
        ),
        memo=memo,
    )


def write_schedules_file(tmp_path: Path, text: str) -> Path:
    """A schedule file of `text` (dedented) under `tmp_path`, named anew on each call."""
    path = tmp_path / f"schedules-{uuid.uuid4().hex[:6]}.yaml"
    path.write_text(textwrap.dedent(text))
    return path


def every_two_seconds(created_at: datetime, end: datetime) -> set[datetime]:
    """The fires of `every: 2s` computed without Temporal: Temporal's intervals are aligned to
    the epoch, and a schedule fires only strictly after its creation."""
    first = int(created_at.timestamp()) + 1
    first += first % 2
    return {datetime.fromtimestamp(s, UTC) for s in range(first, int(end.timestamp()) + 1, 2)}
