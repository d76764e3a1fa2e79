"""Time windows for `backfill` and `audit`: ISO 8601 instants or times relative to now.

`now`, `-2h` (two hours ago) and `2026-11-30T04:00:00Z` are instants; `--since 7d` reads a bare
duration as "that long ago". Everything is aware UTC, resolved against ONE `now` per command, so
`--end now` and the "not in the future" check can never disagree by the time it took to parse.
That host `now` only reads and checks what was asked: what is due is Temporal's to say, and the
window's end is then capped by Temporal's clock and the schedule's own progress (`DueCap`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

from cronwarden.errors import InvalidInput
from cronwarden.schedules.durations import parse_duration
from cronwarden.times import utc_text

if TYPE_CHECKING:
    # For types only: the CLI imports this module at start-up, without the Temporal SDK.
    from temporalio.client import Client

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

    def capped_to(self, cap: DueCap) -> Window:
        """Nothing after the last fire time that is due: a later one cannot be missing."""
        if cap.end >= self.end:
            return self
        return Window(self.start, cap.end)

    @property
    def empty(self) -> bool:
        return self.start > self.end

    def as_json(self) -> dict[str, str]:
        return {"start": utc_text(self.start), "end": utc_text(self.end)}


@dataclass(frozen=True)
class DueCap:
    """The last fire time of a schedule that is due, by Temporal's clock and the schedule's own
    progress in Temporal, never by the clock of the host running the command.

    A host clock running ahead would take fires the scheduler has not reached for missing, and a
    replay of one commits its key before its nominal time (the live run then finds it done). So
    the window ends at Temporal's `now` at the latest, and, for a schedule that is not paused,
    before its next action time (`next_action_times`): every action before that one has been
    taken, or dropped. With jitter an action time is its nominal time plus up to `jitter`, so
    only nominal times more than `jitter` before it are surely behind the scheduler. A paused
    schedule's next action times stand still where the pause found them (Temporal takes no
    action while paused), so they bound nothing then.
    """

    end: datetime
    """The last whole second a due fire can have."""
    now: datetime
    """Temporal's clock when the command read it."""
    next_action_time: datetime | None
    """The schedule's next action time that bounds `end`; None: nothing of the schedule's own
    does (paused, or no action left to take)."""
    jitter: timedelta

    def as_json(self) -> dict[str, str | int | None]:
        return {
            "end": utc_text(self.end),
            "temporal_now": utc_text(self.now),
            "next_action_time": (
                utc_text(self.next_action_time) if self.next_action_time is not None else None
            ),
            "jitter_seconds": int(self.jitter.total_seconds()),
        }


def due_cap(
    now: datetime,
    next_action_times: Sequence[datetime],
    jitter: timedelta | None,
    *,
    paused: bool,
) -> DueCap:
    """The cap from Temporal's clock and a schedule's description: at most `now`, and strictly
    before its next action time less its jitter, in whole seconds (fire times carry none)."""
    jitter = jitter or timedelta(0)
    end = now.replace(microsecond=0)
    if paused or not next_action_times:
        return DueCap(end, now, None, jitter)
    # The earliest, whatever order they come in: with jitter they need not be sorted.
    upcoming = min(next_action_times)
    bound = upcoming - jitter
    # The last whole second strictly before `bound`: a fire exactly at it is not behind yet.
    before = bound.replace(microsecond=0)
    if before == bound:
        before -= timedelta(seconds=1)
    return DueCap(min(end, before), now, upcoming, jitter)


async def temporal_now(client: Client) -> datetime:
    """Temporal's clock: the creation time Temporal gives a scratch schedule (paused, never
    firing, deleted at once). Temporal answers no "what time is it" call, and the time a
    schedule is stamped with is the frontend's own."""
    from temporalio.client import ScheduleIntervalSpec, ScheduleSpec

    from cronwarden.schedules.preview import scratch_of_spec

    spec = ScheduleSpec(intervals=[ScheduleIntervalSpec(every=timedelta(days=365))])
    async with scratch_of_spec(client, spec, task_queue="cronwarden-clock") as scratch_id:
        described = await client.get_schedule_handle(scratch_id).describe()
    return described.info.created_at


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


def within_horizon(
    window: Window, *, now: datetime, retention: timedelta, past_horizon: bool
) -> Window:
    """The part of `window` whose outbox records are surely still kept (CRONWARDEN_OUTBOX_RETENTION
    back from `now`): the whole window when it lies inside; with `past_horizon` the part inside
    (possibly empty); otherwise InvalidInput (exit 2). Before the horizon a fire's record may have
    been dropped with its month, so "no record" no longer means "never ran"."""
    horizon = _ceil_second(now - retention)
    if window.start >= horizon:
        return window
    if not past_horizon:
        raise InvalidInput(
            f"the window starts at {utc_text(window.start)}, before the outbox's dedupe horizon "
            f"({utc_text(horizon)}, CRONWARDEN_OUTBOX_RETENTION back from now): a fire there may "
            "have committed and its record been dropped since, so a replay could not be "
            "deduplicated; start at the horizon, or pass --past-horizon to plan it anyway "
            "(keys before the horizon are never replayed)"
        )
    return Window(horizon, window.end)
