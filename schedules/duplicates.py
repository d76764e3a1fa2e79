"""The duplicate-schedule guard: two schedules running the same job on the same trigger with the
same args are almost always one schedule registered twice (a copied entry, a renamed id), and
each would apply the job's effects under its own logical keys: the outbox cannot catch it.

A schedule that sets `allow_duplicate: true` is left out of the comparison.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any

from cronwarden.schedules.zones import canonical_zone

if TYPE_CHECKING:
    from cronwarden.schedules.model import ScheduleDefinition

DuplicateKey = tuple[str, str, str]
# The active period of a schedule, as ISO strings (None: unbounded on that side).
Period = tuple[str | None, str | None]


def duplicate_key(definition: Mapping[str, Any], *, shown: bool = False) -> DuplicateKey:
    """What makes two schedules the same work: job, trigger and args (key order ignored).

    Takes the JSON form of a definition (`model_dump(mode="json")`, or the definition stored in
    a schedule's memo), so a file entry and a schedule already in Temporal compare alike. A
    single cron and a list holding only it are one trigger, and a list's order does not count.
    Exclusions and jitter are left out: two schedules that fire on the same slots except a
    holiday still do the same work on every other day. A zone is compared by its rules (two
    names of one zone are one trigger); `shown` keeps the name as written, for messages.
    """
    cron, every = definition.get("cron"), definition.get("every")
    if cron is not None:
        crons = [cron] if isinstance(cron, str) else sorted(str(c) for c in cron)
        trigger = "cron " + " | ".join(crons)
    else:
        trigger = f"every {every}"
    zone = definition.get("timezone")
    if zone and cron is not None:
        # 09:00 in Berlin and 09:00 in UTC are different instants; an interval ignores zones.
        trigger += f" in {zone if shown else canonical_zone(str(zone))}"
    args = json.dumps(definition.get("args") or {}, sort_keys=True, separators=(",", ":"))
    return (str(definition.get("job")), trigger, args)


def period(definition: Mapping[str, Any]) -> Period:
    start, end = definition.get("start_at"), definition.get("end_at")
    return (None if start is None else str(start), None if end is None else str(end))


def periods_overlap(a: Period, b: Period) -> bool:
    """Whether two active periods share an instant. Ends are inclusive in Temporal (a fire at
    exactly end_at runs), so a hand-over must start the new schedule after the old one ends."""
    return _before_or_at(a[0], b[1]) and _before_or_at(b[0], a[1])


def _before_or_at(start: str | None, end: str | None) -> bool:
    if start is None or end is None:
        return True
    return datetime.fromisoformat(start) <= datetime.fromisoformat(end)


def _describe(definition: Mapping[str, Any]) -> str:
    job, trigger, args = duplicate_key(definition, shown=True)
    return f"job '{job}', {trigger}, args {args}"


def duplicates_in_file(definitions: Iterable[ScheduleDefinition]) -> list[str]:
    """One problem per group of file entries that duplicate each other at some instant."""
    groups: dict[DuplicateKey, list[tuple[str, Period]]] = {}
    first: dict[DuplicateKey, Mapping[str, Any]] = {}
    for defn in definitions:
        if not defn.allow_duplicate:
            data = defn.model_dump(mode="json")
            key = duplicate_key(data)
            groups.setdefault(key, []).append((defn.id, period(data)))
            first.setdefault(key, data)
    problems = []
    for key, members in groups.items():
        ids = sorted(
            {
                a_id
                for a_id, a in members
                for b_id, b in members
                if a_id != b_id and periods_overlap(a, b)
            }
        )
        if len(ids) > 1:
            problems.append(
                f"schedules {_join(ids)} duplicate each other ({_describe(first[key])}); "
                "remove one, "
                "or set `allow_duplicate: true` on each if both are meant to run"
            )
    return problems


def duplicates_of_existing(
    new: Iterable[ScheduleDefinition], existing: Mapping[str, Mapping[str, Any]]
) -> list[str]:
    """One problem per new schedule that duplicates a schedule already in Temporal.

    `existing` maps schedule ids to their stored definitions (JSON form); the caller leaves out
    the ids of the file being applied and the schedules it is about to prune. Schedules whose
    active periods (start_at to end_at) never meet are a hand-over, not a duplicate.
    """
    # Only the new schedule's flag counts: the stored definitions do not carry it.
    by_key: dict[DuplicateKey, list[tuple[str, Period]]] = {}
    for schedule_id, definition in existing.items():
        by_key.setdefault(duplicate_key(definition), []).append((schedule_id, period(definition)))
    problems = []
    for defn in new:
        if defn.allow_duplicate:
            continue
        data = defn.model_dump(mode="json")
        key = duplicate_key(data)
        clashing = sorted(i for i, p in by_key.get(key, []) if periods_overlap(period(data), p))
        if clashing:
            problems.append(
                f"schedule '{defn.id}' duplicates the existing schedule(s) "
                f"{_join(clashing)} ({_describe(data)}); delete the old one, or set "
                "`allow_duplicate: true` if both are meant to run"
            )
    return problems


def _join(ids: list[str]) -> str:
    quoted = [f"'{i}'" for i in ids]
    return quoted[0] if len(quoted) == 1 else ", ".join(quoted[:-1]) + f" and {quoted[-1]}"
