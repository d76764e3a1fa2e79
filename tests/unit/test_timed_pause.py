"""The end of a timed pause as the flags give it, and how the monitor's plan judges a timed pause
it could not end."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from cronwarden.errors import InvalidInput
from cronwarden.monitor import scan
from cronwarden.schedules.timed_pause import LONGEST, pause_end

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def test_for_and_until_give_the_end_in_utc() -> None:
    assert pause_end("2h", None, now=NOW) == NOW + timedelta(hours=2)
    assert pause_end(None, "2026-03-01T15:30:00+02:00", now=NOW) == datetime(
        2026, 3, 1, 13, 30, tzinfo=UTC
    )
    assert pause_end(None, "2026-03-01T13:00:00Z", now=NOW) == NOW + timedelta(hours=1)
    assert pause_end("90d", None, now=NOW) == NOW + LONGEST
    assert pause_end(None, None, now=NOW) is None


@pytest.mark.parametrize(
    ("for_text", "until_text", "says"),
    [
        ("0s", None, "longer than zero"),
        ("-1h", None, "negative"),
        ("2", None, "no unit"),
        ("1.5h", None, "not a duration"),
        ("91d", None, "at most 90d"),
        ("1h", "2026-03-01T13:00:00Z", "not both"),
        (None, "2026-03-01T12:00:00Z", "not in the future"),
        (None, "2026-03-01T11:00:00Z", "not in the future"),
        (None, "2026-06-01T00:00:00Z", "at most 90d"),
        (None, "2026-03-01T13:00:00", "no time zone"),
        (None, "tomorrow", "not a time"),
    ],
)
def test_bad_flags_are_refused(for_text: str | None, until_text: str | None, says: str) -> None:
    with pytest.raises(InvalidInput, match=says):
        pause_end(for_text, until_text, now=NOW)


def paused_beat(sid: str, *, error: str | None) -> dict[str, Any]:
    return {
        "schedule_id": sid,
        "next_expected_at": NOW - timedelta(days=1),
        "grace": timedelta(minutes=1),
        "last_success_at": NOW - timedelta(days=2),
        "last_error": None,
        "paused": True,
        "paused_until": NOW - timedelta(minutes=5),
        "unpause_error": error,
        "unpause_failed_at": NOW - timedelta(minutes=4) if error else None,
    }


def test_a_timed_pause_the_monitor_could_not_end_pages_on_its_own() -> None:
    failing = paused_beat("a", error="RPCError: unavailable")
    decided = scan.plan(
        now=NOW,
        overdue=[],
        incident_heartbeats=[],
        overlong=[],
        open_incidents=[],
        watched=0,
        rule=scan.SystemRule(min_schedules=1, ratio=0.0),
        unpause_failures=[failing],
    )
    [problem] = decided.open
    assert (problem.schedule_id, problem.kind) == ("a", "unpause-failed")
    assert "schedules unpause a" in problem.summary and "unavailable" in problem.summary
    assert decided.system == []


def test_the_unpause_failed_incident_resolves_once_the_schedule_runs_again() -> None:
    incident = {"id": 7, "schedule_id": "a", "kind": "unpause-failed", "parent_id": None}
    still = scan.plan(
        now=NOW,
        overdue=[],
        incident_heartbeats=[paused_beat("a", error="x")],
        overlong=[],
        open_incidents=[incident],
        watched=0,
        rule=scan.SystemRule(),
        unpause_failures=[paused_beat("a", error="x")],
    )
    assert (still.open, still.resolve, still.replace) == ([], [], [])
    unpaused = paused_beat("a", error=None) | {
        "paused": False,
        "paused_until": None,
        "next_expected_at": NOW + timedelta(minutes=30),
    }
    done = scan.plan(
        now=NOW,
        overdue=[],
        incident_heartbeats=[unpaused],
        overlong=[],
        open_incidents=[incident],
        watched=1,
        rule=scan.SystemRule(),
    )
    assert [(r.incident["id"], r.resolution) for r in done.resolve] == [(7, scan.RECOVERED)]
