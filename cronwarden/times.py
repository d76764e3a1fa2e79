"""How a time is written for people: UTC, whole seconds, `Z` (`2026-11-30T04:00:00Z`).

Fire times and logical keys are whole seconds; a fraction in a message (`now` as parsed) only
makes two times that mean the same second look different.
"""

from __future__ import annotations

from datetime import UTC, datetime

UTC_FORMAT = "%Y-%m-%dT%H:%M:%SZ"


def utc_text(value: datetime) -> str:
    return value.astimezone(UTC).strftime(UTC_FORMAT)
