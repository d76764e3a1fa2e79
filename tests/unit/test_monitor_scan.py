"""The monitor's decisions, from plain values and an explicit `now`."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from cronwarden.monitor.scan import (
    PAUSED,
    RECOVERED,
    SCHEDULE_DELETED,
    SystemRule,
    heartbeat_problem,
    plan,
)
from cronwarden.store.incidents import NEVER_RAN, OVERDUE, RUNNING_TOO_LONG, SYSTEM

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
RULE = SystemRule(min_schedules=3, ratio=0.5)


def beat(
    sid: str,
    *,
    expected_ago: float = 600,
    grace: float = 60,
    succeeded: bool = True,
    paused: bool = False,
    error: str | None = None,
) -> dict[str, Any]:
    return {
        "schedule_id": sid,
        "next_expected_at": NOW - timedelta(seconds=expected_ago),
        "grace": timedelta(seconds=grace),
        "last_success_at": NOW - timedelta(hours=1) if succeeded else None,
        "last_error": error,
        "paused": paused,
    }


def lease(sid: str) -> dict[str, Any]:
    return {
        "schedule_id": sid,
        "logical_key": f"{sid}@2026-03-01T11:00:00Z",
        "holder": "wf/run/1",
        "acquired_at": NOW - timedelta(hours=1),
        "run_deadline": NOW - timedelta(minutes=5),
    }


def incident(
    iid: int, sid: str | None, kind: str = OVERDUE, *, opened_ago: float = 10
) -> dict[str, Any]:
    return {
        "id": iid,
        "schedule_id": sid,
        "kind": kind,
        "parent_id": None,
        "opened_at": NOW - timedelta(seconds=opened_ago),
    }


def decide(**kwargs: Any) -> Any:
    args: dict[str, Any] = {
        "now": NOW,
        "overdue": [],
        "incident_heartbeats": [],
        "overlong": [],
        "open_incidents": [],
        "watched": 10,
        "rule": RULE,
    }
    args.update(kwargs)
    return plan(**args)


def test_a_heartbeat_is_overdue_only_once_its_grace_has_passed() -> None:
    assert heartbeat_problem(beat("a", expected_ago=59, grace=60), NOW) is None
    assert heartbeat_problem(beat("a", expected_ago=60, grace=60), NOW) is None
    found = heartbeat_problem(beat("a", expected_ago=61, grace=60), NOW)
    assert found is not None and found.kind == OVERDUE


def test_an_operator_pause_or_no_expected_fire_never_pages() -> None:
    assert heartbeat_problem(beat("a", paused=True), NOW) is None
    assert heartbeat_problem({**beat("a"), "next_expected_at": None}, NOW) is None


def test_a_schedule_that_never_succeeded_is_never_ran() -> None:
    found = heartbeat_problem(beat("a", succeeded=False), NOW)
    assert found is not None and found.kind == NEVER_RAN
    assert "never ran" in found.summary


def test_the_last_error_is_part_of_an_overdue_summary() -> None:
    found = heartbeat_problem(beat("a", error="JobFailed: boom"), NOW)
    assert found is not None and "JobFailed: boom" in found.summary
    assert found.details["last_error"] == "JobFailed: boom"
    assert found.details["grace"] == "1m"


def test_an_overdue_schedule_without_an_incident_is_opened() -> None:
    result = decide(overdue=[beat("a")])
    assert [(p.schedule_id, p.kind) for p in result.open] == [("a", OVERDUE)]
    assert result.system == [] and result.resolve == []


def test_a_schedule_with_an_open_incident_is_not_opened_again() -> None:
    result = decide(
        overdue=[beat("a")], incident_heartbeats=[beat("a")], open_incidents=[incident(1, "a")]
    )
    assert result.open == [] and result.resolve == []


def test_an_open_incident_resolves_when_the_heartbeat_is_fresh_paused_or_gone() -> None:
    result = decide(
        incident_heartbeats=[beat("fresh", expected_ago=-60), beat("paused", paused=True)],
        open_incidents=[incident(1, "fresh"), incident(2, "paused"), incident(3, "deleted")],
    )
    got = {r.incident["id"]: r.resolution for r in result.resolve}
    assert got == {1: RECOVERED, 2: PAUSED, 3: SCHEDULE_DELETED}


def test_a_lease_past_its_deadline_is_running_too_long_and_wins_over_overdue() -> None:
    result = decide(overdue=[beat("a")], overlong=[lease("a")])
    assert [(p.schedule_id, p.kind) for p in result.open] == [("a", RUNNING_TOO_LONG)]
    assert result.open[0].details["over_seconds"] == 300


def test_a_running_too_long_incident_stays_open_while_the_run_goes_on() -> None:
    result = decide(
        overlong=[lease("a")],
        incident_heartbeats=[beat("a", expected_ago=-60)],
        open_incidents=[incident(1, "a", RUNNING_TOO_LONG)],
    )
    assert result.open == [] and result.resolve == []


def test_most_schedules_overdue_at_once_go_to_one_system_incident() -> None:
    beats = [beat(s) for s in ("a", "b", "c", "d", "e")]
    result = decide(overdue=beats, overlong=[lease("z")], watched=6)
    assert [p.schedule_id for p in result.system] == ["a", "b", "c", "d", "e"]
    # A run taking too long is its own page, never folded into a system incident.
    assert [p.kind for p in result.open] == [RUNNING_TOO_LONG]


def test_the_system_rule_needs_both_the_count_and_the_share() -> None:
    assert decide(overdue=[beat("a"), beat("b")], watched=2).system == []
    assert decide(overdue=[beat(s) for s in "abc"], watched=7).system == []
    assert len(decide(overdue=[beat(s) for s in "abc"], watched=6).system) == 3
    assert not SystemRule().applies(5, 0)


def test_a_schedule_overdue_long_after_the_system_incident_opened_pages_on_its_own() -> None:
    old_system = incident(9, None, SYSTEM, opened_ago=3600)
    result = decide(
        overdue=[beat("f")], open_incidents=[old_system], join_window=timedelta(seconds=30)
    )
    assert result.system == []
    assert [p.schedule_id for p in result.open] == ["f"]


def test_a_member_of_the_open_system_incident_overdue_again_rejoins_it_quietly() -> None:
    old_system = incident(9, None, SYSTEM, opened_ago=3600)
    result = decide(
        overdue=[beat("a"), beat("f")],
        open_incidents=[old_system],
        system_members={"a", "b"},
    )
    assert [p.schedule_id for p in result.system] == ["a"]
    assert [p.schedule_id for p in result.open] == ["f"]


def test_many_overdue_long_after_a_system_incident_opened_each_page_on_their_own() -> None:
    old_system = incident(9, None, SYSTEM, opened_ago=3600)
    result = decide(overdue=[beat(s) for s in "fgh"], open_incidents=[old_system], watched=4)
    assert result.system == []
    assert [p.schedule_id for p in result.open] == ["f", "g", "h"]


def test_just_after_a_system_incident_opened_newly_overdue_schedules_join_it() -> None:
    result = decide(overdue=[beat("f")], open_incidents=[incident(9, None, SYSTEM)])
    assert [p.schedule_id for p in result.system] == ["f"]
    assert result.open == []


def test_an_open_incident_whose_problem_changed_kind_is_replaced() -> None:
    # The run that took too long ended; the fires it made the schedule miss leave it overdue.
    decided = decide(
        overdue=[beat("a")],
        incident_heartbeats=[beat("a")],
        open_incidents=[incident(1, "a", RUNNING_TOO_LONG)],
    )
    [(old, problem)] = decided.replace
    assert old["id"] == 1 and problem.kind == OVERDUE
    assert decided.open == [] and decided.resolve == [] and decided.system == []


def test_an_open_incident_of_the_same_kind_is_left_alone() -> None:
    decided = decide(
        overdue=[beat("a")], incident_heartbeats=[beat("a")], open_incidents=[incident(1, "a")]
    )
    assert decided.replace == [] and decided.open == [] and decided.resolve == []
