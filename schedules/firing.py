"""Whether a spec can ever fire, checked when the file is read, without Temporal.

Temporal accepts a schedule that never fires (30 February, a year gone by, an end before its
start) and then simply never runs it: the monitor would wait for a first heartbeat that cannot
come. We refuse such a spec and say why. The check walks days, not fire times: it is not a cron
evaluator (Temporal evaluates the spec) but a search for one day on which the fields can meet,
stopping at the first, so a spec that fires costs a few steps.
"""

from __future__ import annotations

import calendar
from collections.abc import Iterable
from datetime import UTC, date, datetime, time, timedelta

from cronwarden.schedules.cron import CronFields, CronLint, cron_fields, validate_cron
from cronwarden.schedules.spec_parts import SkipCalendar
from cronwarden.times import format_duration, utc_text

# Temporal's calendar never matches after this year (maxCalendarYear).
_LAST_YEAR = 2100
_END_OF_CALENDAR = datetime(_LAST_YEAR, 12, 31, 23, 59, 59, tzinfo=UTC)
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def never_fires(
    *,
    crons: Iterable[str],
    every: timedelta | None,
    start_at: datetime | None,
    end_at: datetime | None,
    skips: Iterable[SkipCalendar] = (),
    now: datetime,
) -> str | None:
    """Why the spec can never fire after `now` (in its whole life, once its end_at has passed),
    or None when it can.

    A spec whose end_at has passed is finished (`finished_note`), not broken: it is judged over its
    whole life instead, from its start_at (the epoch without one) to its end_at, and passes if
    it could fire then. Refusing it would turn a file valid when written into one that no longer
    applies once an entry ends: every worker pod applies the file at start, and every other
    schedule's edits would wait on the finished one's removal. A spec that never could fire
    (30 February, an end before its start) is refused all the same.
    """
    if start_at is not None and end_at is not None and end_at <= start_at:
        return f"its end_at ({utc_text(end_at)}) is not after its start_at ({utc_text(start_at)})"
    crons, skips = list(crons), list(skips)
    reason = _never_fires_since(crons, every, start_at, end_at, skips, now=now)
    # Nothing after now, but crons that each name their years could fire in their life: the
    # year field is an end like end_at, and such a spec is finished once its years have gone by,
    # not broken (`finished_note`). A file applied every year must not break on 1 January.
    over = (
        reason is not None
        and every is None
        and bool(crons)
        and all(cron_fields(c).years is not None for c in crons)
        and (end_at is None or end_at > now)
        and _never_fires_since(crons, every, start_at, end_at, skips, now=now, whole_life=True)
        is None
    )
    return None if over else reason


def _never_fires_since(
    crons: Iterable[str],
    every: timedelta | None,
    start_at: datetime | None,
    end_at: datetime | None,
    skips: Iterable[SkipCalendar],
    *,
    now: datetime,
    whole_life: bool = False,
) -> str | None:
    # From when on a fire counts: from now, or over its whole life once it is finished.
    since = _EPOCH if whole_life or (end_at is not None and end_at <= now) else now
    low = max(since, start_at) if start_at is not None else since
    high = min(end_at, _END_OF_CALENDAR) if end_at is not None else _END_OF_CALENDAR
    if every is not None:
        steps = -(-(low - _EPOCH) // every)
        first = _EPOCH + every * steps
        if first > high:
            return (
                f"every {format_duration(every)} from the epoch next fires at {utc_text(first)}, "
                f"after its end_at ({utc_text(high)})"
            )
        return None
    whole_day_skips = [s for s in skips if s.whole_days]
    reasons = []
    for expr in crons:
        reason = _cron_never_fires(cron_fields(expr), low, high, whole_day_skips)
        if reason is None:
            return None
        reasons.append(f"'{expr}' {reason}" if reason else f"'{expr}'")
    return "; ".join(reasons)


def finished_note(
    end_at: datetime | None,
    *,
    now: datetime,
    crons: Iterable[str] = (),
    start_at: datetime | None = None,
    skips: Iterable[SkipCalendar] = (),
) -> str | None:
    """Why a spec that could fire is over (its end_at has passed, or its cron names only years
    gone by), or None while it is not."""
    if end_at is not None and end_at <= now:
        return f"its end_at ({utc_text(end_at)}) has passed, so it fires no more"
    crons = list(crons)
    if not crons:
        return None
    reason = _never_fires_since(crons, None, start_at, end_at, list(skips), now=now)
    return None if reason is None else f"it fires no more: {reason}"


def check_cron(expr: str, *, now: datetime) -> str:
    """`validate_cron` plus "can it fire after now": CronLint('never-fires') when it cannot."""
    expr = validate_cron(expr)
    # Strictly from now: an expression alone has no life to be finished in.
    reason = _never_fires_since([expr], None, None, None, [], now=now)
    if reason is not None:
        raise CronLint("never-fires", f"never fires: {reason}")
    return expr


def _cron_never_fires(
    fields: CronFields, low: datetime, high: datetime, skips: list[SkipCalendar]
) -> str | None:
    years = range(low.year, high.year + 1)
    if fields.years is not None:
        wanted = sorted(fields.years)
        if not any(y in fields.years for y in years):
            if wanted[-1] < low.year:
                return f"names only years before {low.year} ({_listed(wanted)})"
            return f"names no year between {low.year} and {high.year} ({_listed(wanted)})"
    if not _any_month_has_day(fields):
        months = ", ".join(calendar.month_name[m] for m in sorted(fields.months))
        days = _listed(sorted(fields.days_of_month))
        return f"asks for day {days} of {months}, a date that does not exist"
    excluded = False
    for year in years:
        if fields.years is not None and year not in fields.years:
            continue
        for month in sorted(fields.months):
            for day in sorted(fields.days_of_month):
                if day > calendar.monthrange(year, month)[1]:
                    continue
                current = date(year, month, day)
                if current < low.date() or current > high.date():
                    continue
                if (current.weekday() + 1) % 7 not in fields.days_of_week:
                    continue
                if any(_skips_day(s, current) for s in skips):
                    excluded = True
                    continue
                if _fires_within(fields, current, low, high):
                    return None
    if excluded:
        return f"matches only days its exclusions skip between {utc_text(low)} and {utc_text(high)}"
    return (
        "matches no day between "
        f"{utc_text(low)} and {utc_text(high)} (its day-of-month and day-of-week must both match)"
    )


def _any_month_has_day(fields: CronFields) -> bool:
    # February 29 exists only in leap years: whether the year field allows one is the day walk's
    # business; here only a day no month of any year has (30 February) is a named reason.
    return any(
        day <= calendar.monthrange(2000, month)[1]
        for month in fields.months
        for day in fields.days_of_month
    )


def _skips_day(skip: SkipCalendar, day: date) -> bool:
    years = skip.values("year")
    return (
        (years is None or day.year in years)
        and day.month in (skip.values("month") or ())
        and day.day in (skip.values("day_of_month") or ())
        and (day.weekday() + 1) % 7 in (skip.values("day_of_week") or ())
    )


def _fires_within(fields: CronFields, day: date, low: datetime, high: datetime) -> bool:
    # Only the boundary days can be cut short by the period; a day inside it fires.
    first = datetime.combine(
        day, time(min(fields.hours), min(fields.minutes), min(fields.seconds)), UTC
    )
    last = datetime.combine(
        day, time(max(fields.hours), max(fields.minutes), max(fields.seconds)), UTC
    )
    return last > low and first <= high


def _listed(values: list[int]) -> str:
    shown = ", ".join(str(v) for v in values[:5])
    return shown + (", ..." if len(values) > 5 else "")
