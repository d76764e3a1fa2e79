"""Local-time schedules: the daylight-saving rule, and its compilation into UTC calendar entries.

Everything about time zones lives here. A schedule with `timezone:` names wall times in that zone;
its logical keys stay UTC instants. The rule (docs/time-zones.md):

- A wall time that does not exist (clocks jump forward over it) fires once, at the end of the
  gap (`dst_gap: shift`, the default), or not at all (`dst_gap: skip`). Several wall times in
  one gap are one fire: they all name the same instant.
- A wall time that happens twice (clocks fall back over it) fires at its first occurrence only
  when the cron's hour field names fixed hours, and at each occurrence when it is `*` or a step
  (the rule ISC cron users know). `dst_repeat: once | each` makes it one or the other for every
  hour.
- An exclusion (`exclude:`) matches the wall clock of the instant that would fire.

Temporal's own `time_zone_name` does not follow one rule: measured on the server, it drops some
repeated wall times, fires others at an hour the cron does not name, and treats a gap differently
from zone to zone (the table in docs/time-zones.md). A correction on the worker's side could
refuse a fire but never add one Temporal drops nor move one earlier. So the zone never reaches
Temporal: `compile_local` turns the local intent into UTC calendar entries (and UTC skips) for a
window of whole years, and Temporal fires exactly the rule's instants. Its matching times, its
next action times, backfill plans and the monitor's deadlines are then the rule's own, with no
special case anywhere else. The price is a horizon: `apply` recompiles when the window it pushed
is not this year's, and `status` warns as the horizon nears.

The zone database is the `tzdata` wheel's, never the host's, so every host compiles the same
entries and `ZONE_DB_VERSION` names what they were compiled from.
"""

from __future__ import annotations

import difflib
import hashlib
import importlib
import importlib.resources
import itertools
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, date, datetime, time, timedelta
from functools import cache
from zoneinfo import ZoneInfo

from temporalio.client import ScheduleCalendarSpec, ScheduleRange

from cronwarden.schedules.cron import _MACRO_FIELDS, cron_fields
from cronwarden.schedules.spec_parts import SkipCalendar

# The wheel ships no type information; its version is one string.
ZONE_DB_VERSION: str = str(importlib.import_module("tzdata").IANA_VERSION)
"""The IANA time zone database release every compilation uses (the pinned `tzdata` wheel)."""

UTC_NAMES = frozenset(
    {
        "UTC",
        "Etc/UTC",
        "Etc/UCT",
        "UCT",
        "Etc/Universal",
        "Universal",
        "Zulu",
        "Etc/Zulu",
        # tzdata links these to UTC too: zero offset, no daylight saving.
        "GMT",
        "Etc/GMT",
        "GMT0",
        "Etc/GMT0",
        "GMT+0",
        "Etc/GMT+0",
        "GMT-0",
        "Etc/GMT-0",
        "Greenwich",
        "Etc/Greenwich",
    }
)
"""Names that mean UTC: a schedule naming one is a UTC schedule (nothing to compile)."""

HORIZON_WARNING = timedelta(days=365)
"""`status` warns when a compiled horizon is nearer than this: re-apply to extend it."""

_DAY = 86_400
_ALL_DAYS_OF_MONTH = frozenset(range(1, 32))
_ALL_MONTHS = frozenset(range(1, 13))
_ALL_WEEKDAYS = frozenset(range(7))
_CALENDAR_START = datetime(2000, 1, 1, tzinfo=UTC)
_CALENDAR_END = datetime(2101, 1, 1, tzinfo=UTC)
_SCAN_STEP = timedelta(hours=6)
"""Transitions are found by comparing offsets this far apart, then bisecting: no zone changes
its offset twice within six hours."""


class DstGap:
    SHIFT = "shift"
    SKIP = "skip"
    ALL = (SHIFT, SKIP)


class DstRepeat:
    ONCE = "once"
    EACH = "each"
    ALL = (ONCE, EACH)


# --- the zone database ---------------------------------------------------------------------


@cache
def _zone_names() -> frozenset[str]:
    text = importlib.resources.files("tzdata").joinpath("zones").read_text(encoding="utf-8")
    return frozenset(line.strip() for line in text.splitlines() if line.strip())


def check_zone_name(name: str) -> str:
    """`name` if the pinned database knows it; ValueError naming the closest names otherwise."""
    stripped = name.strip()
    if stripped in _zone_names() or stripped in UTC_NAMES:
        return stripped
    by_lower = {known.lower(): known for known in (*_zone_names(), *UTC_NAMES)}
    if stripped.lower() in by_lower:
        close = [by_lower[stripped.lower()]]
    else:
        close = difflib.get_close_matches(stripped, sorted(_zone_names()), n=2)
    hint = f" (did you mean {' or '.join(repr(c) for c in close)}?)" if close else ""
    raise ValueError(
        f"'{name}' is not an IANA time zone name{hint}; write one like Europe/Berlin or "
        "America/New_York"
    )


@cache
def _same_rules() -> dict[str, str]:
    """Each zone name -> the first name (alphabetically) whose database file is byte for byte
    the same: tzdata's links (US/Eastern, America/New_York) and zones that never differed."""
    package = importlib.resources.files("tzdata.zoneinfo")
    by_content: dict[bytes, list[str]] = {}
    for name in _zone_names():
        resource = package
        for part in name.split("/"):
            resource = resource.joinpath(part)
        by_content.setdefault(hashlib.sha256(resource.read_bytes()).digest(), []).append(name)
    return {name: min(names) for names in by_content.values() for name in names}


def canonical_zone(name: str) -> str:
    """One name for every name of the same rules, so two schedules in US/Eastern and
    America/New_York are seen to fire at the same instants."""
    return _same_rules().get(name, name)


@cache
def load_zone(name: str) -> ZoneInfo:
    """The zone from the pinned `tzdata` wheel, whatever the host has in /usr/share/zoneinfo."""
    check_zone_name(name)
    package = importlib.resources.files("tzdata.zoneinfo")
    resource = package
    for part in name.split("/"):
        resource = resource.joinpath(part)
    with resource.open("rb") as stream:
        return ZoneInfo.from_file(stream, key=name)


def local_time(instant: datetime, zone_name: str) -> datetime:
    return instant.astimezone(load_zone(zone_name))


def local_text(instant: datetime, zone_name: str | None) -> str | None:
    """The instant on the zone's wall clock with its offset and abbreviation
    (`2027-03-14T03:00:00-04:00 EDT`); None for a UTC schedule."""
    if zone_name is None:
        return None
    local = local_time(instant, zone_name)
    return f"{local.isoformat(timespec='seconds')} {local.tzname()}"


# --- the local intent -----------------------------------------------------------------------


@dataclass(frozen=True)
class _Times:
    """A product of seconds, minutes and hours: the times of day a cron or exclusion names."""

    hours: frozenset[int]
    minutes: frozenset[int]
    seconds: frozenset[int]

    def __bool__(self) -> bool:
        return bool(self.hours and self.minutes and self.seconds)

    def sorted_seconds(self) -> list[int]:
        return sorted(
            h * 3600 + m * 60 + s for h in self.hours for m in self.minutes for s in self.seconds
        )


@dataclass(frozen=True)
class _Days:
    """Which dates match: every field must (Temporal's calendar ANDs day of month and week)."""

    days_of_month: frozenset[int]
    months: frozenset[int]
    days_of_week: frozenset[int]
    """0 is Sunday."""
    years: frozenset[int] | None

    def matches(self, day: date) -> bool:
        return (
            day.day in self.days_of_month
            and day.month in self.months
            and day.isoweekday() % 7 in self.days_of_week
            and (self.years is None or day.year in self.years)
        )

    @property
    def every_day(self) -> bool:
        return self.shifts_by_weekday and self.days_of_week == _ALL_WEEKDAYS

    @property
    def shifts_by_weekday(self) -> bool:
        """Whether moving every date by a day is just moving the weekdays (no day of month,
        month or year named)."""
        return (
            self.days_of_month == _ALL_DAYS_OF_MONTH
            and self.months == _ALL_MONTHS
            and self.years is None
        )


@dataclass(frozen=True)
class _Pattern:
    """One cron expression or exclusion, read as wall times."""

    days: _Days
    times: _Times
    repeat: str
    """How a wall time that happens twice fires: DstRepeat.ONCE or EACH."""
    text: str


def _hour_is_wild(expr: str) -> bool:
    text = _MACRO_FIELDS.get(expr, expr)
    parts = text.split()
    hour = parts[2] if len(parts) == 7 else parts[1]
    return "*" in hour or "/" in hour


def cron_pattern(expr: str, dst_repeat: str | None) -> _Pattern:
    fields = cron_fields(expr)
    if dst_repeat is None:
        repeat = DstRepeat.EACH if _hour_is_wild(expr) else DstRepeat.ONCE
    else:
        repeat = dst_repeat
    return _Pattern(
        days=_Days(fields.days_of_month, fields.months, fields.days_of_week, fields.years),
        times=_Times(fields.hours, fields.minutes, fields.seconds),
        repeat=repeat,
        text=expr,
    )


def skip_pattern(skip: SkipCalendar) -> _Pattern:
    def values(name: str) -> frozenset[int]:
        found = skip.values(name)
        assert found is not None  # only the year may be "every"
        return found

    return _Pattern(
        days=_Days(
            values("day_of_month"), values("month"), values("day_of_week"), skip.values("year")
        ),
        times=_Times(values("hour"), values("minute"), values("second")),
        repeat=DstRepeat.EACH,
        text="exclude",
    )


@dataclass(frozen=True)
class LocalSpec:
    """What a zoned schedule asks for, in wall times of `zone`."""

    zone: str
    crons: tuple[str, ...]
    exclude: tuple[SkipCalendar, ...] = ()
    dst_gap: str = DstGap.SHIFT
    dst_repeat: str | None = None
    patterns: tuple[_Pattern, ...] = field(init=False, compare=False)
    skips: tuple[_Pattern, ...] = field(init=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(
            self, "patterns", tuple(cron_pattern(c, self.dst_repeat) for c in self.crons)
        )
        object.__setattr__(self, "skips", tuple(skip_pattern(s) for s in self.exclude))

    @property
    def tz(self) -> ZoneInfo:
        return load_zone(self.zone)


# --- transitions ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Transition:
    """The zone's offset changes from `before` to `after` at `instant` (UTC)."""

    instant: datetime
    before: timedelta
    after: timedelta

    @property
    def jump(self) -> timedelta:
        """Positive: clocks go forward (a gap); negative: they fall back (a repeat)."""
        return self.after - self.before


def _offset(zone: ZoneInfo, instant: datetime) -> timedelta:
    offset = instant.astimezone(zone).utcoffset()
    assert offset is not None
    return offset


def transitions(zone: ZoneInfo, start: datetime, end: datetime) -> list[Transition]:
    """The offset changes in [start, end), in order."""
    found: list[Transition] = []
    cursor = start
    before = _offset(zone, cursor)
    while cursor < end:
        step = min(cursor + _SCAN_STEP, end)
        after = _offset(zone, step)
        if after != before:
            low, high = cursor, step
            while high - low > timedelta(seconds=1):
                middle = low + (high - low) / 2
                middle = middle.replace(microsecond=0)
                if middle <= low:
                    break
                if _offset(zone, middle) == before:
                    low = middle
                else:
                    high = middle
            found.append(Transition(high, before, after))
        cursor, before = step, after
    return found


# --- the rule, slot by slot (what fires; the reference the compilation is tested against) -----


@dataclass(frozen=True)
class Slot:
    """One instant the schedule fires, with the wall time it stands for."""

    utc: datetime
    local: datetime
    """The instant on the zone's wall clock (for a shifted gap fire: the end of the gap)."""
    note: str | None = None
    """What the daylight-saving rule did here, in words; None on an ordinary day."""


def _wall_times(pattern: _Pattern, day: date) -> Iterator[datetime]:
    if not pattern.days.matches(day):
        return
    midnight = datetime.combine(day, time())
    for second in pattern.times.sorted_seconds():
        yield midnight + timedelta(seconds=second)


def _excluded(spec: LocalSpec, instant: datetime) -> bool:
    wall = instant.astimezone(spec.tz).replace(tzinfo=None)
    return any(_matches_wall(p, wall) for p in spec.skips)


def _matches_wall(pattern: _Pattern, wall: datetime) -> bool:
    return (
        pattern.days.matches(wall.date())
        and wall.hour in pattern.times.hours
        and wall.minute in pattern.times.minutes
        and wall.second in pattern.times.seconds
    )


def _clock(wall: datetime) -> str:
    return wall.strftime("%H:%M:%S" if wall.second else "%H:%M")


def rule_slots(
    spec: LocalSpec, start: datetime, end: datetime, *, limit: int = 100_000
) -> list[Slot]:
    """Every instant in [start, end) the rule fires, in order. ValueError past `limit` slots:
    the caller narrows the window."""
    zone = spec.tz
    found: dict[datetime, Slot] = {}
    first_day = start.astimezone(zone).date() - timedelta(days=1)
    last_day = end.astimezone(zone).date() + timedelta(days=1)
    day = first_day
    while day <= last_day:
        for pattern in spec.patterns:
            for wall in _wall_times(pattern, day):
                for slot in _resolve(spec, pattern, wall):
                    if start <= slot.utc < end and not _excluded(spec, slot.utc):
                        kept = found.get(slot.utc)
                        if kept is None or (kept.note is None and slot.note is not None):
                            found[slot.utc] = slot
                        if len(found) > limit:
                            raise ValueError(
                                f"more than {limit:,} fire times between {start:%Y-%m-%d} and "
                                f"{end:%Y-%m-%d}; ask for a shorter window"
                            )
        day += timedelta(days=1)
    return [found[k] for k in sorted(found)]


def _resolve(spec: LocalSpec, pattern: _Pattern, wall: datetime) -> list[Slot]:
    zone = spec.tz
    early = wall.replace(tzinfo=zone, fold=0).astimezone(UTC)
    late = wall.replace(tzinfo=zone, fold=1).astimezone(UTC)
    exists_early = early.astimezone(zone).replace(tzinfo=None) == wall
    exists_late = late.astimezone(zone).replace(tzinfo=None) == wall
    if exists_early and exists_late and early != late:
        first, second = min(early, late), max(early, late)
        clock = f"{_clock(wall)} on {wall:%Y-%m-%d} happens twice"
        if pattern.repeat == DstRepeat.EACH:
            return [
                Slot(first, first.astimezone(zone), f"{clock}: first of two (dst_repeat each)"),
                Slot(second, second.astimezone(zone), f"{clock}: second of two (dst_repeat each)"),
            ]
        return [Slot(first, first.astimezone(zone), f"{clock}: fired at the first only")]
    if exists_early or exists_late:
        instant = early if exists_early else late
        return [Slot(instant, instant.astimezone(zone))]
    # In a gap: the transition lies between the two readings of the wall time.
    low, high = min(early, late), max(early, late)
    moves = transitions(zone, low, high + timedelta(seconds=1))
    gap_end = moves[0].instant if moves else high
    if spec.dst_gap == DstGap.SKIP:
        return []
    local = gap_end.astimezone(zone)
    return [
        Slot(
            gap_end,
            local,
            f"{_clock(wall)} does not exist on {wall:%Y-%m-%d} (clocks jump forward): "
            f"fired at the end of the gap, {_clock(local.replace(tzinfo=None))}",
        )
    ]


def repeat_refusal(spec: LocalSpec, instant: datetime) -> str | None:
    """Why the rule never fires `instant`, when it is the second occurrence of a wall time the
    crons name and every cron naming it fires once; None otherwise (off-grid instants too).

    The compiled spec never fires such an instant; this is the guard's check for a run started
    some other way (a replay or a backfill naming both readings of a wall time)."""
    local = instant.astimezone(spec.tz)
    if local.fold != 1:
        return None
    wall = local.replace(tzinfo=None, fold=0)
    other = wall.replace(tzinfo=spec.tz, fold=0).astimezone(UTC)
    if other == instant.astimezone(UTC):
        return None
    naming = [p for p in spec.patterns if _matches_wall(p, wall)]
    if not naming or any(p.repeat == DstRepeat.EACH for p in naming):
        return None
    return (
        f"{_clock(wall)} on {wall:%Y-%m-%d} happens twice in {spec.zone}; the rule fires it at "
        f"its first occurrence only ({other.astimezone(UTC):%Y-%m-%dT%H:%M:%SZ})"
    )


# --- compilation into UTC calendar entries ----------------------------------------------------


@dataclass(frozen=True)
class Compiled:
    """A zoned spec as Temporal takes it: UTC calendars and skips for [start, end)."""

    calendars: tuple[ScheduleCalendarSpec, ...]
    skips: tuple[ScheduleCalendarSpec, ...]
    start: datetime
    end: datetime
    """The horizon: nothing fires at or after it until a re-apply compiles further."""


def compile_window(now: datetime) -> tuple[datetime, datetime]:
    """Whole years around `now`: from 1 January of last year (the outbox keeps 400 days, so every
    fire a backfill may still replay is inside) to 1 January three years on. Whole years, so
    every apply within a year compiles the same entries and pushes nothing new."""
    year = now.astimezone(UTC).year
    return datetime(year - 1, 1, 1, tzinfo=UTC), datetime(year + 3, 1, 1, tzinfo=UTC)


def compile_window_around(start: datetime, end: datetime) -> tuple[datetime, datetime]:
    """Whole years covering [start, end] with a day to spare on each side (a jittered or
    late fire, a window given in local time)."""
    first = (start - timedelta(days=1)).astimezone(UTC).year
    last = (end + timedelta(days=1)).astimezone(UTC).year
    return datetime(first, 1, 1, tzinfo=UTC), datetime(last + 1, 1, 1, tzinfo=UTC)


def compiled_label(now: datetime) -> str:
    """What `apply` compiles a zoned schedule for at `now`: the zone database and the years.
    Part of the definition's digest, so a new year or a new database re-applies it."""
    start, end = compile_window(now)
    return f"tzdata {ZONE_DB_VERSION}, {start.year}-{end.year - 1}"


def compiled_until(label: object) -> datetime | None:
    """The horizon a `compiled_label` names (the end of its last year), None if unreadable."""
    if not isinstance(label, str):
        return None
    _, _, years = label.rpartition(", ")
    _, _, last = years.partition("-")
    if not last.isdigit():
        return None
    return datetime(int(last) + 1, 1, 1, tzinfo=UTC)


def compile_local(spec: LocalSpec, start: datetime, end: datetime) -> Compiled:
    """UTC calendar entries and skips that fire exactly `rule_slots(spec, start, end)`, within
    the years Temporal's calendar knows (2000-2100: an entry naming another year is refused)."""
    start, end = max(start, _CALENDAR_START), min(end, _CALENDAR_END)
    if end <= start:
        return Compiled((), (), start, start)
    zone = spec.tz
    moves = transitions(zone, start, end)
    edges = [start, *(m.instant for m in moves), end]
    calendars: list[ScheduleCalendarSpec] = []
    skips: list[ScheduleCalendarSpec] = []
    for low, high in itertools.pairwise(edges):
        if high <= low:
            continue
        offset = _offset(zone, low)
        for pattern in spec.patterns:
            calendars.extend(_period_entries(pattern, low, high, offset))
        for pattern in spec.skips:
            skips.extend(_period_entries(pattern, low, high, offset))
    # A fall-back just before the window can leave its repeated wall times' second readings
    # inside it: their first readings are outside, but the rule still fires them once.
    earlier = [
        m for m in transitions(zone, start - timedelta(days=1), start) if m.jump < timedelta(0)
    ]
    for move in earlier:
        inside = [i for i in _second_readings(spec, move) if i >= start]
        skips.extend(_instant_entries(inside, "second reading of a repeated wall time"))
    for move in moves:
        if move.jump > timedelta(0):
            if spec.dst_gap == DstGap.SHIFT and _gap_named(spec, move):
                calendars.extend(_instant_entries([move.instant], "end of a daylight-saving gap"))
        elif move.jump < timedelta(0):
            repeated = _second_readings(spec, move)
            skips.extend(_instant_entries(repeated, "second reading of a repeated wall time"))
    return Compiled(tuple(calendars), tuple(skips), start, end)


def _gap_named(spec: LocalSpec, move: Transition) -> bool:
    """Whether a cron names a wall time in the gap `move` opens."""
    gap_start = (move.instant + move.before).replace(tzinfo=None)
    gap_end = gap_start + move.jump
    return any(next(_walls_between(p, gap_start, gap_end), None) for p in spec.patterns)


def _second_readings(spec: LocalSpec, move: Transition) -> list[datetime]:
    """The instants after a fall-back that read a repeated wall time the rule fires once."""
    repeat_start = (move.instant + move.after).replace(tzinfo=None)
    repeat_end = repeat_start - move.jump
    once: set[datetime] = set()
    each: set[datetime] = set()
    for pattern in spec.patterns:
        target = once if pattern.repeat == DstRepeat.ONCE else each
        for wall in _walls_between(pattern, repeat_start, repeat_end):
            target.add((wall - move.after).replace(tzinfo=UTC))
    return sorted(once - each)


def _walls_between(pattern: _Pattern, low: datetime, high: datetime) -> Iterator[datetime]:
    """The wall times in [low, high) the pattern names (both naive)."""
    day = low.date()
    while datetime.combine(day, time()) < high:
        if pattern.days.matches(day):
            midnight = datetime.combine(day, time())
            lo = max(0, int((low - midnight).total_seconds()))
            hi = min(_DAY, int((high - midnight).total_seconds()))
            for times in _restrict(pattern.times, lo, hi):
                for second in times.sorted_seconds():
                    yield midnight + timedelta(seconds=second)
        day += timedelta(days=1)


def _period_entries(
    pattern: _Pattern, low: datetime, high: datetime, offset: timedelta
) -> list[ScheduleCalendarSpec]:
    """Entries for the pattern's wall times read at `offset`, for instants in [low, high)."""
    if not pattern.days.every_day:
        return _framed(pattern, low, high, offset)
    # Every date matches, so the instants are those whose UTC time of day is a wall time less
    # the offset: read in UTC, the hours a day carry would split into separate entries (each
    # bounded by its own shifted dates) merge back. Temporal evaluates every entry for every
    # fire time it lists, so half the entries is half its work.
    merged: dict[tuple[frozenset[int], frozenset[int]], set[int]] = {}
    for _, shifted in _shift(pattern.times, offset):
        merged.setdefault((shifted.minutes, shifted.seconds), set()).update(shifted.hours)
    entries = []
    for (minutes, seconds), hours in merged.items():
        utc_times = _Times(frozenset(hours), minutes, seconds)
        entries.extend(_framed(replace(pattern, times=utc_times), low, high, timedelta(0)))
    return entries


def _framed(
    pattern: _Pattern, low: datetime, high: datetime, offset: timedelta
) -> list[ScheduleCalendarSpec]:
    """`_period_entries` by wall dates: each matching wall date, moved to its UTC date."""
    wall_low = (low + offset).replace(tzinfo=None)
    wall_high = (high + offset).replace(tzinfo=None)
    first, last = wall_low.date(), (wall_high - timedelta(microseconds=1)).date()
    entries: list[ScheduleCalendarSpec] = []

    def day_bounds(day: date) -> tuple[int, int]:
        midnight = datetime.combine(day, time())
        lo = max(0, int((wall_low - midnight).total_seconds()))
        hi = min(_DAY, int((wall_high - midnight).total_seconds()))
        return lo, hi

    partial = [d for d in {first, last} if day_bounds(d) != (0, _DAY)]
    for day in sorted(partial):
        if not pattern.days.matches(day):
            continue
        lo, hi = day_bounds(day)
        for times in _restrict(pattern.times, lo, hi):
            for carry, shifted in _shift(times, offset):
                entries.extend(_dated(shifted, [day + timedelta(days=carry)], pattern.text))
    full_first = first + timedelta(days=1) if first in partial else first
    full_last = last - timedelta(days=1) if last in partial else last
    if full_first <= full_last:
        for carry, shifted in _shift(pattern.times, offset):
            entries.extend(_ranged(pattern, shifted, full_first, full_last, carry))
    return entries


def _restrict(times: _Times, lo: int, hi: int) -> list[_Times]:
    """The times of day in [lo, hi) seconds after midnight, as products."""
    if lo <= 0 and hi >= _DAY:
        return [times] if times else []
    pieces: list[_Times] = []
    whole_hours = frozenset(h for h in times.hours if lo <= h * 3600 and (h + 1) * 3600 <= hi)
    pieces.append(_Times(whole_hours, times.minutes, times.seconds))
    for hour in sorted(times.hours - whole_hours):
        base = hour * 3600
        if base + 3600 <= lo or base >= hi:
            continue
        whole_minutes = frozenset(
            m for m in times.minutes if lo <= base + m * 60 and base + (m + 1) * 60 <= hi
        )
        pieces.append(_Times(frozenset({hour}), whole_minutes, times.seconds))
        for minute in sorted(times.minutes - whole_minutes):
            start = base + minute * 60
            seconds = frozenset(s for s in times.seconds if lo <= start + s < hi)
            pieces.append(_Times(frozenset({hour}), frozenset({minute}), seconds))
    return [p for p in pieces if p]


def _shift(times: _Times, offset: timedelta) -> list[tuple[int, _Times]]:
    """The wall times read at `offset` as UTC times of day, each with its day carry
    (-1: the UTC date is the day before the wall date)."""
    total = int(offset.total_seconds())
    if total % 60:
        raise ValueError(
            f"an offset of {offset} is not whole minutes; cronwarden cannot compile it"
        )
    hours_back, minutes_back = divmod(total // 60, 60)
    result: list[tuple[int, _Times]] = []
    # A minute below the offset's minutes borrows an hour; which minutes do depends on the
    # minute alone, and the day carry on the hour alone (given the borrow): so each
    # (borrow, carry) group is still a product of hours and minutes.
    for borrow in (0, 1):
        minutes = frozenset(
            m - minutes_back + 60 * borrow for m in times.minutes if (m < minutes_back) == borrow
        )
        if not minutes:
            continue
        by_carry: dict[int, set[int]] = {}
        for hour in times.hours:
            carry, utc_hour = divmod(hour - hours_back - borrow, 24)
            by_carry.setdefault(carry, set()).add(utc_hour)
        for carry, hours in sorted(by_carry.items()):
            result.append((carry, _Times(frozenset(hours), minutes, times.seconds)))
    return result


def value_ranges(values: Iterable[int]) -> tuple[ScheduleRange, ...]:
    """Values as inclusive runs of consecutive ones (step 1)."""
    ordered = sorted(set(values))
    runs: list[ScheduleRange] = []
    if not ordered:
        return ()
    start = previous = ordered[0]
    for value in ordered[1:]:
        if value != previous + 1:
            runs.append(ScheduleRange(start, previous))
            start = value
        previous = value
    runs.append(ScheduleRange(start, previous))
    return tuple(runs)


def _entry(
    times: _Times,
    *,
    years: Iterable[int],
    months: Iterable[int],
    days_of_month: Iterable[int],
    days_of_week: Iterable[int] = _ALL_WEEKDAYS,
    comment: str,
) -> ScheduleCalendarSpec | None:
    fields = [
        value_ranges(times.seconds),
        value_ranges(times.minutes),
        value_ranges(times.hours),
        value_ranges(days_of_month),
        value_ranges(months),
        value_ranges(years),
        value_ranges(days_of_week),
    ]
    if any(not f for f in fields):
        return None
    second, minute, hour, dom, month, year, dow = fields
    return ScheduleCalendarSpec(
        second=second,
        minute=minute,
        hour=hour,
        day_of_month=dom,
        month=month,
        year=year,
        day_of_week=dow,
        comment=comment,
    )


def _dated(times: _Times, days: Sequence[date], text: str) -> list[ScheduleCalendarSpec]:
    """Entries firing `times` on exactly `days` (UTC dates), grouped by month."""
    by_month: dict[tuple[int, int], set[int]] = {}
    for day in days:
        by_month.setdefault((day.year, day.month), set()).add(day.day)
    entries = []
    for (year, month), doms in sorted(by_month.items()):
        entry = _entry(times, years=[year], months=[month], days_of_month=doms, comment=text)
        if entry is not None:
            entries.append(entry)
    return entries


def _ranged(
    pattern: _Pattern, times: _Times, first: date, last: date, carry: int
) -> list[ScheduleCalendarSpec]:
    """Entries for the pattern's days in [first, last] (wall dates), moved by `carry` days."""
    days = pattern.days
    if carry != 0 and not days.shifts_by_weekday:
        matched = []
        day = first
        while day <= last:
            if days.matches(day):
                matched.append(day + timedelta(days=carry))
            day += timedelta(days=1)
        return _dated(times, matched, pattern.text)
    weekdays = frozenset((w + carry) % 7 for w in days.days_of_week)
    entries = []
    for year, months, doms in _date_pieces(
        first + timedelta(days=carry), last + timedelta(days=carry)
    ):
        if carry == 0 and days.years is not None and year not in days.years:
            continue
        entry = _entry(
            times,
            years=[year],
            months=months & days.months if carry == 0 else months,
            days_of_month=doms & days.days_of_month if carry == 0 else doms,
            days_of_week=weekdays,
            comment=pattern.text,
        )
        if entry is not None:
            entries.append(entry)
    return entries


def _date_pieces(first: date, last: date) -> Iterator[tuple[int, frozenset[int], frozenset[int]]]:
    """[first, last] as (year, months, days of month) pieces whose product is exactly it."""
    for year in range(first.year, last.year + 1):
        low = max(first, date(year, 1, 1))
        high = min(last, date(year, 12, 31))
        if low.month == high.month:
            yield year, frozenset({low.month}), frozenset(range(low.day, high.day + 1))
            continue
        yield year, frozenset({low.month}), frozenset(range(low.day, 32))
        middle = frozenset(range(low.month + 1, high.month))
        if middle:
            yield year, middle, _ALL_DAYS_OF_MONTH
        yield year, frozenset({high.month}), frozenset(range(1, high.day + 1))


def _instant_entries(instants: Sequence[datetime], comment: str) -> list[ScheduleCalendarSpec]:
    """Entries matching exactly these UTC instants, grouped into products where they allow."""
    by_minute: dict[tuple[date, int, int], set[int]] = {}
    for instant in instants:
        moment = instant.astimezone(UTC)
        by_minute.setdefault((moment.date(), moment.hour, moment.minute), set()).add(moment.second)
    by_hour: dict[tuple[date, int, frozenset[int]], set[int]] = {}
    for (day, hour, minute), second_set in by_minute.items():
        by_hour.setdefault((day, hour, frozenset(second_set)), set()).add(minute)
    by_day: dict[tuple[date, frozenset[int], frozenset[int]], set[int]] = {}
    for (day, hour, seconds_key), minute_set in by_hour.items():
        by_day.setdefault((day, frozenset(minute_set), seconds_key), set()).add(hour)
    entries = []
    for (day, minutes, seconds), hours in sorted(by_day.items(), key=lambda kv: kv[0][0]):
        entry = _entry(
            _Times(frozenset(hours), minutes, seconds),
            years=[day.year],
            months=[day.month],
            days_of_month=[day.day],
            comment=comment,
        )
        if entry is not None:
            entries.append(entry)
    return entries


# --- evaluating entries (tests and preview check the compilation against the rule) -----------


def _entry_matches(entry: ScheduleCalendarSpec, instant: datetime) -> bool:
    def inside(ranges: Sequence[ScheduleRange], value: int) -> bool:
        return any(r.start <= value <= r.end and (value - r.start) % r.step == 0 for r in ranges)

    moment = instant.astimezone(UTC)
    return (
        inside(entry.second, moment.second)
        and inside(entry.minute, moment.minute)
        and inside(entry.hour, moment.hour)
        and inside(entry.day_of_month, moment.day)
        and inside(entry.month, moment.month)
        and (not entry.year or inside(entry.year, moment.year))
        and inside(entry.day_of_week, moment.isoweekday() % 7)
    )


def compiled_instants(compiled: Compiled, start: datetime, end: datetime) -> list[datetime]:
    """What the compiled entries fire in [start, end), evaluated here the way Temporal does."""
    found: set[datetime] = set()
    day = start.astimezone(UTC).date()
    while datetime.combine(day, time(), UTC) < end:
        midnight = datetime.combine(day, time(), UTC)
        for entry in compiled.calendars:
            if not _entry_matches_day(entry, day):
                continue
            for h in _expand(entry.hour):
                for m in _expand(entry.minute):
                    for s in _expand(entry.second):
                        instant = midnight + timedelta(hours=h, minutes=m, seconds=s)
                        if start <= instant < end:
                            found.add(instant)
        day += timedelta(days=1)
    skipped = {i for i in found if any(_entry_matches(s, i) for s in compiled.skips)}
    return sorted(found - skipped)


def _entry_matches_day(entry: ScheduleCalendarSpec, day: date) -> bool:
    probe = datetime.combine(day, time(), UTC)
    return _entry_matches(
        ScheduleCalendarSpec(
            second=(ScheduleRange(0, 59),),
            minute=(ScheduleRange(0, 59),),
            hour=(ScheduleRange(0, 23),),
            day_of_month=entry.day_of_month,
            month=entry.month,
            year=entry.year,
            day_of_week=entry.day_of_week,
        ),
        probe,
    )


def _expand(ranges: Sequence[ScheduleRange]) -> list[int]:
    return sorted({v for r in ranges for v in range(r.start, r.end + 1, r.step)})
