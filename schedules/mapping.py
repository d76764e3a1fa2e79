"""A `ScheduleDefinition` as a Temporal `Schedule`. UTC only: no time zone ever reaches the spec.

A zoned schedule's wall times are compiled into UTC calendar entries by schedules/zones.py, for
a window of whole years; the window and the zone database's version are part of the digest, so
the first apply in a new year, or under a new `tzdata`, pushes the entries again.
"""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime, timedelta
from typing import Any

from temporalio.client import (
    Schedule,
    ScheduleActionStartWorkflow,
    ScheduleCalendarSpec,
    ScheduleIntervalSpec,
    ScheduleOverlapPolicy,
    SchedulePolicy,
    ScheduleRange,
    ScheduleSpec,
    ScheduleState,
)

from cronwarden.activities.contract import (
    DIGEST_MEMO as DIGEST_MEMO,  # re-exported: apply and tests use it
)
from cronwarden.schedules.model import SPEC_EXTRAS, Overlap, ScheduleDefinition
from cronwarden.schedules.spec_parts import SkipCalendar
from cronwarden.schedules.zones import (
    ZONE_DB_VERSION,
    compile_local,
    compile_window,
    compiled_label,
    value_ranges,
)
from cronwarden.workflows.scheduled_run import WORKFLOW_NAME, ScheduledRunInput

# Schedule-level memo marking what cronwarden created (set once, at creation).
MANAGED_MEMO = "cronwarden"


def marks_managed(value: object) -> bool:
    """Whether a decoded MANAGED_MEMO value says `apply` created the schedule."""
    return isinstance(value, dict) and value.get("managed") is True


# Action-level memo (updatable with the schedule): the definition we applied and its digest.
# Temporal turns cron strings into calendars, so comparing specs with what describe returns would
# report changes that are not; comparing our own digest is exact.
DEFINITION_MEMO = "cronwarden_definition"

# Part of the digest: bump it when the mapping below changes (workflow input shape, timeouts), so
# the next apply pushes the new shape to schedules whose file entry did not change.
MAPPING_VERSION = 2

_OVERLAP = {
    Overlap.skip: ScheduleOverlapPolicy.SKIP,
    Overlap.buffer_one: ScheduleOverlapPolicy.BUFFER_ONE,
    Overlap.allow_all: ScheduleOverlapPolicy.ALLOW_ALL,
}


ZONE_COMPILED = "zone_compiled"
"""The key of the definition JSON naming what a zoned schedule's entries were compiled for."""


def clock() -> datetime:
    """Now, for the years a zoned schedule is compiled for (tests set another year)."""
    return datetime.now(UTC)


def zone_of(defn: ScheduleDefinition) -> dict[str, Any] | None:
    """What the guard needs to tell a repeated wall time's second reading (None: UTC)."""
    if defn.timezone is None or not defn.crons:
        return None
    return {
        "timezone": defn.timezone,
        "crons": defn.crons,
        "dst_repeat": defn.dst_repeat,
        # The guard judges a replay by the rule only with the zone data it was compiled from.
        "tzdata": ZONE_DB_VERSION,
    }


def run_input(
    defn: ScheduleDefinition, *, task_queue: str, now: datetime | None = None
) -> ScheduledRunInput:
    bounds = defn.expected_duration
    return ScheduledRunInput(
        schedule_id=defn.id,
        job=defn.job,
        args=dict(defn.args),
        args_digest=defn.args_digest(),
        labels=dict(defn.labels) or None,
        overlap=defn.overlap.value,
        lock_name=defn.lock_name,
        lock_ttl_seconds=defn.lock_ttl.total_seconds(),
        timeout_seconds=defn.timeout.total_seconds(),
        heartbeat_grace_seconds=defn.heartbeat_grace.total_seconds(),
        max_attempts=defn.max_attempts,
        definition_digest=definition_digest(defn, task_queue=task_queue, now=now),
        zone=zone_of(defn),
        min_duration_seconds=_seconds(bounds.min if bounds is not None else None),
        max_duration_seconds=_seconds(bounds.max if bounds is not None else None),
        late_start_seconds=_seconds(defn.late_start),
    )


def _seconds(value: timedelta | None) -> float | None:
    """A run input's bound in seconds (None: unset)."""
    return None if value is None else value.total_seconds()


def definition_json(
    defn: ScheduleDefinition,
    *,
    task_queue: str,
    now: datetime | None = None,
    compiled: bool = True,
) -> dict[str, Any]:
    """The definition as applied: the file entry plus what it runs on. `now` names the years a
    zoned schedule is compiled for (default: the clock's); `compiled=False` leaves them out,
    for comparing files whatever year they are applied in."""
    # allow_duplicate only steers apply's guard; it is not part of what runs, so flipping it
    # must not count as a change to the schedule.
    data: dict[str, Any] = defn.model_dump(mode="json", exclude={"allow_duplicate"})
    for name in SPEC_EXTRAS:
        # Unset extras stay out, so definitions written before they existed keep their digest;
        # a set one is in, so changing it re-applies the schedule.
        if data.get(name) in (None, [], {}):
            data.pop(name, None)
    if defn.timezone is not None and compiled:
        data[ZONE_COMPILED] = compiled_label(now or clock())
    data["task_queue"] = task_queue
    data["workflow"] = WORKFLOW_NAME
    data["mapping_version"] = MAPPING_VERSION
    return data


def definition_digest(
    defn: ScheduleDefinition,
    *,
    task_queue: str,
    now: datetime | None = None,
    compiled: bool = True,
) -> str:
    canonical = json.dumps(
        definition_json(defn, task_queue=task_queue, now=now, compiled=compiled),
        sort_keys=True,
        separators=(",", ":"),
    )
    return hashlib.sha256(canonical.encode()).hexdigest()


def execution_timeout(defn: ScheduleDefinition) -> timedelta:
    """Bound on a whole run (every attempt plus the backoff between them), so a run stuck
    without a worker cannot hold a Skip schedule's overlap slot for ever."""
    backoff = timedelta(seconds=60) * defn.max_attempts
    # Any live fire may first wait up to one timeout for the lease: buffer_one behind whoever
    # holds it, skip and allow_all behind a replay. Its job must still get its whole timeout.
    waiting = defn.timeout
    return waiting + defn.timeout * defn.max_attempts + backoff + timedelta(minutes=5)


def to_spec(
    defn: ScheduleDefinition,
    *,
    window: tuple[datetime, datetime] | None = None,
    now: datetime | None = None,
) -> ScheduleSpec:
    """The definition's spec as Temporal's, UTC only (no time zone ever set).

    A zoned one is compiled for `window` (default: this year's `compile_window`); a plan asking
    about other years passes its own."""
    local = defn.local_spec
    if local is not None:
        start, end = window or compile_window(now or clock())
        compiled = compile_local(local, start, end)
        return ScheduleSpec(
            calendars=list(compiled.calendars),
            intervals=[ScheduleIntervalSpec(every=defn.every)] if defn.every is not None else [],
            skip=list(compiled.skips),
            start_at=defn.start_at,
            end_at=defn.end_at,
            jitter=defn.jitter,
        )
    return ScheduleSpec(
        cron_expressions=defn.crons,
        intervals=[ScheduleIntervalSpec(every=defn.every)] if defn.every is not None else [],
        # The exclusions and the maintenance windows, merged here only: the definition (and
        # its digest) keeps each as the file writes it.
        skip=[_skip_spec(s) for s in defn.skip_calendars],
        start_at=defn.start_at,
        end_at=defn.end_at,
        jitter=defn.jitter,
    )


def _skip_spec(skip: SkipCalendar) -> ScheduleCalendarSpec:
    # Every field is given explicitly: Temporal's defaults for second, minute and hour are 0, so
    # a date left at the defaults would skip only its first second.
    def ranges(name: str) -> tuple[ScheduleRange, ...]:
        values = skip.values(name)
        return () if values is None else value_ranges(values)

    return ScheduleCalendarSpec(
        second=ranges("second"),
        minute=ranges("minute"),
        hour=ranges("hour"),
        day_of_month=ranges("day_of_month"),
        month=ranges("month"),
        day_of_week=ranges("day_of_week"),
        year=ranges("year"),
    )


def to_temporal(
    defn: ScheduleDefinition,
    *,
    task_queue: str,
    window: tuple[datetime, datetime] | None = None,
) -> Schedule:
    # One reading of the clock for the entries, the memo's label and the run input's digest:
    # read apart, an apply straddling midnight on 31 December would push last year's entries
    # under this year's label, and no later apply would see anything to change.
    now = clock()
    spec = to_spec(defn, window=window, now=now)
    action = ScheduleActionStartWorkflow(
        WORKFLOW_NAME,
        run_input(defn, task_queue=task_queue, now=now),
        id=defn.id,
        task_queue=task_queue,
        execution_timeout=execution_timeout(defn),
        memo={
            DIGEST_MEMO: definition_digest(defn, task_queue=task_queue, now=now),
            DEFINITION_MEMO: definition_json(defn, task_queue=task_queue, now=now),
        },
    )
    policy = SchedulePolicy(
        overlap=_OVERLAP[defn.overlap],
        catchup_window=defn.catchup_window,
        pause_on_failure=defn.pause_on_failure,
    )
    return Schedule(action=action, spec=spec, policy=policy, state=ScheduleState())
