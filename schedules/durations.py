"""Durations as written in schedule files: a whole number and one unit (30s, 15m, 6h, 1d)."""

from __future__ import annotations

import re
from datetime import timedelta

# One number and one unit, nothing else: compound forms like "1h30m" or fractions like "1.5h" would
# invite rounding questions, and "90m" already says the same thing exactly.
_DURATION = re.compile(r"([0-9]+)([smhd])")

_UNIT_SECONDS = {"d": 86_400, "h": 3_600, "m": 60, "s": 1}

_HOW = "use a whole number followed by s, m, h or d (e.g. 30s, 15m, 6h, 1d)"


def parse_duration(text: str) -> timedelta:
    """The timedelta a duration string names; ValueError with the offending text otherwise."""
    stripped = text.strip()
    if re.fullmatch(r"[0-9]+", stripped):
        # A bare number is the most likely slip, and guessing seconds or minutes would be silently
        # wrong by a factor of 60 one way or the other.
        raise ValueError(
            f"'{text}' has no unit: add s, m, h or d (e.g. {stripped}s or {stripped}m)"
        )
    match = _DURATION.fullmatch(stripped)
    if match is None:
        raise ValueError(f"'{text}' is not a duration: {_HOW}")
    number = int(match.group(1))
    if number == 0:
        # Every duration in a schedule is a timeout, interval or window: zero would mean "never
        # wait" or "fire continuously", which is always a typo.
        raise ValueError(f"'{text}' is not a duration: it must be longer than zero")
    try:
        return timedelta(seconds=number * _UNIT_SECONDS[match.group(2)])
    except OverflowError:
        raise ValueError(f"'{text}' is too long to be a duration") from None


def format_duration(td: timedelta) -> str:
    """The shortest string `parse_duration` reads back as exactly `td` (90s stays "90s")."""
    if td < timedelta(0):
        raise ValueError(f"{td} is negative: durations are never negative")
    if td.microseconds:
        raise ValueError(f"{td} has a fraction of a second: durations are whole seconds")
    seconds = int(td.total_seconds())
    if seconds == 0:
        return "0s"
    # Largest unit first, so an exact multiple of a day is written in days, not 1440m.
    for unit, size in _UNIT_SECONDS.items():
        if seconds % size == 0:
            return f"{seconds // size}{unit}"
    raise AssertionError("unreachable: every whole number of seconds is a multiple of 1s")
