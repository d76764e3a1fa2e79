"""When a timed pause ends: `schedules pause --for 2h` or `--until T`, checked before anything
is touched, so a bad flag changes nothing.

The monitor ends the pause once its end has passed (`operations.end_timed_pause`); the bound
keeps a slip (`--for 2000h`, a year typed wrong) from silencing a schedule for months: a pause
meant to last that long is an open-ended one, lifted by `unpause`.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from cronwarden.backfill.window import parse_instant
from cronwarden.errors import InvalidInput
from cronwarden.schedules.durations import parse_duration
from cronwarden.times import duration_text, utc_text

LONGEST = timedelta(days=90)
"""The furthest end a timed pause may have."""


def pause_end(for_text: str | None, until_text: str | None, *, now: datetime) -> datetime | None:
    """The end of the pause the flags ask for (UTC), None for an open-ended pause; InvalidInput
    for a duration of zero or less, both flags, an end that is not in the future or is further
    than `LONGEST`."""
    if for_text is not None and until_text is not None:
        raise InvalidInput("give --for or --until, not both: each says when the pause ends")
    if for_text is not None:
        stripped = for_text.strip()
        if stripped.startswith("-"):
            raise InvalidInput(f"--for '{for_text}' is negative: give how long to pause, e.g. 2h")
        try:
            length = parse_duration(stripped)
        except ValueError as exc:
            raise InvalidInput(f"--for {exc}") from None
        end = now + length
    elif until_text is not None:
        end = parse_instant(until_text, now=now, what="--until")
        if end <= now:
            raise InvalidInput(
                f"--until '{until_text}' is not in the future (now is {utc_text(now)})"
            )
    else:
        return None
    if end - now > LONGEST:
        raise InvalidInput(
            f"a timed pause ends at most {duration_text(LONGEST)} from now, not at "
            f"{utc_text(end)}: pause without --for/--until and `unpause` when done"
        )
    return end
