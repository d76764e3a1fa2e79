"""The sink-neutral message of a page: persisted with the notification, rendered per sink at
delivery. Its shape is the generic webhook's body, documented in docs/alerting.md.

A page is bounded whatever the size of the outage: a fleet (system) page names its first
`LISTED` schedules and the count, and links to the rest. `compacted` yields ever smaller
versions of a message, so each sink can send the most it can take (see `monitor.sinks.fit`).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from datetime import datetime
from typing import Any
from urllib.parse import quote

from cronwarden.schedules.local_times import local_or_none
from cronwarden.times import utc_text_or_none

TRIGGER = "trigger"
RESOLVE = "resolve"
DB_UNREACHABLE = "monitor-database-unreachable"

LISTED = 20
"""Schedules a fleet page names; the rest are counted and linked."""
SUMMARY_NAMES = 10
"""Schedule ids a fleet incident's summary names (it is stored and shown as one line)."""
# Each step down `compacted` takes: members listed, longest text kept, items kept of a list.
_STEPS = ((LISTED, 1000, LISTED), (5, 300, 5), (0, 120, 0))
ELLIPSIS = "…"


def dedup_key(schedule_id: str | None) -> str:
    """`cronwarden:{schedule_id}`: PagerDuty groups a schedule's trigger and resolve by it."""
    return f"cronwarden:{schedule_id}" if schedule_id is not None else "cronwarden:system"


def monitor_dedup_key(host: str) -> str:
    """One database alert per monitor host (pod name in Kubernetes), not one for all: the
    replica that reaches the database again must not close the alert of one that still cannot.
    The host, not the process, so a restarted monitor resolves what its predecessor opened."""
    return f"cronwarden:monitor:{host}"


def cut(text: str, limit: int) -> str:
    """`text` in at most `limit` characters, an ellipsis marking a cut."""
    return text if len(text) <= limit else text[: max(limit - 1, 0)] + ELLIPSIS


def system_summary(schedule_ids: Sequence[str]) -> str:
    """One line naming the first `SUMMARY_NAMES` schedules of a fleet outage and the count."""
    named = ", ".join(schedule_ids[:SUMMARY_NAMES])
    rest = len(schedule_ids) - SUMMARY_NAMES
    more = f" and {rest:,} more" if rest > 0 else ""
    return f"{len(schedule_ids):,} schedules went overdue together: {named}{more}"


def system_details(schedule_ids: Sequence[str]) -> dict[str, Any]:
    """What a fleet incident stores of its schedules: the first `LISTED` ids and the count."""
    return {"schedule_ids": list(schedule_ids[:LISTED]), "schedules_total": len(schedule_ids)}


def page_link(status_page_url: str | None, schedule_id: str | None) -> str | None:
    """Where a page sends its reader: the status page (a schedule's own page for a schedule's
    incident). None when no status page URL is configured."""
    if not status_page_url:
        return None
    base = status_page_url.rstrip("/")
    if schedule_id is None:
        return base + "/"
    return f"{base}/schedules/{quote(schedule_id, safe='')}"


def incident_message(
    event: str,
    incident: Mapping[str, Any],
    *,
    schedules: Sequence[Mapping[str, Any]] = (),
    link: str | None = None,
) -> dict[str, Any]:
    """The message of an incident's page; of `schedules` (a fleet page's members) only the
    first `LISTED` are listed, and `schedules_total` counts them all."""
    kind = incident["kind"]
    summary = incident["summary"]
    if event == RESOLVE:
        summary = f"resolved ({incident.get('resolution')}): {summary}"
    details = dict(incident["details"] or {})
    return {
        "event": event,
        "incident_id": incident["id"],
        "kind": kind,
        "schedule_id": incident["schedule_id"],
        "summary": summary,
        "details": details,
        # What to do next, beside what happened: the likely cause (when Temporal named it as
        # the incident opened) and the command that closes the gap (read from the row alone).
        "cause": details.get("cause"),
        "next_command": details.get("next_command"),
        "schedules": [dict(s) for s in schedules[:LISTED]],
        "schedules_total": len(schedules),
        "link": link,
        "truncated": False,
        "opened_at": utc_text_or_none(incident["opened_at"]),
        "resolved_at": utc_text_or_none(incident.get("resolved_at")),
        "resolution": incident.get("resolution"),
        "dedup_key": dedup_key(incident["schedule_id"]),
    }


def with_local_time(message: Mapping[str, Any], zone: str | None) -> dict[str, Any]:
    """A zoned schedule's page naming its expected fire on the schedule's wall clock too: the
    summary's UTC time followed by the local one, and `timezone` and `next_expected_local` in
    its details. A UTC schedule's page (and one without an expected fire) is left as it is."""
    details = dict(message.get("details") or {})
    expected = details.get("next_expected_at")
    if zone is None or not isinstance(expected, str) or "next_expected_local" in details:
        return dict(message)
    try:
        instant = datetime.fromisoformat(expected)
    except ValueError:
        return dict(message)
    local = local_or_none(instant, zone)
    if local is None:
        # A zone this monitor's database does not know (recorded by a newer release): the
        # page goes out in UTC, as it would have before.
        return dict(message)
    summary = str(message.get("summary") or "").replace(expected, f"{expected} ({local})", 1)
    details.update(timezone=zone, next_expected_local=local)
    return {**message, "summary": summary, "details": details}


def with_labels(message: Mapping[str, Any], labels: Mapping[str, str]) -> dict[str, Any]:
    """A labelled schedule's page carrying its labels (`labels`, beside `schedule_id`), for a
    receiver to route by. Never cut by `compacted`: they identify the page's owner, and a
    schedule carries at most 16 short ones. A page of a schedule without labels is left as
    it is."""
    if not labels:
        return dict(message)
    return {**message, "labels": dict(sorted(labels.items()))}


def labels_text(labels: Mapping[str, str]) -> str:
    """`team=billing, env=prod`: the labels as one line of a page's text."""
    return ", ".join(f"{k}={v}" for k, v in sorted(labels.items()))


def compacted(message: Mapping[str, Any]) -> Iterator[dict[str, Any]]:
    """`message` as it is, then ever smaller versions of it, the last one a few hundred bytes:
    fewer members listed, long texts cut, lists in `details` shortened, and at last no details
    and no members at all. What identifies the page (event, kind, ids, dedup key, the count and
    the link) is never cut, nor the command that closes the gap (a cut command would run
    something else); the cause is cut like the summary. A cut version says `truncated: true`."""
    yield dict(message)
    total = message.get("schedules_total", len(message.get("schedules") or []))
    for members, text, items in _STEPS:
        yield {
            **message,
            "summary": cut(str(message.get("summary") or ""), text),
            **_cause_cut(message, text),
            "details": _shortened(dict(message.get("details") or {}), text=text, items=items),
            "schedules": [
                _shortened(dict(s), text=text, items=items)
                for s in (message.get("schedules") or [])[:members]
            ],
            "schedules_total": total,
            "truncated": True,
        }
    yield {
        **message,
        "summary": cut(str(message.get("summary") or ""), 120),
        **_cause_cut(message, 120),
        "details": {},
        "schedules": [],
        "schedules_total": total,
        "truncated": True,
    }


def _cause_cut(message: Mapping[str, Any], text: int) -> dict[str, Any]:
    cause = message.get("cause")
    return {"cause": cut(str(cause), text)} if cause else {}


def _shortened(value: Any, *, text: int, items: int) -> Any:
    if isinstance(value, str):
        return cut(value, text)
    if isinstance(value, list):
        return [_shortened(v, text=text, items=items) for v in value[:items]]
    if isinstance(value, dict):
        return {k: _shortened(v, text=text, items=items) for k, v in value.items()}
    return value


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
        "cause": None,
        "next_command": None,
        "schedules": [],
        "schedules_total": 0,
        "link": None,
        "truncated": False,
        "opened_at": None,
        "resolved_at": None,
        "resolution": None,
        "dedup_key": monitor_dedup_key(host),
    }
