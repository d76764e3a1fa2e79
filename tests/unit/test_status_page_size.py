"""The overview's size is bounded whatever the fleet: a full page of the longest ids, every slot
linked, every text at its longest, stays under 1 MB."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from cronwarden.monitor import timeline
from cronwarden.monitor.page import TemporalLinks, render
from cronwarden.monitor.status_view import (
    INCIDENT,
    PageLimits,
    Ranking,
    ScheduleStatus,
    StatusView,
)

NOW = datetime(2026, 12, 3, 12, 0, tzinfo=UTC)
LIMIT = 1_000_000


def longest_status(i: int, slots: int) -> ScheduleStatus:
    schedule_id = f"{i:04d}-" + "x" * 58  # 63 characters: the longest id a schedule can have
    fires = [NOW - timedelta(seconds=s) for s in range(slots, 0, -1)]
    records = [
        timeline.Slot(
            t,
            f"{schedule_id}@{t:%Y-%m-%dT%H:%M:%SZ}",
            timeline.OFF_GRID,
            record=timeline.Record(
                t,
                t,
                "worker-" + "w" * 50,
                1,
                f"{schedule_id}-{t:%Y-%m-%dT%H:%M:%SZ}",
                "01234567-89ab-cdef-0123-456789abcdef",
                False,
            ),
            note="not on the current spec's grid",
        )
        for t in fires
    ]
    return ScheduleStatus(
        schedule_id=schedule_id,
        health=INCIDENT,
        last_success_at=NOW,
        next_expected_at=NOW,
        grace=timedelta(minutes=15),
        paused=True,
        paused_reason="r" * 100_000,
        last_error="e" * 100_000,
        incident={"kind": "overdue", "opened_at": NOW, "summary": "s" * 400_000},
        slots=records,
        grid_known=True,
        note="n" * 10,
    )


def test_a_full_overview_page_of_the_longest_everything_stays_under_a_megabyte() -> None:
    limits = PageLimits()
    shown = [longest_status(i, limits.slots) for i in range(limits.page_size)]
    ranking = Ranking(
        now=NOW,
        schedules=shown * 100,
        system_incidents=[{"opened_at": NOW, "summary": "every-id, " * 40_000}],
        counts={INCIDENT: 10_000},
    )
    view = StatusView(ranking, shown, "Temporal is unreachable", NOW, page=1, pages=100)
    links = TemporalLinks("http://temporal-web.example.internal:8233", "production-" + "n" * 40)
    body = render("overview.html", links=links, view=view, root="./")
    assert body.count(b"data-key=") == limits.page_size * limits.slots
    assert len(body) < LIMIT, f"{len(body):,} bytes"
