"""The status page's causes of missing slots: kept by schedule and slot, judged again only
while they name a run still open, "cause pending" until known; the sentence and the command on a
schedule's own page, a short label on the overview, which stays under 1 MB."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from html import unescape

from cronwarden.monitor import timeline
from cronwarden.monitor.grids import GridCache, SlotCause
from cronwarden.monitor.page import TemporalLinks, render
from cronwarden.monitor.status_view import (
    INCIDENT,
    PageLimits,
    Ranking,
    ScheduleStatus,
    StatusView,
)

NOW = datetime(2026, 12, 3, 12, 0, tzinfo=UTC)
T1, T2 = NOW - timedelta(minutes=2), NOW - timedelta(minutes=1)
OVERLAP = SlotCause(
    "skipped-overlap",
    "skipped by Temporal's overlap policy (skip) behind run s@2026-12-03T11:57:00Z",
    "cronwarden backfill run s --start 2026-12-03T11:58:00Z --end 2026-12-03T11:58:00Z",
    settled=True,
)
WAITING = SlotCause("no-worker-polling", "no worker polls the task queue 'q'", None, settled=False)
LINKS = TemporalLinks("http://temporal-web.example.internal:8233", "production")


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_missing_slots_without_a_cause_wake_the_refresher_and_are_due() -> None:
    cache = GridCache()
    cache.want([("s", "d1")])
    cache._wake.clear()
    cache.want_causes("s", [T1, T2])
    assert cache._wake.is_set()
    assert cache.causes_due("s") == [T1, T2]


def test_a_settled_cause_is_kept_and_one_naming_an_open_run_is_judged_again() -> None:
    cache = GridCache()
    cache.want([("s", "d1")])
    cache.want_causes("s", [T1, T2])
    cache.put_causes("s", {T1: WAITING, T2: OVERLAP})
    assert cache.causes("s") == {T1: WAITING, T2: OVERLAP}
    assert cache.causes_due("s") == [T1]
    cache._wake.clear()
    cache.want_causes("s", [T2])
    assert not cache._wake.is_set()  # nothing new to judge


def test_causes_go_with_the_slots_no_page_shows_missing_and_with_a_new_definition() -> None:
    clock = Clock()
    cache = GridCache(clock=clock)
    cache.want([("s", "d1")])
    cache.want_causes("s", [T1, T2])
    cache.put_causes("s", {T1: OVERLAP, T2: OVERLAP})
    clock.now += cache.policy.wanted_for + 1
    cache.want_causes("s", [T2])  # T1 was replayed meanwhile: no page shows it missing
    assert cache.causes("s") == {T2: OVERLAP}
    cache.want([("s", "d2")])
    assert cache.causes("s") == {} and cache.causes_due("s") == []


def status(schedule_id: str, slots: int, causes: dict[datetime, SlotCause]) -> ScheduleStatus:
    fires = [NOW - timedelta(minutes=m) for m in range(slots, 0, -1)]
    return ScheduleStatus(
        schedule_id=schedule_id,
        health=INCIDENT,
        last_success_at=NOW,
        next_expected_at=NOW,
        grace=timedelta(minutes=15),
        paused=False,
        paused_reason=None,
        last_error=None,
        incident={"kind": "overdue", "opened_at": NOW, "summary": "s"},
        slots=[
            timeline.Slot(t, f"{schedule_id}@{t:%Y-%m-%dT%H:%M:%SZ}", timeline.MISSING)
            for t in fires
        ],
        grid_known=True,
        causes={t: c for t, c in causes.items() if t in fires},
    )


def test_a_schedules_page_shows_the_sentence_and_command_beside_the_slot_or_pending() -> None:
    s = status("s", 2, {T1: OVERLAP})
    view = StatusView(Ranking(now=NOW, schedules=[s], system_incidents=[], counts={}), [s])
    html = unescape(render("schedule.html", links=LINKS, view=view, s=s, root="../").decode())
    assert OVERLAP.text in html
    assert f'<code class="next-command">{OVERLAP.next_command}</code>' in html
    assert html.count("cause pending") >= 1  # T2: not judged yet


def test_a_full_overview_of_missing_slots_with_causes_shows_labels_and_stays_under_a_mb() -> None:
    limits = PageLimits()
    fires = [NOW - timedelta(minutes=m) for m in range(limits.slots, 0, -1)]
    longest = SlotCause("no-worker-with-job", "w" * 10_000, "c" * 10_000, settled=True)
    shown = [
        status(f"{i:04d}-" + "x" * 58, limits.slots, dict.fromkeys(fires, longest))
        for i in range(limits.page_size)
    ]
    ranking = Ranking(now=NOW, schedules=shown, system_incidents=[], counts={INCIDENT: 100})
    view = StatusView(ranking, shown)
    body = render("overview.html", links=LINKS, view=view, root="./")
    assert body.count(b"(no-worker-with-job)") == limits.page_size * limits.slots
    assert b"w" * 100 not in body and b"c" * 100 not in body  # sentence and command: own page
    assert len(body) < 1_000_000, f"{len(body):,} bytes"


def test_a_schedules_page_repeats_what_its_incidents_page_said_to_do() -> None:
    s = status("s", 2, {})
    s.incident = {
        "kind": "overdue",
        "opened_at": NOW,
        "summary": "schedule s is overdue",
        "details": {"cause": WAITING.text, "next_command": OVERLAP.next_command},
    }
    view = StatusView(Ranking(now=NOW, schedules=[s], system_incidents=[], counts={}), [s])
    html = unescape(render("schedule.html", links=LINKS, view=view, s=s, root="../").decode())
    assert f"Likely cause, as paged: {WAITING.text}" in html
    assert f'id="incident-command">{OVERLAP.next_command}</code>' in html
