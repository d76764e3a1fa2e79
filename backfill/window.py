"""Time windows for `backfill` and `audit`: ISO 8601 instants or times relative to now.

`now`, `-2h` (two hours ago) and `2026-11-30T04:00:00Z` are instants; `--since 7d` reads a bare
duration as "that long ago". Everything is aware UTC, resolved against ONE `now` per command, so
`--end now` and the "not in the future" check can never disagree by the time it took to parse.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from cronwarden.errors import InvalidInput
from cronwarden.schedules.durations import parse_duration
from cronwarden.times import utc_text

_RANGE = "times must lie between the years 1 and 9999 (UTC)"
_FORMS = "use an ISO 8601 time with a zone (2026-11-30T04:00:00Z), `now`, or `-2h` (2 hours ago)"


@dataclass(frozen=True)
class Window:
    """Fire times `start <= t <= end`, both whole seconds (fire times never carry fractions)."""

    start: datetime
    end: datetime

    def clamped_to(self, created_at: datetime) -> Window:
        """A schedule fires only strictly after it was created: earlier slots were never due."""
        if created_at < self.start:
            return self
        return Window(_ceil_second(created_at + timedelta(microseconds=1)), self.end)

    @property
    def empty(self) -> bool:
        return self.start > self.end

    def as_json(self) -> dict[str, str]:
        return {"start": utc_text(self.start), "end": utc_text(self.end)}


def parse_instant(text: str, *, now: datetime, what: str) -> datetime:
    """`now`, `-<duration>` or an ISO 8601 time with a zone; InvalidInput naming `what`."""
    stripped = text.strip()
    if stripped.lower() == "now":
        return now
    if stripped.startswith("-"):
        return _ago(now, _duration(stripped[1:], text, what), text, what)
    try:
        value = datetime.fromisoformat(stripped)
    except ValueError:
        raise InvalidInput(f"{what} '{text}' is not a time: {_FORMS}") from None
    if value.tzinfo is None:
        # The trigger is UTC only; guessing the operator's zone would shift the whole window.
        raise InvalidInput(
            f"{what} '{text}' has no time zone: cronwarden works in UTC, write it with a Z "
            f"(e.g. {stripped}Z)"
        )
    try:
        return value.astimezone(UTC)
    except OverflowError:
        # 0001-01-01T00:00:00+01:00 is a valid ISO time whose UTC instant is before year 1.
        raise InvalidInput(f"{what} '{text}' is out of range: {_RANGE}") from None


def parse_since(text: str, *, now: datetime) -> datetime:
    """`--since`: a bare duration (`7d`) means that long ago; any instant form works too."""
    stripped = text.strip()
    if stripped[:1].isdigit() and stripped[-1:] in {"s", "m", "h", "d"}:
        return _ago(now, _duration(stripped, text, "--since"), text, "--since")
    return parse_instant(text, now=now, what="--since")


def make_window(start: datetime, end: datetime, *, now: datetime) -> Window:
    """The window as whole seconds; InvalidInput when it is empty or reaches into the future."""
    if end > now:
        raise InvalidInput(
            f"the window ends in the future ({utc_text(end)}, now is {utc_text(now)}): a fire "
            "that is not due yet cannot be missing; end it at `now` at the latest"
        )
    if end <= start:
        raise InvalidInput(
            f"the window is empty: its end ({utc_text(end)}) is not after its start "
            f"({utc_text(start)})"
        )
    return Window(_ceil_second(start), end.replace(microsecond=0))


def _ago(now: datetime, duration: timedelta, original: str, what: str) -> datetime:
    try:
        return now - duration
    except OverflowError:
        raise InvalidInput(f"{what} '{original}' is out of range: {_RANGE}") from None


def _duration(text: str, original: str, what: str) -> timedelta:
    try:
        return parse_duration(text)
    except ValueError as exc:
        raise InvalidInput(f"{what} '{original}': {exc}") from None


def _ceil_second(value: datetime) -> datetime:
    if value.microsecond == 0:
        return value
    return value.replace(microsecond=0) + timedelta(seconds=1)
