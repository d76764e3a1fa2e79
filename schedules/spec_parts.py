"""The parts of a schedule's spec beyond its trigger: the active period and the skip calendars.

Both are read from the file here and turned into Temporal's own shapes by `schedules/mapping.py`;
Temporal evaluates them, we only check that they mean something.
"""

from __future__ import annotations

import calendar
import re
from datetime import UTC, date, datetime

from pydantic import BaseModel, ConfigDict, field_validator, model_validator

from cronwarden.schedules.cron import calendar_field

_DATE = re.compile(r"([0-9]{4})-([0-9]{2})-([0-9]{2})")
_FIELDS = ("second", "minute", "hour", "day_of_month", "month", "day_of_week", "year")


class SkipCalendar(BaseModel):
    """One exclusion: a nominal time matching every field is not fired (Temporal's skip spec).

    Each field is one cron field (`*`, `5`, `1-5`, `mon,fri`, `*/2`); a field left out matches
    everything, so `{month: dec, day_of_month: 25}` skips all of Christmas Day.
    """

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)

    second: str = "*"
    """Seconds (0-59) to skip."""
    minute: str = "*"
    """Minutes (0-59) to skip."""
    hour: str = "*"
    """Hours (0-23, in the schedule's time zone) to skip."""
    day_of_month: str = "*"
    """Days of the month (1-31) to skip."""
    month: str = "*"
    """Months (1-12 or jan-dec) to skip."""
    day_of_week: str = "*"
    """Days of the week (0-7 or sun-sat; 0 and 7 are Sunday) to skip."""
    year: str = "*"
    """Years (2000-2100) to skip; `*` is every year."""

    @field_validator(*_FIELDS, mode="before")
    @classmethod
    def _as_text(cls, value: object) -> object:
        # YAML reads `day_of_month: 25` as a number; the field is cron text either way.
        if isinstance(value, int) and not isinstance(value, bool):
            return str(value)
        return value

    @model_validator(mode="after")
    def _check_fields(self) -> SkipCalendar:
        for name in _FIELDS:
            calendar_field(name, getattr(self, name))
        return self

    def values(self, name: str) -> frozenset[int] | None:
        """The values field `name` matches (None: every year)."""
        return calendar_field(name, getattr(self, name))

    @property
    def whole_days(self) -> bool:
        """Whether it skips whole days (every second of them), so day-level checks can use it."""
        return self.second == "*" and self.minute == "*" and self.hour == "*"


def skip_calendar(value: object) -> object:
    """A date (`2026-12-25`, quoted or not) becomes the calendar skipping that whole day."""
    if isinstance(value, datetime):
        raise ValueError(
            f"{value.isoformat()} is a time; an exclusion is a date (2026-12-25) or a calendar "
            "mapping (e.g. {month: dec, day_of_month: 25})"
        )
    if isinstance(value, date):
        return {"year": str(value.year), "month": str(value.month), "day_of_month": str(value.day)}
    if isinstance(value, str):
        match = _DATE.fullmatch(value.strip())
        if match is None:
            raise ValueError(
                f"'{value}' is not a date; write an exclusion as a date (2026-12-25) or a "
                "calendar mapping (e.g. {month: dec, day_of_month: 25})"
            )
        year, month, day = (int(g) for g in match.groups())
        _check_date_exists(value, year, month, day)
        return {"year": str(year), "month": str(month), "day_of_month": str(day)}
    return value


def _check_date_exists(text: str, year: int, month: int, day: int) -> None:
    if not 1 <= month <= 12:
        raise ValueError(f"'{text}' is not a date: there is no month {month}")
    days = calendar.monthrange(year, month)[1]
    if not 1 <= day <= days:
        raise ValueError(
            f"'{text}' is not a date: {calendar.month_name[month]} {year} has {days} days"
        )


def utc_instant(value: object, *, field: str) -> datetime:
    """An ISO 8601 time with a zone (quoted or read by YAML), as aware UTC."""
    if isinstance(value, datetime):
        parsed = value
    elif isinstance(value, date):
        raise ValueError(
            f"{value.isoformat()} is a date; {field} is an instant: write "
            f"{value.isoformat()}T00:00:00Z"
        )
    elif isinstance(value, str):
        try:
            parsed = datetime.fromisoformat(value.strip())
        except ValueError:
            raise ValueError(
                f"'{value}' is not an ISO 8601 time; write it like 2027-01-01T00:00:00Z"
            ) from None
    else:
        raise ValueError(f"expected an ISO 8601 time such as 2027-01-01T00:00:00Z, got {value!r}")
    if parsed.tzinfo is None:
        # The trigger is UTC only; guessing a zone would move the period by hours.
        raise ValueError(
            f"'{value}' has no time zone: schedules work in UTC, write it with a Z "
            f"(e.g. {parsed.isoformat()}Z)"
        )
    return parsed.astimezone(UTC)
