"""The sink-neutral message of a page: persisted with the notification, rendered per sink at
delivery. Its shape is the generic webhook's body, documented in the README."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from cronwarden.times import utc_text_or_none

TRIGGER = "trigger"
RESOLVE = "resolve"
DB_UNREACHABLE = "monitor-database-unreachable"


def dedup_key(schedule_id: str | None) -> str:
    """`cronwarden:{schedule_id}`: PagerDuty groups a schedule's trigger and resolve by it."""
    return f"cronwarden:{schedule_id}" if schedule_id is not None else "cronwarden:system"


def monitor_dedup_key(host: str) -> str:
    """One database alert per monitor host (pod name in Kubernetes), not one for all: the
    replica that reaches the database again must not close the alert of one that still cannot.
    The host, not the process, so a restarted monitor resolves what its predecessor opened."""
    return f"cronwarden:monitor:{host}"


def incident_message(
    event: str,
    incident: Mapping[str, Any],
    *,
    schedules: Sequence[Mapping[str, Any]] = (),
) -> dict[str, Any]:
    kind = incident["kind"]
    summary = incident["summary"]
    if event == RESOLVE:
        summary = f"resolved ({incident.get('resolution')}): {summary}"
    return {
        "event": event,
        "incident_id": incident["id"],
        "kind": kind,
        "schedule_id": incident["schedule_id"],
        "summary": summary,
        "details": dict(incident["details"] or {}),
        "schedules": [dict(s) for s in schedules],
        "opened_at": utc_text_or_none(incident["opened_at"]),
        "resolved_at": utc_text_or_none(incident.get("resolved_at")),
        "resolution": incident.get("resolution"),
        "dedup_key": dedup_key(incident["schedule_id"]),
    }


def database_unreachable_message(
    event: str, *, monitor_id: str, host: str, error: str
) -> dict[str, Any]:
    """Sent straight to the sinks (there is no database to persist it in)."""
    summary = (
        f"cronwarden monitor {monitor_id} cannot reach the database: {error}"
        if event == TRIGGER
        else f"resolved: cronwarden monitor {monitor_id} reaches the database again"
    )
    return {
        "event": event,
        "incident_id": None,
        "kind": DB_UNREACHABLE,
        "schedule_id": None,
        "summary": summary,
        "details": (
            {"monitor_id": monitor_id, "host": host, "error": error} if event == TRIGGER else {}
        ),
        "schedules": [],
        "opened_at": None,
        "resolved_at": None,
        "resolution": None,
        "dedup_key": monitor_dedup_key(host),
    }
