"""Slack incoming webhook: `text` (the notification fallback) plus one mrkdwn section block
naming the page's schedules as far as the section's limit allows, then how many more and where
to see them. The webhook URL is a credential: it is held as a secret and never logged."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import SecretStr

from cronwarden.monitor.messages import RESOLVE, cut, labels_text
from cronwarden.monitor.sinks import json_body

# Slack cuts a section's text at 3,000 characters and a message's `text` at 40,000: both are
# kept far under, so the body (JSON escapes included) stays under MAX_BODY.
SECTION_LIMIT = 2900
TEXT_LIMIT = 2900
MAX_BODY = 30_000


def slack_payload(message: Mapping[str, Any]) -> dict[str, Any]:
    icon = ":white_check_mark:" if message["event"] == RESOLVE else ":rotating_light:"
    title = _escape(cut(f"{icon} cronwarden {message['kind']}: {message['summary']}", TEXT_LIMIT))
    listed = list(message.get("schedules") or [])
    total = max(int(message.get("schedules_total") or 0), len(listed))
    head = f"*{cut(title, SECTION_LIMIT // 2)}*"
    # What the page says to do about it, right under the title: the likely cause (when Temporal
    # answered) and the command that closes the gap.
    if message.get("cause"):
        head += f"\n{_escape(cut(str(message['cause']), SECTION_LIMIT // 4))}"
    if message.get("next_command"):
        head += f"\n`{_escape(str(message['next_command']))}`"
    if message.get("labels"):
        head += f"\nlabels: {_escape(cut(labels_text(message['labels']), SECTION_LIMIT // 4))}"
    members = [
        f"• `{_escape(str(item['schedule_id']))}` {_escape(str(item['summary']))}"
        for item in listed
    ]
    # Members fill what the head and the closing lines leave; the ones that do not fit are
    # counted with the ones the message never listed.
    room = SECTION_LIMIT - len(head) - 200
    shown: list[str] = []
    for line in members:
        if sum(len(x) + 1 for x in shown) + len(line) + 1 > room:
            break
        shown.append(cut(line, room))
    lines = [head, *shown, *_closing(message, more=total - len(shown))]
    return {
        "text": title,
        "blocks": [
            {
                "type": "section",
                "text": {"type": "mrkdwn", "text": cut("\n".join(lines), SECTION_LIMIT)},
            }
        ],
    }


def _closing(message: Mapping[str, Any], *, more: int) -> list[str]:
    link = message.get("link")
    target = (
        f"<{str(link).replace('|', '%7C').replace('>', '%3E')}|the status page>" if link else None
    )
    if more > 0:
        where = target or "`cronwarden status`"
        return [f"…and {more:,} more: see {where}"]
    return [f"See {target}."] if target else []


def _escape(text: str) -> str:
    # Slack's mrkdwn reserves these three characters.
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


@dataclass(frozen=True)
class SlackSink:
    target: SecretStr
    name: str = "slack"
    max_body: int = MAX_BODY

    def url(self) -> str:
        return self.target.get_secret_value()

    def render(self, message: Mapping[str, Any]) -> bytes:
        return json_body(slack_payload(message))

    def headers(self, body: bytes, *, delivery_id: str) -> dict[str, str]:
        return {}
