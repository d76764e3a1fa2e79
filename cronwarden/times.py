"""How times and durations are written for people and for JSON: one formatter of each.

Times are UTC, whole seconds, `Z` (`2026-11-30T04:00:00Z`): fire times and logical keys are
whole seconds, and a fraction in a message (`now` as the database gave it) only makes two times
that mean the same second look different. Durations are written as schedule files write them
(`15m`, `1d`), so a value shown by `status` or a page can be pasted back into a file.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

UTC_FORMAT = "%Y-%m-%dT%H:%M:%SZ"

UNIT_SECONDS = {"d": 86_400, "h": 3_600, "m": 60, "s": 1}


def utc_text(value: datetime) -> str:
    return value.astimezone(UTC).strftime(UTC_FORMAT)


def utc_text_or_none(value: datetime | None) -> str | None:
    """`utc_text` for a column or field that may be empty (JSON `null`)."""
    return utc_text(value) if value is not None else None


def format_duration(td: timedelta) -> str:
    """The shortest string a schedule file reads back as exactly `td` (90s stays "90s")."""
    if td < timedelta(0):
        raise ValueError(f"{td} is negative: durations are never negative")
    if td.microseconds:
        raise ValueError(f"{td} has a fraction of a second: durations are whole seconds")
    seconds = int(td.total_seconds())
    if seconds == 0:
        return "0s"
    # Largest unit first, so an exact multiple of a day is written in days, not 1440m.
    for unit, size in UNIT_SECONDS.items():
        if seconds % size == 0:
            return f"{seconds // size}{unit}"
    raise AssertionError("unreachable: every whole number of seconds is a multiple of 1s")


def duration_text(td: timedelta) -> str:
    """`format_duration` for display: a value no schedule file could hold (set by hand in the
    database or by another client of Temporal) is still shown, as Python writes it."""
    try:
        return format_duration(td)
    except ValueError:
        return str(td)
