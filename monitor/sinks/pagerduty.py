"""PagerDuty Events API v2: `trigger` and `resolve` events, grouped by
`dedup_key = cronwarden:{schedule_id}` so a resolve closes the page its trigger opened, and a
trigger sent twice (at-least-once delivery) is one PagerDuty incident. A fleet page's
`custom_details` name its first schedules and their count; a labelled schedule's page carries
its labels in `custom_details.labels`; its link is a PagerDuty `links` entry."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import SecretStr

from cronwarden.monitor.messages import RESOLVE, cut
from cronwarden.monitor.sinks import json_body

DEFAULT_EVENTS_URL = "https://events.pagerduty.com/v2/enqueue"
SUMMARY_LIMIT = 1024  # the Events API refuses longer summaries
# The Events API v2 takes events of up to 512 KB; stay under it in either reading of "KB".
MAX_BODY = 512_000
SEVERITY = {"system": "critical", "monitor-database-unreachable": "critical"}


def pagerduty_event(message: Mapping[str, Any], *, routing_key: str) -> dict[str, Any]:
    action = "resolve" if message["event"] == RESOLVE else "trigger"
    event: dict[str, Any] = {
        "routing_key": routing_key,
        "event_action": action,
        "dedup_key": message["dedup_key"],
    }
    if action == "resolve":
        return event
    summary = cut(str(message["summary"]), SUMMARY_LIMIT)
    details = dict(message.get("details") or {})
    if message.get("schedules"):
        details["schedules"] = [s["schedule_id"] for s in message["schedules"]]
    if message.get("schedules_total"):
        details["schedules_total"] = message["schedules_total"]
    if message.get("labels"):
        # Where PagerDuty's event orchestration rules can route by them
        # (`event.custom_details.labels.team`).
        details["labels"] = dict(message["labels"])
    payload: dict[str, Any] = {
        "summary": summary,
        "source": "cronwarden",
        "severity": SEVERITY.get(str(message["kind"]), "error"),
        "component": message.get("schedule_id") or "cronwarden",
        "group": "cronwarden",
        "class": message["kind"],
        "custom_details": details,
    }
    if message.get("opened_at"):
        payload["timestamp"] = message["opened_at"]
    event["payload"] = payload
    if message.get("link"):
        event["links"] = [{"href": message["link"], "text": "cronwarden status page"}]
    return event


@dataclass(frozen=True)
class PagerDutySink:
    routing_key: SecretStr
    events_url: str = DEFAULT_EVENTS_URL
    name: str = "pagerduty"
    max_body: int = MAX_BODY

    def url(self) -> str:
        return self.events_url

    def render(self, message: Mapping[str, Any]) -> bytes:
        return json_body(pagerduty_event(message, routing_key=self.routing_key.get_secret_value()))

    def headers(self, body: bytes, *, delivery_id: str) -> dict[str, str]:
        return {}
