"""Durations as written in schedule files: a whole number and one unit (30s, 15m, 6h, 1d).

Writing one back is `cronwarden.times.format_duration`: the monitor and the CLI write durations
too, and neither reads schedule files.
"""

from __future__ import annotations

import re
from datetime import timedelta

from cronwarden.times import UNIT_SECONDS

# One number and one unit, nothing else: compound forms like "1h30m" or fractions like "1.5h" would
# invite rounding questions, and "90m" already says the same thing exactly.
_DURATION = re.compile(r"([0-9]+)([smhd])")

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
        return timedelta(seconds=number * UNIT_SECONDS[match.group(2)])
    except OverflowError:
        raise ValueError(f"'{text}' is too long to be a duration") from None
