"""Maintenance windows: recurring spans of a day (`{days: sun, from: "02:00", to: "04:00"}`) in
which a schedule's fires are skipped.

A window is read on the schedule's wall clock (UTC without `timezone`) and compiled into skip
calendars, the same exclusions `exclude` writes: Temporal skips those fires, so no run is due
and the monitor's next expected fire is the first one after the window. The file's `exclude`
list stays as written; the windows join it only when the spec is built (`window_skips`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from datetime import timedelta

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationInfo,
    field_validator,
    model_validator,
)

from cronwarden.schedules.cron import calendar_field, cron_fields
from cronwarden.schedules.spec_parts import SkipCalendar

_CLOCK = re.compile(r"([0-9]{1,2}):([0-9]{2})")
_DAY_MINUTES = 24 * 60
_DAY_NAMES = ("sun", "mon", "tue", "wed", "thu", "fri", "sat")


def _minutes(value: object, *, field: str) -> int:
    """`HH:MM` as minutes after midnight (24:00 is the end of the day)."""
    if isinstance(value, int) and not isinstance(value, bool):
        # YAML 1.1 reads an unquoted 12:30 as the base-60 number 750 (02:30 stays text): a
        # number cannot be told from one meant as such, so the quoted form is asked for.
        hours, minutes = divmod(value, 60)
        meant = f' (did you mean "{hours:02d}:{minutes:02d}"?)' if 0 < value <= 24 * 60 else ""
        raise ValueError(
            f'`{field}` is the number {value}{meant}; write the time quoted, e.g. "12:30" '
            "(YAML reads an unquoted 12:30 as a number)"
        )
    if not isinstance(value, str):
        raise ValueError(f'`{field}` must be a time of day such as "02:30", got {value!r}')
    match = _CLOCK.fullmatch(value.strip())
    if match is None:
        raise ValueError(f"`{field}` '{value}' is not a time of day; write it as HH:MM (\"02:30\")")
    hour, minute = int(match.group(1)), int(match.group(2))
    if minute > 59 or hour > 24 or (hour == 24 and minute):
        raise ValueError(
            f"`{field}` '{value}' is not a time of day (00:00 to 23:59, or 24:00 for the end "
            "of the day)"
        )
    return hour * 60 + minute


def _clock(minutes: int) -> str:
    return f"{minutes // 60:02d}:{minutes % 60:02d}"


class MaintenanceWindow(BaseModel):
    """One recurring window: on `days`, from `from` (included) to `to` (excluded), on the
    schedule's wall clock."""

    model_config = ConfigDict(
        extra="forbid",
        frozen=True,
        populate_by_name=True,
        serialize_by_alias=True,
        use_attribute_docstrings=True,
    )

    days: str = "*"
    """Days of the week, one cron field (`*`, `sun`, `mon-fri`, `0,6`); every day by default."""
    start: str = Field(alias="from")
    """When the window opens, `HH:MM` (fires at this time are skipped)."""
    end: str = Field(alias="to")
    """When it closes, `HH:MM` later the same day (`24:00`: midnight); fires at it run."""

    @field_validator("days", mode="before")
    @classmethod
    def _days_text(cls, value: object) -> object:
        # YAML reads `days: 0` as a number and `days: [sat, sun]` as a list: both are one field.
        if isinstance(value, int) and not isinstance(value, bool):
            return str(value)
        if isinstance(value, list) and value:
            return ",".join(str(v) for v in value)
        return value

    @field_validator("days", mode="after")
    @classmethod
    def _check_days(cls, value: str) -> str:
        calendar_field("day_of_week", value)
        return value.strip()

    @field_validator("start", "end", mode="before")
    @classmethod
    def _check_clock(cls, value: object, info: ValidationInfo) -> object:
        field = "from" if info.field_name == "start" else "to"
        return _clock(_minutes(value, field=field))

    @model_validator(mode="after")
    def _check_span(self) -> MaintenanceWindow:
        low, high = self.minutes
        if low == _DAY_MINUTES:
            raise ValueError("`from` 24:00 is the end of the day; a window opens at 23:59 latest")
        if low == high:
            raise ValueError(
                f"the window from {self.start} to {self.end} is empty: `to` must be later "
                "than `from`"
            )
        if high < low:
            raise ValueError(
                f"the window from {self.start} to {self.end} crosses midnight; write it as two "
                f'windows: {{days: "{self.days}", from: "{self.start}", to: "24:00"}} and '
                f'{{days: "{_next_days(self.days)}", from: "00:00", to: "{self.end}"}}'
            )
        return self

    @property
    def minutes(self) -> tuple[int, int]:
        """[from, to) in minutes after midnight."""
        return _minutes(self.start, field="from"), _minutes(self.end, field="to")

    @property
    def weekdays(self) -> frozenset[int]:
        """The days it opens on, 0 is Sunday."""
        found = calendar_field("day_of_week", self.days)
        assert found is not None  # only the year field may be "every"
        return found

    def skips(self) -> tuple[SkipCalendar, ...]:
        """The window as skip calendars: up to three products of hours and minutes (02:30 to
        04:15 is hour 2 minutes 30-59, hour 3, hour 4 minutes 0-14)."""
        low, high = self.minutes
        first_hour, first_minute = divmod(low, 60)
        last_hour, last_minute = divmod(high, 60)
        pieces: list[tuple[str, str]] = []
        if first_hour == last_hour:
            pieces.append((str(first_hour), f"{first_minute}-{last_minute - 1}"))
        else:
            whole_from = first_hour
            if first_minute:
                pieces.append((str(first_hour), f"{first_minute}-59"))
                whole_from += 1
            if whole_from < last_hour:
                # Every hour of the day is `*`, so a whole-day window is seen as one (the
                # never-fires check looks at whole days only).
                hours = f"{whole_from}-{last_hour - 1}"
                if (whole_from, last_hour) == (0, 24):
                    hours = "*"
                elif last_hour - whole_from == 1:
                    hours = str(whole_from)
                pieces.append((hours, "*"))
            if last_minute:
                pieces.append((str(last_hour), f"0-{last_minute - 1}"))
        return tuple(
            SkipCalendar(day_of_week=self.days, hour=hour, minute=minute) for hour, minute in pieces
        )

    def text(self) -> str:
        days = "every day" if self.days == "*" else f"days {self.days}"
        return f"{days} {self.start}-{self.end}"


def _next_days(days: str) -> str:
    values = calendar_field("day_of_week", days)
    assert values is not None
    if len(values) == 7:
        return "*"
    return ",".join(_DAY_NAMES[(d + 1) % 7] for d in sorted(values))


def check_windows(value: object) -> object:
    """The `maintenance` field's shape before each window is read."""
    if value is None:
        return ()
    if not isinstance(value, list | tuple):
        raise ValueError(
            '`maintenance` must be a list of windows such as {days: sun, from: "02:00", '
            'to: "04:00"}'
        )
    return value


def never_ends(windows: Iterable[MaintenanceWindow]) -> str | None:
    """Why the windows together never close (every minute of every day is inside one), or None."""
    covered: dict[int, set[int]] = {day: set() for day in range(7)}
    windows = list(windows)
    for window in windows:
        low, high = window.minutes
        for day in window.weekdays:
            covered[day].update(range(low, high))
    if windows and all(len(minutes) == _DAY_MINUTES for minutes in covered.values()):
        return (
            "the maintenance windows cover every minute of every day, so the window never ends "
            "and nothing would ever fire; pause the schedule instead (`schedules pause`)"
        )
    return None


def window_skips(windows: Iterable[MaintenanceWindow]) -> tuple[SkipCalendar, ...]:
    """Every window's skip calendars, in order."""
    return tuple(skip for window in windows for skip in window.skips())


def covers_every_fire(
    windows: Sequence[MaintenanceWindow],
    *,
    crons: Sequence[str],
    every: timedelta | None,
    zoned: bool,
) -> str | None:
    """Why the windows take every fire of the trigger (Temporal would hold a schedule that
    never runs, and the monitor would wait for a first fire that cannot come), or None.

    A cron's fires are its times of day on the weekdays it names (Temporal ANDs the day fields,
    so any day it fires on has one of them): if the windows cover each of those times on each
    of those weekdays, nothing fires. An interval that divides a day fires at the same UTC times
    every day; a zoned one or one that does not divide a day is not judged here."""
    if not windows:
        return None
    covered: dict[int, set[int]] = {day: set() for day in range(7)}
    for window in windows:
        low, high = window.minutes
        for day in window.weekdays:
            covered[day].update(range(low, high))
    demands: list[tuple[frozenset[int], set[int]]] = []
    for expr in crons:
        fields = cron_fields(expr)
        times = {h * 60 + m for h in fields.hours for m in fields.minutes}
        demands.append((fields.days_of_week, times))
    if every is not None:
        step = int(every.total_seconds())
        if zoned or _DAY_MINUTES * 60 % step:
            return None
        times = {(k * step) // 60 for k in range(_DAY_MINUTES * 60 // step)}
        demands.append((frozenset(range(7)), times))
    for days, times in demands:
        if any(not times <= covered[day] for day in days):
            return None
    shown = "; ".join(w.text() for w in windows)
    return (
        f"every fire falls in a maintenance window ({shown}), so nothing would ever run; "
        "narrow the windows or pause the schedule instead"
    )
