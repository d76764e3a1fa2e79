"""Health, pause attribution and status rows, with explicit `now`."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from cronwarden.schedules.health import (
    FAILURE,
    LATE,
    OK,
    OPERATOR,
    OPERATOR_NOT_IN_TEMPORAL,
    OVERDUE,
    PAUSED,
    RUNNING,
    UNTRACKED,
    derive_health,
    format_age,
    paused_by,
)
from cronwarden.schedules.status import build_rows, pause_text, success_text

NOW = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)
GRACE = timedelta(minutes=5)


def health(next_expected_at: datetime | None, *, operator_paused: bool = False) -> str:
    return derive_health(
        now=NOW,
        tracked=True,
        operator_paused=operator_paused,
        next_expected_at=next_expected_at,
        grace=GRACE,
    )


@pytest.mark.parametrize(
    ("next_expected", "expected"),
    [
        (NOW + timedelta(seconds=1), OK),
        (NOW, OK),
        (NOW - timedelta(seconds=1), LATE),
        (NOW - GRACE, LATE),
        (NOW - GRACE - timedelta(seconds=1), OVERDUE),
        (NOW - timedelta(days=3), OVERDUE),
    ],
)
def test_health_is_ok_until_the_expected_fire_late_within_grace_then_overdue(
    next_expected: datetime, expected: str
) -> None:
    assert health(next_expected) == expected


@pytest.mark.parametrize(
    ("next_expected", "expected"),
    [(NOW - timedelta(seconds=1), RUNNING), (NOW - GRACE - timedelta(seconds=1), OVERDUE)],
)
def test_a_run_in_progress_within_the_grace_is_running_not_late(
    next_expected: datetime, expected: str
) -> None:
    found = derive_health(
        now=NOW,
        tracked=True,
        operator_paused=False,
        next_expected_at=next_expected,
        grace=GRACE,
        running=True,
    )
    assert found == expected


def test_an_operator_pause_silences_even_an_overdue_schedule() -> None:
    assert health(NOW - timedelta(days=1), operator_paused=True) == PAUSED


def test_no_expected_fire_is_nothing_to_be_late_for() -> None:
    assert health(None) == OK


def test_a_schedule_without_a_heartbeat_row_is_untracked() -> None:
    got = derive_health(
        now=NOW, tracked=False, operator_paused=False, next_expected_at=None, grace=GRACE
    )
    assert got == UNTRACKED


def test_a_pause_is_an_operators_only_when_the_heartbeat_row_says_so() -> None:
    assert paused_by(temporal_paused=True, operator_paused=True) == OPERATOR
    # pause_on_failure, a worker missing the job, or a pause from Temporal's UI: the monitor
    # still pages, so status must not present it as a deliberate pause.
    assert paused_by(temporal_paused=True, operator_paused=False) == FAILURE
    assert paused_by(temporal_paused=False, operator_paused=False) is None


def test_a_recorded_pause_without_temporals_pause_is_flagged_not_trusted() -> None:
    # Unpaused in Temporal's UI, or an unpause that failed halfway.
    assert paused_by(temporal_paused=False, operator_paused=True) == OPERATOR_NOT_IN_TEMPORAL


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (0, "0s"),
        (42, "42s"),
        (60, "1m"),
        (310, "5m10s"),
        (3600 * 3 + 60 * 12 + 5, "3h12m"),
        (86_400 * 2 + 3600 * 4 + 7, "2d4h"),
        (86_400, "1d"),
        (-5, "0s"),
    ],
)
def test_ages_show_their_two_largest_units(seconds: int, text: str) -> None:
    assert format_age(timedelta(seconds=seconds)) == text


def beat(schedule_id: str, **fields: Any) -> dict[str, Any]:
    row: dict[str, Any] = {
        "schedule_id": schedule_id,
        "last_logical_key": None,
        "last_fire_time": None,
        "last_success_at": None,
        "next_expected_at": None,
        "grace": GRACE,
        "paused": False,
        "paused_reason": None,
        "last_error": None,
    }
    row.update(fields)
    return row


def test_a_heartbeat_whose_schedule_is_gone_is_listed_and_still_judged() -> None:
    rows = build_rows(
        [],
        {
            "gone": beat(
                "gone",
                last_logical_key="gone@2026-03-01T11:00:00Z",
                last_success_at=NOW - timedelta(hours=1),
                next_expected_at=NOW - timedelta(minutes=30),
            )
        },
        now=NOW,
    )
    (row,) = rows
    assert row.in_temporal is False
    assert row.health == OVERDUE
    assert success_text(row) == "gone@2026-03-01T11:00:00Z (1h ago)"
    data = row.as_json()
    assert data["last_success"] == {
        "logical_key": "gone@2026-03-01T11:00:00Z",
        "at": "2026-03-01T11:00:00Z",
        "age_seconds": 3600,
    }
    assert data["next_expected_at"] == "2026-03-01T11:30:00Z"


def test_an_operator_pause_row_reads_operator_with_its_reason() -> None:
    (row,) = build_rows([], {"p": beat("p", paused=True, paused_reason="migration")}, now=NOW)
    assert row.health == PAUSED
    assert pause_text(row) == "operator: migration"
    assert success_text(row) == "never"


def test_an_orphan_pause_reads_failure_with_the_missing_job() -> None:
    note = "paused by cronwarden: job 'export' is not registered on worker 7@host"
    (row,) = build_rows([], {"o": beat("o")}, now=NOW)
    row.paused, row.paused_by, row.pause_note, row.orphaned = True, FAILURE, note, True
    assert pause_text(row) == "failure: job 'export' is not registered on worker 7@host"
    # pause_on_failure or an operator may have replaced the worker's note since.
    row.pause_note = "paused due to workflow failure (unknown job 'export')"
    assert pause_text(row).startswith("failure, job not registered: paused due to")
