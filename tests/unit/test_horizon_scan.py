"""The monitor's `horizon` decisions, from plain values and an explicit `now`: a local-time
schedule near the end of its compiled entries pages on its own, whatever else the pass finds."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from cronwarden.monitor.scan import RECOVERED, SystemRule, horizon_problem, plan
from cronwarden.store.incidents import HORIZON, OVERDUE

NOW = datetime(2028, 12, 22, 12, 0, tzinfo=UTC)
HORIZON_AT = datetime(2029, 1, 1, tzinfo=UTC)
LEAD = timedelta(days=30)


def row(sid: str, *, until: datetime | None = HORIZON_AT, late: bool = False) -> dict[str, Any]:
    return {
        "schedule_id": sid,
        "next_expected_at": NOW - timedelta(hours=1) if late else NOW + timedelta(hours=1),
        "grace": timedelta(minutes=1),
        "last_success_at": NOW - timedelta(hours=2),
        "last_error": None,
        "paused": False,
        "compiled_until": until,
    }


def decide(**kw: Any) -> Any:
    values: dict[str, Any] = {
        "now": NOW,
        "overdue": [],
        "incident_heartbeats": [],
        "overlong": [],
        "open_incidents": [],
        "watched": 10,
        "rule": SystemRule(min_schedules=3, ratio=0.2),
        "horizon_lead": LEAD,
    }
    values.update(kw)
    return plan(**values)


def test_the_lead_decides_and_a_utc_schedule_never_has_a_horizon() -> None:
    assert horizon_problem(row("a", until=None), NOW, LEAD) is None
    assert horizon_problem(row("a", until=NOW + LEAD + timedelta(seconds=1)), NOW, LEAD) is None
    found = horizon_problem(row("a"), NOW, LEAD)
    assert found is not None and found.kind == HORIZON and not found.late
    assert "local-time entries end at 2029-01-01T00:00:00Z, in 10 day(s)" in found.summary


def test_a_horizon_pages_on_its_own_even_while_a_fleet_outage_opens() -> None:
    overdue = [row(f"late-{i}", late=True) for i in range(3)]
    decided = decide(overdue=overdue, horizons=[row("zoned")])
    assert [p.schedule_id for p in decided.system] == [f"late-{i}" for i in range(3)]
    assert [(p.schedule_id, p.kind) for p in decided.open] == [("zoned", HORIZON)]


def test_an_overdue_row_pages_as_overdue_even_near_its_horizon() -> None:
    late = row("zoned", late=True)
    decided = decide(overdue=[late], horizons=[late])
    assert [(p.schedule_id, p.kind) for p in decided.open] == [("zoned", OVERDUE)]


def test_a_horizon_moved_out_resolves_and_one_still_near_does_not() -> None:
    moved = row("moved", until=HORIZON_AT + timedelta(days=365))
    near = row("near")
    open_incidents = [
        {"id": 1, "schedule_id": "moved", "kind": HORIZON, "parent_id": None, "opened_at": NOW},
        {"id": 2, "schedule_id": "near", "kind": HORIZON, "parent_id": None, "opened_at": NOW},
    ]
    decided = decide(
        horizons=[near], incident_heartbeats=[moved, near], open_incidents=open_incidents
    )
    assert [(r.incident["id"], r.resolution) for r in decided.resolve] == [(1, RECOVERED)]
    assert decided.open == [] and decided.replace == []
