"""Schedule definitions for tests: fast fires, short leases, everything else the defaults."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from cronwarden.schedules.model import ScheduleDefinition


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


def every_two_seconds(created_at: datetime, end: datetime) -> set[datetime]:
    """The fires of `every: 2s` computed without Temporal: Temporal's intervals are aligned to
    the epoch, and a schedule fires only strictly after its creation."""
    first = int(created_at.timestamp()) + 1
    first += first % 2
    return {datetime.fromtimestamp(s, UTC) for s in range(first, int(end.timestamp()) + 1, 2)}
