"""Slack incoming webhook: `text` (the notification fallback) plus one mrkdwn section block.
The webhook URL is a credential: it is held as a secret and never logged."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import SecretStr

from cronwarden.monitor.messages import RESOLVE
from cronwarden.monitor.sinks import json_body

# Slack truncates a section's text at 3000 characters; stay under it.
SECTION_LIMIT = 2900


def slack_payload(message: Mapping[str, Any]) -> dict[str, Any]:
    icon = ":white_check_mark:" if message["event"] == RESOLVE else ":rotating_light:"
    title = f"{icon} cronwarden {message['kind']}: {message['summary']}"
    lines = [f"*{_escape(title)}*"]
    for item in message.get("schedules") or []:
        lines.append(f"• `{_escape(str(item['schedule_id']))}` {_escape(str(item['summary']))}")
    text = "\n".join(lines)
    if len(text) > SECTION_LIMIT:
        text = text[: SECTION_LIMIT - 1] + "…"
    return {
        "text": _escape(title),
        "blocks": [{"type": "section", "text": {"type": "mrkdwn", "text": text}}],
    }


def _escape(text: str) -> str:
    # Slack's mrkdwn reserves these three characters.
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


@dataclass(frozen=True)
class SlackSink:
    target: SecretStr
    name: str = "slack"

    def url(self) -> str:
        return self.target.get_secret_value()

    def render(self, message: Mapping[str, Any]) -> bytes:
        return json_body(slack_payload(message))

    def headers(self, body: bytes, *, delivery_id: str) -> dict[str, str]:
        return {}
