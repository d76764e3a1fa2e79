"""What the absence monitor reads, in one consistent snapshot: overdue heartbeats (by the
indexed `alert_after` deadline), local-time schedules near their compiled horizon, schedules
whose last live run broke a duration bound, leases held past their run deadline, and the open
incidents."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

# What the monitor reads of a heartbeat row, whichever query found it.
_COLUMNS = """
schedule_id, next_expected_at, grace, last_success_at, last_error, paused, compiled_until,
last_fire_time, last_run_key, last_run_started_at, last_run_duration, last_run_breach,
duration_min, duration_max, late_start, paused_until, unpause_error, unpause_failed_at"""

# The hot query. `alert_after = next_expected_at + grace` is kept by a trigger and indexed with
# the same `WHERE NOT paused` predicate, so this is a range scan over the overdue rows only.
OVERDUE = f"""
SELECT {_COLUMNS}
  FROM cronwarden.heartbeats
 WHERE NOT paused AND alert_after < now()
 ORDER BY alert_after
"""

_BY_IDS = f"""
SELECT {_COLUMNS}
  FROM cronwarden.heartbeats
 WHERE schedule_id = ANY($1::text[])
"""

# Schedules whose last live run broke a duration bound (index of migration 0026).
BREACHES = f"""
SELECT {_COLUMNS}
  FROM cronwarden.heartbeats
 WHERE last_run_breach IS NOT NULL AND NOT paused
 ORDER BY schedule_id
"""

# Timed pauses the monitor could not end (migration 0027): still paused, so no other query
# finds them. Few, found by the index on `paused_until`.
UNPAUSE_FAILURES = f"""
SELECT {_COLUMNS}
  FROM cronwarden.heartbeats
 WHERE paused AND paused_until IS NOT NULL AND unpause_error IS NOT NULL
 ORDER BY schedule_id
"""

# Local-time schedules whose compiled entries end within the lead (or have ended): past the
# horizon Temporal fires nothing and the row's deadline goes empty, so only this finds them.
# A range scan over the zoned, unpaused rows (index of migration 0023).
HORIZONS = f"""
SELECT {_COLUMNS}
  FROM cronwarden.heartbeats
 WHERE compiled_until IS NOT NULL AND NOT paused AND compiled_until <= now() + $1::interval
 ORDER BY compiled_until
"""

# A live lease (held and still renewed) whose run should have finished by now. The table holds
# one row per lock name, so scanning it is cheap.
_OVERLONG = """
SELECT schedule_id, logical_key, holder, acquired_at, run_deadline
  FROM cronwarden.locks
 WHERE holder IS NOT NULL AND expires_at > now() AND run_deadline < now()
   AND schedule_id IS NOT NULL
"""

_OPEN_INCIDENTS = """
SELECT id, schedule_id, kind, parent_id, opened_at, summary, details
  FROM cronwarden.incidents
 WHERE resolved_at IS NULL
"""

# Schedules that have been members of the open system incident (open or resolved since).
_SYSTEM_MEMBERS = """
SELECT DISTINCT m.schedule_id
  FROM cronwarden.incidents s
  JOIN cronwarden.incidents m ON m.parent_id = s.id
 WHERE s.schedule_id IS NULL AND s.resolved_at IS NULL
"""

_WATCHED = """
SELECT schedule_id, last_success_at,
       extract(epoch FROM now() - last_success_at)::float8 AS seconds_since_success
  FROM cronwarden.heartbeats
 WHERE NOT paused
"""


@dataclass(frozen=True)
class Snapshot:
    now: datetime
    """Database time of the snapshot: every deadline is judged against it."""
    overdue: list[dict[str, Any]]
    horizons: list[dict[str, Any]]
    """Unpaused heartbeats whose compiled horizon is within the lead of the snapshot's time."""
    breaches: list[dict[str, Any]]
    """Unpaused heartbeats whose last live run broke a duration bound."""
    incident_heartbeats: list[dict[str, Any]]
    """Heartbeat rows of the schedules with an open incident (absent: the row was deleted)."""
    overlong: list[dict[str, Any]]
    open_incidents: list[dict[str, Any]]
    watched: list[dict[str, Any]]
    """Every unpaused heartbeat with its age: the denominator of the system rule, and metrics."""
    system_members: set[str]
    """Schedules that have been members of the open system incident."""
    unpause_failures: list[dict[str, Any]] = field(default_factory=list)
    """Paused heartbeats whose timed pause has ended and that the monitor could not unpause."""


async def snapshot(conn: Any, *, horizon_lead: timedelta) -> Snapshot:
    # REPEATABLE READ: every read sees the same moment, and now() is that moment.
    async with conn.transaction(isolation="repeatable_read", readonly=True):
        now: datetime = await conn.fetchval("SELECT now()")
        overdue = [dict(r) for r in await conn.fetch(OVERDUE)]
        horizons = [dict(r) for r in await conn.fetch(HORIZONS, horizon_lead)]
        breaches = [dict(r) for r in await conn.fetch(BREACHES)]
        unpause_failures = [dict(r) for r in await conn.fetch(UNPAUSE_FAILURES)]
        incidents = [dict(r) for r in await conn.fetch(_OPEN_INCIDENTS)]
        ids = sorted({i["schedule_id"] for i in incidents if i["schedule_id"] is not None})
        by_ids = [dict(r) for r in await conn.fetch(_BY_IDS, ids)] if ids else []
        overlong = [dict(r) for r in await conn.fetch(_OVERLONG)]
        watched = [dict(r) for r in await conn.fetch(_WATCHED)]
        members = {r["schedule_id"] for r in await conn.fetch(_SYSTEM_MEMBERS)}
    return Snapshot(
        now=now,
        overdue=overdue,
        horizons=horizons,
        breaches=breaches,
        incident_heartbeats=by_ids,
        overlong=overlong,
        open_incidents=incidents,
        watched=watched,
        system_members=members,
        unpause_failures=unpause_failures,
    )
