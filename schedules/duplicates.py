"""The duplicate-schedule guard: two schedules running the same job on the same trigger with the
same args are almost always one schedule registered twice (a copied entry, a renamed id), and
each would apply the job's effects under its own logical keys: the outbox cannot catch it.

A schedule that sets `allow_duplicate: true` is left out of the comparison.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from schedules.model import ScheduleDefinition

DuplicateKey = tuple[str, str, str]


def duplicate_key(definition: Mapping[str, Any]) -> DuplicateKey:
    """What makes two schedules the same work: job, trigger and args (key order ignored).

    Takes the JSON form of a definition (`model_dump(mode="json")`, or the definition stored in
    a schedule's memo), so a file entry and a schedule already in Temporal compare alike.
    """
    cron, every = definition.get("cron"), definition.get("every")
    trigger = f"cron {cron}" if cron is not None else f"every {every}"
    args = json.dumps(definition.get("args") or {}, sort_keys=True, separators=(",", ":"))
    return (str(definition.get("job")), trigger, args)


def _describe(key: DuplicateKey) -> str:
    job, trigger, args = key
    return f"job '{job}', {trigger}, args {args}"


def duplicates_in_file(definitions: Iterable[ScheduleDefinition]) -> list[str]:
    """One problem per group of file entries that duplicate each other."""
    groups: dict[DuplicateKey, list[str]] = {}
    for defn in definitions:
        if not defn.allow_duplicate:
            groups.setdefault(duplicate_key(defn.model_dump(mode="json")), []).append(defn.id)
    return [
        f"schedules {_join(ids)} duplicate each other ({_describe(key)}); remove one, or set "
        "`allow_duplicate: true` on each if both are meant to run"
        for key, ids in groups.items()
        if len(ids) > 1
    ]


def duplicates_of_existing(
    new: Iterable[ScheduleDefinition], existing: Mapping[str, Mapping[str, Any]]
) -> list[str]:
    """One problem per new schedule that duplicates a schedule already in Temporal.

    `existing` maps schedule ids to their stored definitions (JSON form); the caller leaves out
    the ids of the file being applied and the schedules it is about to prune.
    """
    # Only the new schedule's flag counts: the stored definitions do not carry it.
    by_key: dict[DuplicateKey, list[str]] = {}
    for schedule_id, definition in existing.items():
        by_key.setdefault(duplicate_key(definition), []).append(schedule_id)
    problems = []
    for defn in new:
        if defn.allow_duplicate:
            continue
        key = duplicate_key(defn.model_dump(mode="json"))
        if key in by_key:
            problems.append(
                f"schedule '{defn.id}' duplicates the existing schedule(s) "
                f"{_join(sorted(by_key[key]))} ({_describe(key)}); delete the old one, or set "
                "`allow_duplicate: true` if both are meant to run"
            )
    return problems


def _join(ids: list[str]) -> str:
    quoted = [f"'{i}'" for i in ids]
    return quoted[0] if len(quoted) == 1 else ", ".join(quoted[:-1]) + f" and {quoted[-1]}"
