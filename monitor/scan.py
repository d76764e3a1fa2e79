"""Pure status derivation: given a snapshot and `now`, what to open and what to resolve.

Nothing here touches the database or the clock, so every rule is unit-tested with plain values.
The store re-checks each decision when it writes it (see `store/incidents.py`).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from cronwarden.activities.contract import fire_time_of_key
from cronwarden.backfill.causes import next_command
from cronwarden.monitor.messages import SUMMARY_NAMES, system_details
from cronwarden.redact import redact
from cronwarden.store.incidents import (
    HORIZON,
    HORIZON_LEAD,
    NEVER_RAN,
    OVERDUE,
    RUN_BOUNDS,
    RUNNING_TOO_LONG,
    SYSTEM,
    TOO_FAST,
    TOO_SLOW,
    UNPAUSE_FAILED,
)
from cronwarden.times import duration_text, utc_text, utc_text_or_none

RECOVERED = "recovered"
PAUSED = "paused"
SCHEDULE_DELETED = "schedule-deleted"
KIND_CHANGED = "kind-changed"


@dataclass(frozen=True)
class SystemRule:
    """When this many schedules go overdue in one pass, page once for all of them."""

    min_schedules: int = 3
    ratio: float = 0.5
    """Share of the watched (unpaused) schedules."""

    def applies(self, newly_overdue: int, watched: int) -> bool:
        if newly_overdue < self.min_schedules or watched <= 0:
            return False
        return newly_overdue / watched >= self.ratio


@dataclass(frozen=True)
class Problem:
    schedule_id: str
    kind: str
    summary: str
    details: dict[str, Any]
    expected_at: datetime | None = None
    """An overdue (or never-ran) schedule's expected fire: where its gap begins."""

    @property
    def late(self) -> bool:
        """Overdue or never ran: a gap of missing fires, whose cause a page can name."""
        return self.kind in (OVERDUE, NEVER_RAN)


@dataclass(frozen=True)
class Resolution:
    incident: Mapping[str, Any]
    resolution: str


@dataclass
class Plan:
    open: list[Problem] = field(default_factory=list)
    """Problems of schedules with no open incident, each paged on its own (a horizon one for
    the schedules `under` it too)."""
    system: list[Problem] = field(default_factory=list)
    """Overdue schedules paged together by one system incident (new or already open)."""
    resolve: list[Resolution] = field(default_factory=list)
    replace: list[tuple[Mapping[str, Any], Problem]] = field(default_factory=list)
    """Open incidents whose problem changed kind: resolved and opened anew in one transaction,
    so the new problem pages (a run that took too long, then left the schedule overdue)."""
    under: dict[str, list[Problem]] = field(default_factory=dict)
    """Horizon problems opened under another's `horizon` incident of `open` (by its schedule
    id), which pages once for all of them: they share one compiled horizon, so one cause (an
    apply of the same year) and one fix (re-apply the file)."""


def heartbeat_problem(beat: Mapping[str, Any], now: datetime) -> Problem | None:
    """Overdue when `next_expected_at + grace < now` and not paused by an operator; a schedule
    that has never succeeded is `never-ran`. Pauses by Temporal (pause_on_failure) are not in
    `paused`, so such a schedule keeps paging."""
    expected: datetime | None = beat["next_expected_at"]
    grace: timedelta = beat["grace"]
    if beat["paused"] or expected is None or expected + grace >= now:
        return None
    sid = beat["schedule_id"]
    late = now - expected
    details = {
        "next_expected_at": utc_text_or_none(expected),
        "grace": duration_text(grace),
        "last_success_at": utc_text_or_none(beat["last_success_at"]),
        "last_error": beat.get("last_error"),
        "late_seconds": int(late.total_seconds()),
        # What closes the gap, known from the row alone: a page says it even when Temporal
        # cannot be asked for the cause (`monitor.gap_causes` adds that when it can).
        "next_command": next_command(sid, expected, now),
    }
    if beat["last_success_at"] is None:
        summary = (
            f"schedule {sid} never ran: its first fire was expected at "
            f"{utc_text(expected)} (grace {duration_text(grace)})"
        )
        return Problem(sid, NEVER_RAN, summary, details, expected_at=expected)
    summary = (
        f"schedule {sid} is overdue: a run was expected at {utc_text(expected)} "
        f"(grace {duration_text(grace)}); last success {utc_text(beat['last_success_at'])}"
    )
    if beat.get("last_error"):
        # Blanked before it is cut: half a secret is no longer recognisable as one (a row
        # written before errors were scrubbed at write still holds them whole).
        summary += f"; last error: {redact(str(beat['last_error']))[:200]}"
    return Problem(sid, OVERDUE, summary, details, expected_at=expected)


def horizon_problem(
    beat: Mapping[str, Any], now: datetime, lead: timedelta = HORIZON_LEAD
) -> Problem | None:
    """A local-time schedule whose compiled entries end within `lead` (or have ended): Temporal
    holds no fire of it past `compiled_until`, and the row's deadline then goes empty, so no
    overdue page would ever come. Not while paused by an operator; never for a UTC schedule
    (no horizon) nor one that ends before it (`apply` writes none)."""
    until: datetime | None = beat.get("compiled_until")
    if beat["paused"] or until is None or until - lead > now:
        return None
    sid = beat["schedule_id"]
    summary = (
        f"schedule {sid}: re-apply the schedule file (`cronwarden schedules apply`): its "
        f"local-time entries {_horizon_when(until, now)}; a re-apply compiles the years after"
    )
    details = {
        "compiled_until": utc_text(until),
        "lead": duration_text(lead),
        "next_expected_at": utc_text_or_none(beat.get("next_expected_at")),
    }
    return Problem(sid, HORIZON, summary, details)


def _horizon_when(until: datetime, now: datetime) -> str:
    if until > now:
        # Whole days, counted up: "in 0 days" would read as already past.
        days = -((now - until) // timedelta(days=1))
        return f"end at {utc_text(until)}, in {days} day(s)"
    return f"ended at {utc_text(until)}: Temporal fires it no more"


def _group_horizons(
    problems: list[Problem], now: datetime
) -> tuple[list[Problem], dict[str, list[Problem]]]:
    """`problems` with each set of new horizon problems sharing a `compiled_until` cut to its
    first, which names them all (the first `LISTED` ids and the count, as a system page does),
    and the others by the first's schedule id (`Plan.under`). A set of one stays as it is."""
    shared: dict[str, list[Problem]] = {}
    for problem in problems:
        if problem.kind == HORIZON:
            shared.setdefault(problem.details["compiled_until"], []).append(problem)
    under: dict[str, list[Problem]] = {}
    kept = []
    for problem in problems:
        group = shared.get(problem.details.get("compiled_until", ""), [])
        if problem.kind != HORIZON or len(group) == 1:
            kept.append(problem)
        elif problem is group[0]:
            ids = [p.schedule_id for p in group]
            named = ", ".join(ids[:SUMMARY_NAMES])
            more = f" and {len(ids) - SUMMARY_NAMES:,} more" if len(ids) > SUMMARY_NAMES else ""
            until = datetime.fromisoformat(problem.details["compiled_until"])
            summary = (
                f"{len(ids):,} schedules: re-apply the schedule file (`cronwarden schedules "
                f"apply`): their local-time entries {_horizon_when(until, now)}; a re-apply "
                f"compiles the years after: {named}{more}"
            )
            details = {**problem.details, **system_details(ids)}
            kept.append(Problem(problem.schedule_id, HORIZON, summary, details))
            under[problem.schedule_id] = group[1:]
    return kept, under


def elapsed_text(td: timedelta) -> str:
    """A run's measured duration for people: 0.012s, 3.2s, 4m05s, 2h03m."""
    seconds = td.total_seconds()
    if seconds < 60:
        return f"{seconds:.3g}s"
    whole = int(seconds)
    if whole < 3600:
        return f"{whole // 60}m{whole % 60:02d}s"
    return f"{whole // 3600}h{whole % 3600 // 60:02d}m"


def run_problem(beat: Mapping[str, Any]) -> Problem | None:
    """The bound the last live run broke, as the commit statement judged it (store/runs.py):
    `too-slow`, `too-fast` or `late-start`, or None. Not while paused by an operator. It
    stays until the next live run is judged within its bounds (or the bounds are removed and
    a run commits)."""
    kind = beat.get("last_run_breach")
    if beat["paused"] or kind not in RUN_BOUNDS:
        return None
    sid = beat["schedule_id"]
    key = beat.get("last_run_key") or ""
    started: datetime | None = beat.get("last_run_started_at")
    took: timedelta | None = beat.get("last_run_duration")
    fire_time = fire_time_of_key(sid, key)
    late = started - fire_time if started is not None and fire_time is not None else None
    details: dict[str, Any] = {
        "logical_key": key,
        "fire_time": utc_text_or_none(fire_time),
        "started_at": utc_text_or_none(started),
        "duration_seconds": None if took is None else round(took.total_seconds(), 3),
        "late_seconds": None if late is None else int(late.total_seconds()),
        "expected_duration": {
            "min": _bound_text(beat.get("duration_min")),
            "max": _bound_text(beat.get("duration_max")),
        },
        "late_start": _bound_text(beat.get("late_start")),
    }
    took_text = elapsed_text(took) if took is not None else "an unknown time"
    if kind == TOO_SLOW:
        summary = (
            f"schedule {sid}: run {key} took {took_text}, longer than its expected maximum "
            f"of {_bound_text(beat.get('duration_max'))}"
        )
    elif kind == TOO_FAST:
        summary = (
            f"schedule {sid}: run {key} took {took_text}, under its expected minimum of "
            f"{_bound_text(beat.get('duration_min'))}: the job may have done nothing"
        )
    else:
        late_text = elapsed_text(late) if late is not None else "an unknown time"
        summary = (
            f"schedule {sid}: run {key} started {late_text} after its fire time, later than "
            f"its late_start of {_bound_text(beat.get('late_start'))}"
        )
    return Problem(sid, kind, summary, details)


def unpause_problem(beat: Mapping[str, Any]) -> Problem | None:
    """A timed pause that has ended but still holds: the monitor's try to unpause the schedule
    failed (`unpause_error`). The one problem a paused row can have: the operator asked for the
    schedule to run again by now, and it does not."""
    error = beat.get("unpause_error")
    until: datetime | None = beat.get("paused_until")
    if not beat["paused"] or not error or until is None:
        return None
    sid = beat["schedule_id"]
    summary = (
        f"schedule {sid}: its timed pause ended at {utc_text(until)} but the monitor could not "
        f"unpause it ({redact(str(error))[:200]}); it keeps trying, or run "
        f"`cronwarden schedules unpause {sid}`"
    )
    details = {
        "paused_until": utc_text(until),
        "failing_since": utc_text_or_none(beat.get("unpause_failed_at")),
        "error": error,
        "next_command": f"cronwarden schedules unpause {sid}",
    }
    return Problem(sid, UNPAUSE_FAILED, summary, details)


def _bound_text(value: timedelta | None) -> str | None:
    return None if value is None else duration_text(value)


def beat_problem(
    beat: Mapping[str, Any], now: datetime, lead: timedelta = HORIZON_LEAD
) -> Problem | None:
    """The row's own problem: a missed fire first (it is happening now), then the bound its
    last live run broke, else a horizon near."""
    return heartbeat_problem(beat, now) or run_problem(beat) or horizon_problem(beat, now, lead)


def lease_problem(lease: Mapping[str, Any], now: datetime) -> Problem:
    sid = lease["schedule_id"]
    deadline: datetime = lease["run_deadline"]
    return Problem(
        sid,
        RUNNING_TOO_LONG,
        f"schedule {sid}: run {lease['logical_key']} started at "
        f"{utc_text(lease['acquired_at'])} and is still running past its timeout + "
        f"grace ({utc_text(deadline)})",
        {
            "logical_key": lease["logical_key"],
            "holder": lease["holder"],
            "started_at": utc_text_or_none(lease["acquired_at"]),
            "run_deadline": utc_text_or_none(deadline),
            "over_seconds": int((now - deadline).total_seconds()),
        },
    )


def plan(
    *,
    now: datetime,
    overdue: Sequence[Mapping[str, Any]],
    incident_heartbeats: Sequence[Mapping[str, Any]],
    overlong: Sequence[Mapping[str, Any]],
    open_incidents: Sequence[Mapping[str, Any]],
    watched: int,
    rule: SystemRule,
    join_window: timedelta = timedelta(seconds=30),
    system_members: Collection[str] = (),
    horizons: Sequence[Mapping[str, Any]] = (),
    horizon_lead: timedelta = HORIZON_LEAD,
    breaches: Sequence[Mapping[str, Any]] = (),
    unpause_failures: Sequence[Mapping[str, Any]] = (),
) -> Plan:
    """Decide the pass. A run holding its lease too long is the more specific diagnosis of a
    schedule that is also overdue (its next fires are being skipped), so it wins. Missed fires
    come next, then a bound the last live run broke (too slow, too fast, started late: it
    happened, but the schedule still runs), and a horizon near is the least urgent: a schedule
    has one open incident at a time, so a more urgent one replaces it, and it comes back (pages
    again) once that one is over.
    `system_members`: schedules that have been members of the open system incident.
    `horizons`: rows whose compiled horizon is within `horizon_lead`.
    `breaches`: rows whose last live run broke a duration bound.
    `unpause_failures`: paused rows whose timed pause the monitor could not end (no other
    problem is judged while paused, so it never competes with one)."""
    problems: dict[str, Problem] = {}
    for beat in horizons:
        found = horizon_problem(beat, now, horizon_lead)
        if found is not None:
            problems[found.schedule_id] = found
    for beat in breaches:
        found = run_problem(beat)
        if found is not None:
            problems[found.schedule_id] = found
    for beat in overdue:
        found = heartbeat_problem(beat, now)
        if found is not None:
            problems[found.schedule_id] = found
    for lease in overlong:
        problems[lease["schedule_id"]] = lease_problem(lease, now)
    for beat in unpause_failures:
        found = unpause_problem(beat)
        if found is not None:
            problems[found.schedule_id] = found

    result = Plan()
    open_by_schedule = {i["schedule_id"]: i for i in open_incidents if i["schedule_id"]}
    beats = {b["schedule_id"]: b for b in incident_heartbeats}
    for sid, incident in open_by_schedule.items():
        if sid in problems:
            if problems[sid].kind != incident["kind"]:
                result.replace.append((incident, problems[sid]))
            continue
        found_beat = beats.get(sid)
        # A deleted schedule resolves (with a resolve page, so PagerDuty closes it too)
        # instead of paging forever; an operator's pause means someone is on it.
        if found_beat is None:
            result.resolve.append(Resolution(incident, SCHEDULE_DELETED))
        elif found_beat["paused"]:
            result.resolve.append(Resolution(incident, PAUSED))
        elif beat_problem(found_beat, now, horizon_lead) is None:
            # A horizon moved out (a re-apply compiled the years after) resolves it too.
            result.resolve.append(Resolution(incident, RECOVERED))

    new = [p for sid, p in sorted(problems.items()) if sid not in open_by_schedule]
    late = [p for p in new if p.kind in (OVERDUE, NEVER_RAN)]
    systems = [i for i in open_incidents if i["kind"] == SYSTEM]
    # A schedule of the open system incident that recovered and went overdue again is still
    # that outage: it rejoins it, instead of being paged a second time on its own.
    rejoin = [p for p in late if p.schedule_id in system_members] if systems else []
    fresh = [p for p in late if p not in rejoin]
    # A system incident that opened within `join_window` (the monitor passes two intervals)
    # takes the schedules that go overdue just after it: most likely the same outage, caught a
    # pass later. Later ones page on their own, even many at once: only one system incident is
    # open at a time, its page went out already and lists only its first schedules, so one
    # that joined an hours-old system incident would never be named to anyone.
    recent = any(now - i["opened_at"] <= join_window for i in systems)
    if fresh and (recent or (not systems and rule.applies(len(fresh), watched))):
        result.system = rejoin + fresh
        # What is not a missed fire pages on its own, outage or not.
        result.open = [p for p in new if not p.late]
    else:
        result.system = rejoin
        result.open = [p for p in new if p not in rejoin]
    result.open, result.under = _group_horizons(result.open, now)
    result.resolve = _keep_groups_open(result.resolve, open_incidents)
    return result


def _keep_groups_open(
    resolve: list[Resolution], open_incidents: Sequence[Mapping[str, Any]]
) -> list[Resolution]:
    """`resolve` without a horizon incident that pages for others (`Plan.under`) while one of
    them stays open: its page and its resolve are the group's, and it resolves once none of
    the group is left."""
    resolving = {r.incident["id"] for r in resolve}
    held = {
        i["parent_id"]
        for i in open_incidents
        if i["parent_id"] is not None and i["kind"] == HORIZON and i["id"] not in resolving
    }
    return [r for r in resolve if r.incident["id"] not in held]
