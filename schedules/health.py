"""A schedule's health from its heartbeat row, the way the absence monitor sees it.

Pure functions of their inputs and `now`, so every boundary is tested with explicit times.
"""

from __future__ import annotations

from datetime import datetime, timedelta

OK = "ok"
LATE = "late"
"""The expected fire time has passed, but its grace has not: a run may still be committing."""
OVERDUE = "overdue"
"""Past the expected fire time plus grace: the monitor pages."""
RUNNING = "running"
"""Past the expected fire time, within its grace, and a run is in progress: not late."""
PAUSED = "paused"
"""Paused by an operator: the monitor stays silent."""
UNTRACKED = "untracked"
"""No heartbeat row: a schedule cronwarden did not create (or one never applied)."""
MISSING = "missing"
"""On time now, but a recent slot has no commit, no run at the lease and no recorded skip (the
status page draws it red, `backfill plan` lists it): never `ok` beside a missing slot."""

SETTLE = timedelta(minutes=1)
"""How long after its fire time a slot with nothing to show is not yet missing (a run starting,
taking its lease), never longer than the grace: the status page's grid waits the same."""

OPERATOR = "operator"
OPERATOR_NOT_IN_TEMPORAL = "operator (not paused in Temporal)"
"""The heartbeat row says paused, Temporal runs the schedule (unpaused in its UI, or an unpause
that failed halfway): not a pause, the schedule is judged like any other."""
# The start of the Temporal note `schedules pause` writes: "paused by operator: <reason>".
OPERATOR_NOTE = "paused by operator"
FAILURE = "failure"


def derive_health(
    *,
    now: datetime,
    tracked: bool,
    operator_paused: bool,
    next_expected_at: datetime | None,
    grace: timedelta,
    running: bool = False,
) -> str:
    if not tracked:
        return UNTRACKED
    if operator_paused:
        return PAUSED
    if next_expected_at is None or now <= next_expected_at:
        # No fire expected (a spec with no future times) is nothing to be late for.
        return OK
    if now <= next_expected_at + grace:
        # The expected run may be the one in progress: it is not late until its grace is out.
        return RUNNING if running else LATE
    return OVERDUE


def counting_missing(health: str, missing: int) -> str:
    """The health shown beside `missing` missing slots: `ok` becomes `missing`; a health that
    already says more (late, overdue, running, paused, untracked) stands."""
    return MISSING if health == OK and missing > 0 else health


def settle_time(grace: timedelta) -> timedelta:
    """See SETTLE."""
    return min(grace, SETTLE)


def held_by_operator(note: str | None) -> bool:
    """Whether a pause Temporal holds is the one `schedules pause` made: its note. Any other
    note (pause_on_failure overwrites it, a worker missing the job writes its own) means the
    schedule was paused again by something else, which pages: a recorded operator pause no
    longer silences it."""
    return (note or "").startswith(OPERATOR_NOTE)


def paused_by(*, temporal_paused: bool, operator_paused: bool) -> str | None:
    """Who paused the schedule, as far as cronwarden can tell.

    Only `schedules pause` records an operator pause in the heartbeat row, and it counts only
    while Temporal has the schedule paused too. A schedule Temporal has paused without that
    record was paused by pause_on_failure, by a worker missing the job, or by someone outside
    cronwarden: the monitor keeps paging for it, so it shows as a failure.
    """
    if operator_paused and temporal_paused:
        return OPERATOR
    if operator_paused:
        return OPERATOR_NOT_IN_TEMPORAL
    if temporal_paused:
        return FAILURE
    return None


def format_age(age: timedelta) -> str:
    """A compact age: 42s, 5m10s, 3h12m, 2d4h (the two largest units, truncated)."""
    seconds = max(int(age.total_seconds()), 0)
    days, rest = divmod(seconds, 86_400)
    hours, rest = divmod(rest, 3_600)
    minutes, secs = divmod(rest, 60)
    parts = [(days, "d"), (hours, "h"), (minutes, "m"), (secs, "s")]
    while len(parts) > 1 and parts[0][0] == 0:
        parts.pop(0)
    return "".join(f"{n}{unit}" for n, unit in parts[:2] if n or unit == parts[0][1])
