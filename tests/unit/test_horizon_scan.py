"""The monitor's `horizon` decisions, from plain values and an explicit `now`: a local-time
schedule near the end of its compiled entries pages on its own, whatever else the pass finds."""

from __future__ import annotations

from datetime import timedelta

from cronwarden.monitor.scan import RECOVERED, horizon_problem
from cronwarden.store.incidents import HORIZON, OVERDUE
from tests.support.horizons import HORIZON_AT, LEAD, NOW, decide, row


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


def test_a_shared_horizon_pages_once_and_its_incident_resolves_once_none_is_left() -> None:
    fleet = [row(f"zoned-{i}") for i in range(3)]
    decided = decide(horizons=fleet)
    [first] = decided.open
    assert first.schedule_id == "zoned-0" and first.details["schedules_total"] == 3
    assert [p.schedule_id for p in decided.under["zoned-0"]] == ["zoned-1", "zoned-2"]
    moved = [row(f"zoned-{i}", until=HORIZON_AT + timedelta(days=365)) for i in range(3)]
    open_incidents = [
        {"id": 1, "schedule_id": "zoned-0", "kind": HORIZON, "parent_id": None, "opened_at": NOW},
        {"id": 2, "schedule_id": "zoned-1", "kind": HORIZON, "parent_id": 1, "opened_at": NOW},
    ]
    # The first re-applied alone: its incident pages for the other, which is still near.
    held = decide(
        horizons=[fleet[1]], incident_heartbeats=[moved[0], fleet[1]], open_incidents=open_incidents
    )
    assert held.resolve == [] and held.open == []
    done = decide(incident_heartbeats=moved[:2], open_incidents=open_incidents)
    assert sorted(r.incident["id"] for r in done.resolve) == [1, 2]
