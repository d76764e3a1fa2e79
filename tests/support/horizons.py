"""The compiled horizon of a local-time schedule in tests: a heartbeat row near it, the
monitor's pass deciding on such rows from plain values, and the horizon a row holds."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg

from cronwarden.monitor.scan import SystemRule, plan
from cronwarden.store import heartbeats

NOW = datetime(2028, 12, 22, 12, 0, tzinfo=UTC)
HORIZON_AT = datetime(2029, 1, 1, tzinfo=UTC)
LEAD = timedelta(days=30)
_FINDINGS = ("overdue", "incident_heartbeats", "overlong", "open_incidents")


def row(sid: str, *, until: datetime | None = HORIZON_AT, late: bool = False) -> dict[str, Any]:
    """A heartbeat row as the monitor reads it at `NOW`: compiled until `until`, and overdue
    when `late`."""
    return {
        "schedule_id": sid,
        "next_expected_at": NOW - timedelta(hours=1) if late else NOW + timedelta(hours=1),
        "grace": timedelta(minutes=1),
        "last_success_at": NOW - timedelta(hours=2),
        "last_error": None,
        "paused": False,
        "compiled_until": until,
    }


def decide(**kw: Any) -> Any:
    """`scan.plan` at `NOW` with the horizon lead `LEAD`: nothing found unless `kw` says so."""
    found: dict[str, Any] = {name: [] for name in _FINDINGS}
    rule = SystemRule(min_schedules=3, ratio=0.2)
    return plan(**(found | {"now": NOW, "watched": 10, "rule": rule, "horizon_lead": LEAD} | kw))


async def stored_horizon(pool: asyncpg.Pool, schedule_id: str) -> datetime | None:
    """The horizon `schedule_id`'s heartbeat row holds (the row must exist)."""
    async with pool.acquire() as conn:
        found = await heartbeats.get(conn, schedule_id)
    assert found is not None
    until: datetime | None = found["compiled_until"]
    return until
