"""Local time beside UTC, for every view of a zoned schedule.

A zoned schedule (`timezone:`) names wall times; every time cronwarden shows stays the UTC
instant (logical keys are UTC), and the views of a zoned schedule add the instant on the
schedule's wall clock beside it: a `*_local` JSON field next to each UTC one, and the local
reading in parentheses in text. A UTC schedule's output is left exactly as it was: no new
field, no parentheses, so existing consumers read what they always read.

Where a view learns the zone: the definition `apply` stored (the action memo, or the latest
definition history row, both carrying `timezone` only for a zoned schedule), or a run input's
`zone`. The status page and the pages read it from Postgres alone (`store/zones.py`).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from datetime import datetime
from typing import Any

from cronwarden.activities.contract import fire_time_of_key
from cronwarden.schedules.mapping import ZONE_COMPILED
from cronwarden.schedules.zones import HORIZON_WARNING, compiled_until, local_text
from cronwarden.times import utc_text

TIMEZONE = "timezone"


def zone_of_definition(definition: Mapping[str, Any] | None) -> str | None:
    """The IANA zone a stored definition names; None for a UTC schedule (or none known)."""
    zone = (definition or {}).get(TIMEZONE)
    return zone if isinstance(zone, str) and zone else None


def local_or_none(instant: datetime | None, zone: str | None) -> str | None:
    """`zones.local_text` of an instant that may be absent; None too for a zone this host's
    database does not know (recorded by a newer release): the UTC text still shows, and no
    page or view fails for want of a local reading."""
    if instant is None or zone is None:
        return None
    try:
        return local_text(instant, zone)
    except ValueError:
        return None


def with_local(instant: datetime | None, zone: str | None, *, missing: str = "-") -> str:
    """The UTC text, followed for a zoned schedule by its local reading in parentheses:
    `2027-03-14T07:00:00Z (2027-03-14T03:00:00-04:00 EDT)`."""
    if instant is None:
        return missing
    local = local_or_none(instant, zone)
    return utc_text(instant) if local is None else f"{utc_text(instant)} ({local})"


def text_with_local(utc: str | None, instant: datetime | None, zone: str | None) -> str | None:
    """An already written UTC text (or a logical key) with the local reading of `instant`
    appended for a zoned schedule; the text as it is otherwise."""
    local = local_or_none(instant, zone)
    if utc is None or local is None:
        return utc
    return f"{utc} ({local})"


def key_local(schedule_id: str, key: str | None, zone: str | None) -> str | None:
    """The local reading of the fire time a logical key names (None: UTC or not a key)."""
    if key is None or zone is None:
        return None
    return local_or_none(fire_time_of_key(schedule_id, key), zone)


def key_with_local(schedule_id: str, key: str, zone: str | None) -> str:
    """A logical key, followed for a zoned schedule by its fire time's local reading."""
    local = key_local(schedule_id, key, zone)
    return key if local is None else f"{key} ({local})"


def keys_local(schedule_id: str, keys: Iterable[str], zone: str) -> Iterator[str | None]:
    """The local reading of each key's fire time, in order (lazily: a year's keys)."""
    for key in keys:
        yield key_local(schedule_id, key, zone)


def local_fields(zone: str | None, **instants: datetime | None) -> dict[str, Any]:
    """`{name}_local` for each instant, for a zoned schedule; nothing for a UTC one, so the
    UTC schedule's JSON keeps its shape."""
    if zone is None:
        return {}
    return {f"{name}_local": local_or_none(value, zone) for name, value in instants.items()}


def zone_fields(zone: str | None, **instants: datetime | None) -> dict[str, Any]:
    """`timezone` and `local_fields`, for a zoned schedule's JSON object; nothing for UTC."""
    if zone is None:
        return {}
    return {TIMEZONE: zone, **local_fields(zone, **instants)}


def causes_with_local(
    schedule_id: str, causes: list[dict[str, Any]] | None, zone: str | None
) -> list[dict[str, Any]] | None:
    """Cause groups (`backfill/causes.py` `as_json`) with `first_local` and `last_local` beside
    their `first` and `last` keys (and `local` beside each named slot's `logical_key`), for a
    zoned schedule; the groups as they are for a UTC one."""
    if causes is None or zone is None:
        return causes
    shown = []
    for group in causes:
        extra: dict[str, Any] = {}
        for name in ("first", "last"):
            if isinstance(group.get(name), str):
                extra[f"{name}_local"] = key_local(schedule_id, group[name], zone)
        shown.append({**group, **extra})
    return shown


def horizon_of(definition: Mapping[str, Any] | None) -> datetime | None:
    """Where a zoned schedule's compiled UTC entries end (None: UTC, or not recorded)."""
    if zone_of_definition(definition) is None:
        return None
    return compiled_until((definition or {}).get(ZONE_COMPILED))


def horizon_warning(definition: Mapping[str, Any] | None, *, now: datetime) -> str | None:
    """What `status` says of a zoned schedule whose compiled horizon is within
    `HORIZON_WARNING` of `now`; None otherwise."""
    horizon = horizon_of(definition)
    if horizon is None or horizon - now > HORIZON_WARNING:
        return None
    verb = "ended" if horizon <= now else "ends"
    return (
        f"its local times are compiled until {utc_text(horizon)} (it {verb} within "
        f"{HORIZON_WARNING.days} days): re-apply the schedule file to compile further"
    )


def causes_for_text(
    schedule_id: str, causes: list[dict[str, Any]] | None, zone: str | None
) -> list[dict[str, Any]]:
    """Cause groups whose `first` and `last` carry their local reading in parentheses, for
    `causes_lines` to print; as they are for a UTC schedule."""
    if zone is None:
        return list(causes or [])
    return [
        {
            **group,
            "first": key_with_local(schedule_id, str(group["first"]), zone),
            "last": key_with_local(schedule_id, str(group["last"]), zone),
        }
        for group in causes or []
    ]
