"""Checks cron expressions against the grammar Temporal Schedules accept, and lints them.

Temporal evaluates the spec; we only refuse what it would reject or silently misread, so a bad
expression fails when the file is checked instead of when the schedule is created or, worse, at
the first surprising fire time.
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass, field

MACROS = frozenset(
    {"@yearly", "@annually", "@monthly", "@weekly", "@daily", "@midnight", "@hourly"}
)

_MONTHS = (
    "january",
    "february",
    "march",
    "april",
    "may",
    "june",
    "july",
    "august",
    "september",
    "october",
    "november",
    "december",
)
_DAYS = ("sunday", "monday", "tuesday", "wednesday", "thursday", "friday", "saturday")


@dataclass(frozen=True)
class _Field:
    name: str
    low: int
    high: int
    names: tuple[str, ...] = ()
    name_base: int = 0
    """The number the first name stands for (January is 1, Sunday is 0)."""
    min_prefix: int = 0
    """Shortest accepted name prefix: Temporal reads 3 letters for months, 2 for days."""
    cycle: int | None = None
    """Length of the wrap-around cycle for the tiling check; None means the field is not checked."""
    unit: str = ""


_SECOND = _Field("second", 0, 59, cycle=60, unit="second")
_MINUTE = _Field("minute", 0, 59, cycle=60, unit="minute")
_HOUR = _Field("hour", 0, 23, cycle=24, unit="hour")
# Day-of-month steps are not checked for tiling: months have 28 to 31 days, so no step above 1
# keeps an even gap across every month end, and a check would refuse every `*/2`. People who write
# `*/2` there mean "odd days of the month" and accept the short gap; an even cadence is `every: 2d`.
_DAY_OF_MONTH = _Field("day-of-month", 1, 31)
_MONTH = _Field("month", 1, 12, names=_MONTHS, name_base=1, min_prefix=3, cycle=12, unit="month")
# 7 is accepted as Sunday like 0, so the cycle is 7 even though values run 0-7.
_DAY_OF_WEEK = _Field(
    "day-of-week", 0, 7, names=_DAYS, name_base=0, min_prefix=2, cycle=7, unit="day"
)
# Years never wrap around, so a step there is always a deliberate "every other year".
_YEAR = _Field("year", 2000, 2100)

_FIELDS = (_MINUTE, _HOUR, _DAY_OF_MONTH, _MONTH, _DAY_OF_WEEK, _YEAR)
_FIELDS_7 = (_SECOND, *_FIELDS)

_FIELD_NAMES_5 = "minute hour day-of-month month day-of-week"

# Temporal's own expansion of the macros (service/worker/scheduler/calendar.go).
_MACRO_FIELDS = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
# Go's strconv.Atoi, which Temporal uses, refuses anything beyond a signed 64-bit integer.
_ATOI_MAX = 2**63 - 1


class CronLint(ValueError):
    """An expression Temporal would accept that we refuse anyway, for the reason `rule` names.

    Kept apart from plain ValueError (Temporal would refuse it too) so the corpus test can hold
    us to "never refuse what Temporal accepts, except for a named reason".
    """

    def __init__(self, rule: str, message: str) -> None:
        super().__init__(message)
        self.rule = rule


@dataclass(frozen=True)
class CronFields:
    """The values each field of an expression matches; `years` None means every year."""

    seconds: frozenset[int]
    minutes: frozenset[int]
    hours: frozenset[int]
    days_of_month: frozenset[int]
    months: frozenset[int]
    days_of_week: frozenset[int]
    """0 is Sunday; a 7 in the expression is folded onto 0 as Temporal does."""
    years: frozenset[int] | None = field(default=None)


_LAST_DAY = re.compile(r"[0-9]*L|L-[0-9]+|LW", re.IGNORECASE)
_NEAREST_WEEKDAY = re.compile(r"[0-9]+W", re.IGNORECASE)
_COMMENT = re.compile(r"(^|\s)#")
# Go's Atoi accepts a leading plus sign, and so does Temporal.
_NUMBER = re.compile(r"\+?[0-9]+")


class _FieldError(ValueError):
    """A problem inside one field; `validate_cron` adds which field and its text."""

    def __init__(self, message: str, *, part: str | None = None) -> None:
        super().__init__(message)
        self.part = part
        """The comma-separated item the message is about, when the message does not name it."""


class _TilingLint(CronLint):
    """A step Temporal accepts whose last gap is shorter or longer than the others."""

    def __init__(self, message: str, *, part: str) -> None:
        super().__init__("uneven-step", message)
        self.part = part


def validate_cron(expr: str) -> str:
    """The expression with its fields joined by single spaces; ValueError says what is wrong
    (CronLint when Temporal would take it but we refuse it, naming the rule)."""
    text, _ = _checked(expr)
    return text


def cron_fields(expr: str) -> CronFields:
    """The values each field matches, for checks such as "can this ever fire"."""
    _, fields = _checked(expr)
    return fields


def _checked(expr: str) -> tuple[str, CronFields]:
    text = expr.strip()
    if not text:
        raise ValueError("the cron expression is empty")
    if text.upper().startswith(("TZ=", "CRON_TZ=")):
        # Temporal would evaluate the prefix's zone itself, with its own daylight-saving
        # behaviour; a zone is the schedule's `timezone:` field, compiled by one stated rule.
        raise CronLint(
            "tz-prefix",
            f"'{expr}': TZ= and CRON_TZ= prefixes are refused: set the schedule's `timezone:` "
            "field instead (e.g. timezone: Europe/Paris), which follows cronwarden's "
            "daylight-saving rule",
        )
    if "#" in text:
        # Temporal reads everything after '#' as a comment, so Quartz's "mon#2" (second Monday)
        # would silently fire every Monday.
        if _COMMENT.search(text):
            raise CronLint(
                "no-comment",
                f"'{expr}': comments (#) are not allowed inside a cron expression; "
                "put a YAML comment after the quoted value instead",
            )
        raise CronLint(
            "nth-weekday",
            f"'{expr}': '#' (nth weekday of the month) is not supported by Temporal's cron, "
            "which would read the rest as a comment and fire on every such weekday; combine a "
            "day-of-month range with the weekday instead (Temporal requires both to match), "
            "e.g. '0 9 8-14 * mon' for the second Monday",
        )
    if text.startswith("@"):
        text = _check_macro(text)
        return text, _fields_of(_MACRO_FIELDS[text].split(), _FIELDS)

    parts = text.split()
    if len(parts) not in (5, 6, 7):
        raise ValueError(
            f"'{expr}' has {len(parts)} fields; use 5 ({_FIELD_NAMES_5}), "
            f"6 ({_FIELD_NAMES_5} year) or 7 (second {_FIELD_NAMES_5} year)"
        )
    layout = _FIELDS_7 if len(parts) == 7 else _FIELDS
    return " ".join(parts), _fields_of(parts, layout)


def _fields_of(parts: list[str], layout: tuple[_Field, ...]) -> CronFields:
    values: dict[str, set[int]] = {}
    for fld, field_text in zip(layout, parts, strict=False):
        try:
            values[fld.name] = set()
            for part in field_text.split(","):
                values[fld.name] |= _check_part(fld, part)
        except CronLint as exc:
            raise CronLint(exc.rule, _field_message(fld, field_text, exc, len(parts))) from None
        except _FieldError as exc:
            raise ValueError(_field_message(fld, field_text, exc, len(parts))) from None
    week = values["day-of-week"]
    if 7 in week:
        week = (week - {7}) | {0}
    year_text = parts[len(layout) - 1] if len(parts) >= 6 else "*"
    return CronFields(
        seconds=frozenset(values.get("second", {0})),
        minutes=frozenset(values["minute"]),
        hours=frozenset(values["hour"]),
        days_of_month=frozenset(values["day-of-month"]),
        months=frozenset(values["month"]),
        days_of_week=frozenset(week),
        years=None if year_text == "*" else frozenset(values["year"]),
    )


_CALENDAR_FIELDS = {
    "second": _SECOND,
    "minute": _MINUTE,
    "hour": _HOUR,
    "day_of_month": _DAY_OF_MONTH,
    "month": _MONTH,
    "day_of_week": _DAY_OF_WEEK,
    "year": _YEAR,
}


def calendar_field(name: str, text: str) -> frozenset[int] | None:
    """The values one calendar field written in cron syntax matches (`name` as in Temporal's
    calendar spec: second ... year); None for `*` in the year, which means every year.
    ValueError names the field and what is wrong."""
    fld = _CALENDAR_FIELDS[name]
    stripped = text.strip()
    if fld is _YEAR and stripped == "*":
        return None
    if not stripped or any(c.isspace() for c in stripped) or "#" in stripped:
        raise ValueError(f"{fld.name} '{text}' must be one cron field (e.g. *, 5, 1-5, mon,fri)")
    values: set[int] = set()
    try:
        for part in stripped.split(","):
            values |= _check_part(fld, part, tile=False)
    except _FieldError as exc:
        raise ValueError(_field_message(fld, stripped, exc, 5)) from None
    if fld is _DAY_OF_WEEK and 7 in values:
        values = (values - {7}) | {0}
    return frozenset(values)


def _field_message(field: _Field, field_text: str, exc: ValueError, count: int) -> str:
    part = getattr(exc, "part", None)
    if part is None:
        message = f"{field.name} field '{field_text}': {exc}"
    elif part == field_text:
        message = f"{field.name} field '{field_text}' {exc}"
    else:
        message = f"{field.name} field '{field_text}': '{part}' {exc}"
    if field is _YEAR and count == 6:
        # Other cron dialects put seconds first; Temporal reads a 6th field as the year, so
        # "*/10 * * * * *" would not mean "every 10 seconds".
        message += " (the 6th field is the year, not seconds: seconds need all 7 fields)"
    return message


def _check_macro(text: str) -> str:
    if text.startswith("@every"):
        # Temporal would accept it, but as an interval, which our file already spells `every:`;
        # one spelling keeps `every` the only place interval rules (like its minimum) are checked.
        raise CronLint("use-every", f"'{text}': use `every:` instead of '@every' (e.g. every: 15m)")
    if text in MACROS:
        return text
    known = ", ".join(sorted(MACROS))
    raise ValueError(f"'{text}' is not a cron macro Temporal knows; use one of {known}")


def _check_part(field: _Field, part: str, *, tile: bool = True) -> set[int]:
    """The values `part` matches; _FieldError if Temporal refuses it, CronLint if we do."""
    if not part:
        raise _FieldError("an item between commas is empty")
    _refuse_unsupported(part)

    base, slash, step_text = part.partition("/")
    step: int | None = None
    if slash:
        if not _NUMBER.fullmatch(step_text) or int(step_text) > _ATOI_MAX:
            raise _FieldError(f"step '{step_text}' in '{part}' is not a whole number")
        step = int(step_text)
        if step < 1:
            raise _FieldError(f"step {step} in '{part}' must be at least 1")

    if base == "*":
        start, end = field.low, field.high
    elif "-" in base:
        first, _, last = base.partition("-")
        if not first or not last or "-" in last:
            raise _FieldError(f"'{part}' is not a range; write it as start-end, e.g. 1-5")
        start, end = _value(field, first), _value(field, last)
        if end < start:
            raise _FieldError(f"range '{base}' ends before it starts")
    else:
        start = _value(field, base)
        # Temporal reads "x/y" as x up to the field's maximum in steps of y.
        end = field.high if step is not None else start

    cycle = field.cycle
    if (
        tile
        and step is not None
        and cycle is not None
        and _spans_cycle(field, cycle, base, start, end)
    ):
        _check_tiling(field, cycle, part, start, end, step)
    return set(range(start, end + 1, step or 1))


def _refuse_unsupported(part: str) -> None:
    # Quartz and other dialects use these; Temporal's parser rejects or misreads them, so say which
    # feature is missing rather than a generic "malformed".
    if "?" in part:
        raise _FieldError("'?' is not supported by Temporal's cron; use * instead")
    # '#' never reaches here: the whole expression is checked for it first (`_checked`).
    base = part.partition("/")[0]
    if _LAST_DAY.fullmatch(base):
        raise _FieldError("'L' (last day) is not supported by Temporal's cron; list the days")
    if _NEAREST_WEEKDAY.fullmatch(base):
        raise _FieldError("'W' (nearest weekday) is not supported by Temporal's cron")


def _value(field: _Field, text: str) -> int:
    if _NUMBER.fullmatch(text):
        # Python refuses to parse thousands of digits; anything that long is out of range anyway.
        number = int(text) if len(text) < 30 else _ATOI_MAX + 1
        if not field.low <= number <= field.high:
            raise _FieldError(f"{number} is outside {field.low}-{field.high}")
        return number
    if field.names and len(text) >= field.min_prefix:
        lowered = text.lower()
        for index, name in enumerate(field.names):
            if name.startswith(lowered):
                return index + field.name_base
    if field.names:
        examples = ", ".join(name[: max(field.min_prefix, 3)] for name in field.names[:3])
        raise _FieldError(
            f"'{text}' is not a {field.name} number ({field.low}-{field.high}) "
            f"or name ({examples}, ...)"
        )
    raise _FieldError(f"'{text}' is not a number in {field.low}-{field.high}")


def _spans_cycle(field: _Field, cycle: int, base: str, start: int, end: int) -> bool:
    """Whether a stepped part runs to the end of the cycle, so its last gap wraps around."""
    if "-" not in base:
        return True
    # A bounded range like 5-20/5 is a deliberate window, so its gap back to the next window is
    # intended; a range covering the whole field (0-23/5) is just `*` spelled out, and wraps.
    return start == field.low and end >= field.low + cycle - 1


def _check_tiling(field: _Field, cycle: int, part: str, start: int, end: int, step: int) -> None:
    # A step that does not divide the cycle restarts at the top of it: `*/5` hours fires at 20:00
    # and then at 00:00, four hours later. People write it meaning "every 5 hours", and the short
    # gap shows up as a double run nobody expected, so we refuse it and name the real fire times.
    values = sorted({(v - field.low) % cycle + field.low for v in range(start, end + 1, step)})
    gaps = [b - a for a, b in itertools.pairwise(values)]
    wrap = values[0] + cycle - values[-1]
    if wrap == step and all(gap == step for gap in gaps):
        return

    fires = ",".join(str(v) for v in values)
    unit = f"{field.unit}s"
    if cycle % step == 0:
        # The step is fine; the start is past the first step, so only one pass fits per cycle.
        advice = f"start below the step (e.g. '{start % step}/{step}') or list the {unit}"
    else:
        divisors = ", ".join(str(d) for d in range(1, cycle) if cycle % d == 0)
        advice = f"use a step that divides {cycle} ({divisors}) or list the {unit}"
    if wrap != step:
        raise _TilingLint(
            f"does not tile {cycle} {unit}: it fires at {fires} and then waits "
            f"{_count(wrap, field.unit)} at the wrap-around; {advice}",
            part=part,
        )
    # Only reachable for day-of-week, where 7 folds onto 0 and shortens a gap in the middle.
    raise _TilingLint(
        f"does not tile {cycle} {unit}: it fires at {fires} (7 is Sunday, like 0), "
        f"so the gaps between runs are uneven; {advice}",
        part=part,
    )


def _count(n: int, unit: str) -> str:
    return f"{n} {unit}" if n == 1 else f"{n} {unit}s"
