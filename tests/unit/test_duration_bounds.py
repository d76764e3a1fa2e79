"""Duration bounds (`expected_duration`, `late_start`) from plain values: the schedule file's
checks, each refusal one sentence naming its field; the run input and the history carrying the
bounds; and the monitor's judgement of a recorded run (which kind, which wins, when it resolves).
"""

from __future__ import annotations

import textwrap
from dataclasses import asdict
from datetime import UTC, datetime, timedelta
from functools import partial
from typing import Any

import pytest
from temporalio.converter import DataConverter

from cronwarden.activities.contract import GuardedRunInput
from cronwarden.activities.jobs import JobContext, JobRegistry, JobResult, JobSpec
from cronwarden.backfill.spec_history import Applied
from cronwarden.errors import ScheduleFileError
from cronwarden.monitor.scan import (
    RECOVERED,
    SystemRule,
    elapsed_text,
    plan,
    run_problem,
)
from cronwarden.schedules.mapping import definition_digest, definition_json, run_input
from cronwarden.schedules.model import ExpectedDuration, parse_schedule_text
from cronwarden.store.incidents import (
    HORIZON,
    LATE_START,
    OVERDUE,
    RUNNING_TOO_LONG,
    TOO_FAST,
    TOO_SLOW,
)
from cronwarden.workflows.run_input import ScheduledRunInput

NOW = datetime(2027, 3, 1, 12, 0, tzinfo=UTC)
FIRE = datetime(2027, 3, 1, 11, 0, tzinfo=UTC)


async def _noop(ctx: JobContext) -> JobResult:
    return None


def registry() -> JobRegistry:
    jobs = JobRegistry()
    jobs.register(JobSpec(name="report", func=_noop, read_only=True, args_model=None))
    return jobs


def entry(fields: str) -> str:
    body = textwrap.indent(textwrap.dedent(fields).strip(), "    ")
    return f"schedules:\n  - id: s1\n    job: report\n    cron: '0 * * * *'\n{body}\n"


def problems(fields: str) -> list[str]:
    with pytest.raises(ScheduleFileError) as exc_info:
        parse_schedule_text(entry(fields), registry())
    return exc_info.value.problems


def test_bounds_are_read_like_every_other_duration() -> None:
    [defn] = parse_schedule_text(
        entry("expected_duration: {min: 5s, max: 10m}\nlate_start: 2m"), registry()
    )
    assert defn.expected_duration == ExpectedDuration(
        min=timedelta(seconds=5), max=timedelta(minutes=10)
    )
    assert defn.late_start == timedelta(minutes=2)
    [only_max] = parse_schedule_text(entry("expected_duration: {max: 10m}"), registry())
    assert only_max.expected_duration is not None and only_max.expected_duration.min is None


@pytest.mark.parametrize(
    ("fields", "problem"),
    [
        (
            "expected_duration: {min: 10m, max: 5s}",
            "field 'expected_duration': min (10m) must be shorter than max (5s)",
        ),
        (
            "expected_duration: {min: 0s}",
            "field 'expected_duration.min': '0s' is not a duration: it must be longer than zero",
        ),
        (
            "expected_duration: {max: -5s}",
            "field 'expected_duration.max': '-5s' is not a duration",
        ),
        (
            "expected_duration: {mni: 5s}",
            "field 'expected_duration.mni': unknown field 'mni' (did you mean 'min'?)",
        ),
        ("expected_duration: {}", "field 'expected_duration': give `min`, `max` or both"),
        ("expected_duration: 5s", "field 'expected_duration': expected a mapping"),
        ("expected_duration: {min: 5}", "field 'expected_duration.min': 5 has no unit"),
        (
            "expected_duration: {max: 20m}",
            "`expected_duration.max` (20m) must be shorter than `timeout` (15m)",
        ),
        ("late_start: 10s", "field 'late_start': 10s is below the minimum of 30s"),
        ("late_start: 0m", "field 'late_start': '0m' is not a duration"),
        (
            "late_start: 1m\njitter: 1m",
            "`late_start` (1m) must be longer than `jitter` (1m)",
        ),
        ("expected_durations: {min: 5s}", "(did you mean 'expected_duration'?)"),
    ],
    ids=[
        "min-above-max",
        "zero",
        "negative",
        "unknown-key",
        "empty",
        "not-a-mapping",
        "no-unit",
        "max-past-timeout",
        "late-start-below-floor",
        "late-start-zero",
        "late-start-within-jitter",
        "misspelt-field",
    ],
)
def test_bad_bounds_are_one_clear_problem_naming_the_field(fields: str, problem: str) -> None:
    [found] = problems(fields)
    assert found.startswith("schedule 's1' (entry 1)")
    assert problem in found


def test_the_bounds_ride_the_run_input_and_old_inputs_decode_without_them() -> None:
    [defn] = parse_schedule_text(
        entry("expected_duration: {min: 5s, max: 10m}\nlate_start: 2m"), registry()
    )
    inp = run_input(defn, task_queue="q")
    assert (inp.min_duration_seconds, inp.max_duration_seconds, inp.late_start_seconds) == (
        5.0,
        600.0,
        120.0,
    )
    converter = DataConverter.default
    # A payload written before the bounds existed: the fields take their defaults (no bound).
    old = {k: v for k, v in asdict(inp).items() if "duration" not in k and "late" not in k}
    [payload] = converter.payload_converter.to_payloads([old])
    [decoded] = converter.payload_converter.from_payloads([payload], [ScheduledRunInput])
    assert decoded.min_duration_seconds is None and decoded.late_start_seconds is None
    guarded: dict[str, Any] = {"schedule_id": "s1", "logical_key": "k", "fire_time": "t"}
    guarded |= {"job": "report"}
    guarded |= {"args": {}, "args_digest": "", "lock_name": "l", "lock_ttl_seconds": 10.0}
    guarded |= {"heartbeat_grace_seconds": 60.0}
    [payload] = converter.payload_converter.to_payloads([guarded])
    [decoded_guarded] = converter.payload_converter.from_payloads([payload], [GuardedRunInput])
    assert decoded_guarded.max_duration_seconds is None


def test_unset_bounds_leave_the_digest_alone_and_set_ones_change_it() -> None:
    [plain] = parse_schedule_text(entry(""), registry())
    [bounded] = parse_schedule_text(entry("expected_duration: {min: 5s}"), registry())
    assert "expected_duration" not in definition_json(plain, task_queue="q")
    assert "late_start" not in definition_json(plain, task_queue="q")
    assert definition_digest(plain, task_queue="q") != definition_digest(bounded, task_queue="q")


def test_a_recorded_definition_with_bounds_is_rebuilt_from_its_json() -> None:
    [defn] = parse_schedule_text(
        entry("expected_duration: {min: 5s, max: 10m}\nlate_start: 2m"), registry()
    )
    recorded = Applied(NOW, "digest", definition_json(defn, task_queue="q"))
    assert recorded.rebuilt() == defn


def beat(breach: str | None, **overrides: Any) -> dict[str, Any]:
    row: dict[str, Any] = {
        "schedule_id": "s1",
        "next_expected_at": NOW + timedelta(hours=1),
        "grace": timedelta(minutes=1),
        "last_success_at": NOW - timedelta(minutes=1),
        "last_error": None,
        "paused": False,
        "compiled_until": None,
        "last_run_key": f"s1@{FIRE:%Y-%m-%dT%H:%M:%SZ}",
        "last_run_started_at": FIRE + timedelta(minutes=3),
        "last_run_duration": timedelta(seconds=0.012),
        "last_run_breach": breach,
        "duration_min": timedelta(seconds=5),
        "duration_max": timedelta(minutes=10),
        "late_start": timedelta(minutes=2),
    }
    row.update(overrides)
    return row


def test_each_broken_bound_is_its_own_kind_with_what_it_measured() -> None:
    fast = run_problem(beat(TOO_FAST))
    assert fast is not None and fast.kind == TOO_FAST
    assert fast.summary == (
        "schedule s1: run s1@2027-03-01T11:00:00Z took 0.012s, under its expected minimum "
        "of 5s: the job may have done nothing"
    )
    assert fast.details["duration_seconds"] == 0.012
    assert fast.details["expected_duration"] == {"min": "5s", "max": "10m"}
    slow = run_problem(beat(TOO_SLOW, last_run_duration=timedelta(minutes=12, seconds=5)))
    assert slow is not None and slow.kind == TOO_SLOW
    assert "took 12m05s, longer than its expected maximum of 10m" in slow.summary
    late = run_problem(beat(LATE_START))
    assert late is not None and late.kind == LATE_START
    assert "started 3m00s after its fire time, later than its late_start of 2m" in late.summary
    assert late.details["late_seconds"] == 180
    assert run_problem(beat(None)) is None
    assert run_problem(beat(TOO_FAST, paused=True)) is None


def test_elapsed_text() -> None:
    assert [elapsed_text(timedelta(seconds=s)) for s in (0.0123, 3.2, 59.9, 245, 7380)] == [
        "0.0123s",
        "3.2s",
        "59.9s",
        "4m05s",
        "2h03m",
    ]


# The pass's plan with nothing else found: each test names only what it is about.
decide = partial(
    plan,
    now=NOW,
    overdue=(),
    incident_heartbeats=(),
    overlong=(),
    open_incidents=(),
    watched=10,
    rule=SystemRule(),
)


def incident(kind: str) -> dict[str, Any]:
    return {"id": 7, "schedule_id": "s1", "kind": kind, "parent_id": None, "opened_at": NOW}


def test_a_broken_bound_opens_once_and_stays_while_runs_keep_breaking_it() -> None:
    first = decide(breaches=[beat(TOO_FAST)])
    assert [p.kind for p in first.open] == [TOO_FAST]
    again = decide(
        breaches=[beat(TOO_FAST)],
        open_incidents=[incident(TOO_FAST)],
        incident_heartbeats=[beat(TOO_FAST)],
    )
    assert again.open == [] and again.resolve == [] and again.replace == []


def test_the_next_run_within_bounds_resolves_and_another_bound_replaces() -> None:
    within = decide(open_incidents=[incident(TOO_FAST)], incident_heartbeats=[beat(None)])
    assert [r.resolution for r in within.resolve] == [RECOVERED]
    other = decide(
        breaches=[beat(TOO_SLOW)],
        open_incidents=[incident(TOO_FAST)],
        incident_heartbeats=[beat(TOO_SLOW)],
    )
    assert [(old["kind"], new.kind) for old, new in other.replace] == [(TOO_FAST, TOO_SLOW)]


def test_missed_fires_and_overlong_runs_win_over_a_broken_bound_which_wins_over_a_horizon() -> None:
    overdue_row = beat(TOO_SLOW, next_expected_at=NOW - timedelta(hours=1))
    assert [p.kind for p in decide(breaches=[overdue_row], overdue=[overdue_row]).open] == [OVERDUE]
    lease = {
        "schedule_id": "s1",
        "logical_key": "s1@x",
        "holder": "h",
        "acquired_at": NOW - timedelta(hours=1),
        "run_deadline": NOW - timedelta(minutes=1),
    }
    assert [p.kind for p in decide(breaches=[beat(TOO_FAST)], overlong=[lease]).open] == [
        RUNNING_TOO_LONG
    ]
    zoned = beat(LATE_START, compiled_until=NOW + timedelta(days=3))
    decided = decide(breaches=[zoned], horizons=[zoned], horizon_lead=timedelta(days=30))
    assert [p.kind for p in decided.open] == [LATE_START]
    # Once the run is within bounds again, the horizon comes back as its own page.
    assert [
        p.kind
        for p in decide(
            horizons=[beat(None, compiled_until=zoned["compiled_until"])],
            horizon_lead=timedelta(days=30),
        ).open
    ] == [HORIZON]


def test_a_broken_bound_never_joins_a_system_incident() -> None:
    rows = [beat(TOO_FAST, schedule_id=f"s{i}", last_run_key=f"s{i}@x") for i in range(5)]
    decided = decide(breaches=rows, watched=5)
    assert decided.system == [] and len(decided.open) == 5
