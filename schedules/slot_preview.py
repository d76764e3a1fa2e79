"""`schedules preview`: the slots each schedule of a file fires in a window, as Temporal will fire
them, each with its wall time in the schedule's zone, its logical key and what the
daylight-saving rule did there.

What fires is Temporal's to say: a paused scratch copy of the compiled definition is asked for
its matching times (ListScheduleMatchingTimes), so start_at, end_at, exclusions and the compiled
UTC entries all count exactly as they will live; without jitter, since a key names the nominal
slot. For a zoned schedule the rule's own slots are computed beside it (`zones.rule_slots` for a
cron; for an `every` interval, each interval of real time but those whose wall clock an
exclusion names) and must be the same instants: they give each slot its local time and note,
and a difference is a compilation bug, reported by name rather than printed over.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from cronwarden.activities.contract import logical_key
from cronwarden.backfill.window import Window, parse_instant
from cronwarden.errors import CronwardenError, InvalidInput
from cronwarden.logs import get_logger
from cronwarden.schedules.model import ScheduleDefinition
from cronwarden.schedules.spec_parts import SkipCalendar
from cronwarden.schedules.zones import LocalSpec, Slot, local_text, rule_slots
from cronwarden.times import format_duration, utc_text

if TYPE_CHECKING:
    from temporalio.client import Client

MAX_SLOTS = 10_000
"""Most slots one schedule may have in a preview's window: a longer list is no preview, and the
scratch copy's matching times are paged 1,000 at a time."""
MAX_INTERVALS = 1_000_000
"""Most intervals of a zoned `every` schedule with exclusions checked one by one: past it the
window is refused, whatever the exclusions leave."""
_SHOWN_DIFFERENCES = 10
FIRST_INSTANT = datetime(2000, 1, 2, tzinfo=UTC)
LAST_INSTANT = datetime(2100, 12, 30, tzinfo=UTC)
"""The widest window: Temporal's calendar takes the years 2000 to 2100 only, and a zoned
schedule is compiled for the whole years around the window with a day to spare."""

log = get_logger("cronwarden.schedules")


class RuleMismatch(CronwardenError):
    """Temporal would fire other instants than the daylight-saving rule names: the compiled
    entries are wrong (exit 1; nothing about the input is)."""


@dataclass(frozen=True)
class PreviewSlot:
    utc: datetime
    local: str
    """The slot on the schedule's wall clock with offset and abbreviation; a UTC schedule's is
    its UTC text."""
    logical_key: str
    note: str | None
    """What the daylight-saving rule did to this slot; None on an ordinary one."""

    def as_json(self) -> dict[str, Any]:
        return {
            "utc": utc_text(self.utc),
            "local": self.local,
            "logical_key": self.logical_key,
            "note": self.note,
        }


@dataclass(frozen=True)
class SchedulePreview:
    schedule_id: str
    timezone: str
    """The IANA name the schedule's crons are read in; `UTC` for a UTC schedule."""
    slots: tuple[PreviewSlot, ...]

    def as_json(self) -> dict[str, Any]:
        return {
            "id": self.schedule_id,
            "timezone": self.timezone,
            "slots": [s.as_json() for s in self.slots],
        }


def preview_window(start: str, end: str, *, now: datetime) -> tuple[datetime, datetime]:
    """`--from` and `--to` as the instants [start, end); InvalidInput unless the end is later
    and both lie within Temporal's years. Both take what `backfill` takes (ISO 8601 with a zone
    or Z, `now`, `-2h`), and, unlike a backfill window, may lie in the future."""
    first = parse_instant(start, now=now, what="--from")
    last = parse_instant(end, now=now, what="--to")
    if last <= first:
        raise InvalidInput(
            f"--to ({utc_text(last)}) is not after --from ({utc_text(first)}): the window "
            "[from, to) is empty"
        )
    if first < FIRST_INSTANT or last > LAST_INSTANT:
        raise InvalidInput(
            f"the window must lie between {utc_text(FIRST_INSTANT)} and "
            f"{utc_text(LAST_INSTANT)}: Temporal's calendar takes the years 2000 to 2100, and a "
            "zoned schedule is compiled for whole years around the window with a day to spare"
        )
    return first, last


def select(
    definitions: Sequence[ScheduleDefinition], schedule_id: str | None
) -> list[ScheduleDefinition]:
    """The file's definitions, or only `schedule_id`'s; InvalidInput naming the file's ids when
    it lists no such schedule."""
    if schedule_id is None:
        return list(definitions)
    chosen = [d for d in definitions if d.id == schedule_id]
    if not chosen:
        known = ", ".join(d.id for d in definitions[:20]) or "none"
        more = f" and {len(definitions) - 20} more" if len(definitions) > 20 else ""
        raise InvalidInput(f"the file lists no schedule '{schedule_id}' (it lists: {known}{more})")
    return chosen


def inclusive_window(start: datetime, end: datetime) -> Window:
    """[start, end) as the whole seconds `matching_times` takes (both ends inclusive): fire
    times carry no fraction, so the first is `start` rounded up, the last the second before
    `end` rounded up."""
    first = _ceil_second(start)
    last = _ceil_second(end) - timedelta(seconds=1)
    return Window(first, last)


def _ceil_second(value: datetime) -> datetime:
    whole = value.replace(microsecond=0)
    return whole if whole == value else whole + timedelta(seconds=1)


def too_many(defn: ScheduleDefinition, start: datetime, end: datetime) -> InvalidInput:
    return InvalidInput(
        f"{defn.id}: more than {MAX_SLOTS:,} slots between {utc_text(start)} and "
        f"{utc_text(end)}; ask for a shorter window"
    )


def rule_of(defn: ScheduleDefinition, start: datetime, end: datetime) -> list[Slot] | None:
    """The rule's slots of a zoned schedule in [start, end), within its start_at and end_at
    (both inclusive, as Temporal takes them); None for a UTC schedule (nothing is compiled:
    Temporal evaluates its spec as it is)."""
    spec = defn.local_spec
    if spec is None:
        return None
    if defn.every is not None:
        slots = _interval_slots(defn, spec, start, end)
    else:
        try:
            slots = rule_slots(spec, start, end, limit=MAX_SLOTS)
        except ValueError:
            raise too_many(defn, start, end) from None
    return [
        s
        for s in slots
        if (defn.start_at is None or s.utc >= defn.start_at)
        and (defn.end_at is None or s.utc <= defn.end_at)
    ]


def _interval_slots(
    defn: ScheduleDefinition, spec: LocalSpec, start: datetime, end: datetime
) -> list[Slot]:
    """A zoned `every` schedule's slots: each `every` of real time from the epoch (Temporal's
    interval with no offset), but for those whose wall clock an exclusion names (the compiled
    skips are the part of it that can go wrong)."""
    assert defn.every is not None
    step = int(defn.every.total_seconds())
    first = -(-int(_ceil_second(start).timestamp()) // step) * step
    stop = int(_ceil_second(end).timestamp())
    count = max(0, -(-(stop - first) // step))
    if count > MAX_SLOTS and not spec.exclude:
        raise too_many(defn, start, end)
    if count > MAX_INTERVALS:
        raise InvalidInput(
            f"{defn.id}: more than {MAX_INTERVALS:,} intervals of {format_duration(defn.every)} "
            f"between {utc_text(start)} and {utc_text(end)}; ask for a shorter window"
        )
    slots = []
    for seconds in range(first, stop, step):
        local = datetime.fromtimestamp(seconds, spec.tz)
        if not any(_names_wall(skip, local) for skip in spec.exclude):
            slots.append(Slot(local.astimezone(UTC), local))
            if len(slots) > MAX_SLOTS:
                raise too_many(defn, start, end)
    return slots


def _names_wall(skip: SkipCalendar, local: datetime) -> bool:
    """Whether the exclusion names this wall-clock time (every field matches)."""
    years = skip.values("year")
    fields = {
        "second": local.second,
        "minute": local.minute,
        "hour": local.hour,
        "day_of_month": local.day,
        "month": local.month,
        "day_of_week": local.isoweekday() % 7,
    }
    return (years is None or local.year in years) and all(
        value in (skip.values(name) or ()) for name, value in fields.items()
    )


def annotate(
    defn: ScheduleDefinition, fires: Sequence[datetime], rule: Sequence[Slot] | None
) -> SchedulePreview:
    """Temporal's fires of `defn`, each with its wall time, key and note from the rule's slots
    of the same window (`rule_of`). RuleMismatch when they are not the same instants, naming
    those that differ."""
    zone = defn.timezone
    by_instant = {s.utc: s for s in rule} if rule is not None else {}
    if rule is not None:
        mismatch = differences(defn.id, fires, [s.utc for s in rule])
        if mismatch is not None:
            raise RuleMismatch(mismatch)
    slots = []
    for fire in fires:
        ruled = by_instant.get(fire)
        slots.append(
            PreviewSlot(
                utc=fire,
                local=local_text(fire, zone) or utc_text(fire),
                logical_key=logical_key(defn.id, fire),
                note=ruled.note if ruled is not None else None,
            )
        )
    return SchedulePreview(defn.id, zone or "UTC", tuple(slots))


def differences(
    schedule_id: str, temporal: Sequence[datetime], rule: Sequence[datetime]
) -> str | None:
    """A sentence naming the instants only one side fires, or None when both fire the same."""
    extra = sorted(set(temporal) - set(rule))
    lost = sorted(set(rule) - set(temporal))
    if not extra and not lost:
        return None
    parts = []
    if extra:
        parts.append(f"Temporal fires {_instants(extra)}, which the rule does not")
    if lost:
        parts.append(f"the rule fires {_instants(lost)}, which Temporal does not")
    return (
        f"{schedule_id}: the compiled schedule and the daylight-saving rule differ: "
        + "; ".join(parts)
        + ". This is a bug in cronwarden's compilation of local times: please report it"
    )


def _instants(values: Sequence[datetime]) -> str:
    shown = ", ".join(utc_text(v) for v in values[:_SHOWN_DIFFERENCES])
    rest = len(values) - _SHOWN_DIFFERENCES
    return shown + (f" and {rest} more" if rest > 0 else "")


async def temporal_fires(
    client: Client, defn: ScheduleDefinition, *, task_queue: str, start: datetime, end: datetime
) -> list[datetime]:
    """What Temporal fires of `defn` in [start, end): a paused scratch copy compiled for the
    window, asked for its matching times page by page (deleted on leaving)."""
    # Imported here: both load the Temporal SDK, which the pure parts above do without.
    from cronwarden.backfill.plan import matching_times
    from cronwarden.schedules.preview import scratch_schedule

    window = inclusive_window(start, end)
    fires: list[int] = []
    async with scratch_schedule(
        client, defn, task_queue=task_queue, window=(start, end)
    ) as scratch_id:
        async for page in matching_times(client, scratch_id, window):
            fires.extend(page)
            if len(fires) > MAX_SLOTS:
                raise too_many(defn, start, end)
    return [datetime.fromtimestamp(s, UTC) for s in fires]


async def preview(
    client: Client,
    definitions: Sequence[ScheduleDefinition],
    *,
    task_queue: str,
    start: datetime,
    end: datetime,
) -> list[SchedulePreview]:
    """Each definition's slots in [start, end), in the file's order."""
    previews = []
    for defn in definitions:
        # The rule first: a window too long for it is refused before anything is written.
        rule = rule_of(defn, start, end)
        fires = await temporal_fires(client, defn, task_queue=task_queue, start=start, end=end)
        previews.append(annotate(defn, fires, rule))
        log.info(
            "schedule.slot-preview",
            schedule_id=defn.id,
            timezone=defn.timezone or "UTC",
            slots=len(fires),
            start=utc_text(start),
            end=utc_text(end),
        )
    return previews


def preview_json(previews: Sequence[SchedulePreview]) -> dict[str, Any]:
    return {"schedules": [p.as_json() for p in previews]}


def preview_lines(previews: Sequence[SchedulePreview], start: datetime, end: datetime) -> list[str]:
    """The text form: a heading per schedule, then one line per slot (UTC, local, key, note)."""
    lines = []
    for p in previews:
        count = f"{len(p.slots)} slot{'' if len(p.slots) == 1 else 's'}"
        lines.append(
            f"{p.schedule_id} ({p.timezone}): {count} from {utc_text(start)} to {utc_text(end)}"
        )
        for s in p.slots:
            local = "" if p.timezone == "UTC" else f"  {s.local}"
            note = f"  ({s.note})" if s.note else ""
            lines.append(f"  {utc_text(s.utc)}{local}  {s.logical_key}{note}")
    return lines
