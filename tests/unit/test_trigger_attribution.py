"""Which recent run a trigger started, and how long a trigger waits to avoid its second being
taken: pure functions of Temporal's timestamps."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from cronwarden.schedules.inventory import RecentRun
from cronwarden.schedules.operations import same_second_wait, triggered_run

T = datetime(2026, 3, 1, 12, 0, 7, 400_000, tzinfo=UTC)
SECOND = T.replace(microsecond=0)


def run(workflow_id: str, scheduled_at: datetime) -> RecentRun:
    return RecentRun(
        scheduled_at=scheduled_at, started_at=scheduled_at, workflow_id=workflow_id, run_id="r"
    )


def pick(
    runs: list[RecentRun],
    *,
    known: frozenset[str] = frozenset(),
    grid: frozenset[datetime] = frozenset(),
) -> RecentRun | None:
    return triggered_run(
        runs, known=set(known), grid=set(grid), earliest=T, latest=T + timedelta(seconds=2)
    )


def test_the_triggered_run_is_the_new_one_in_the_trigger_seconds() -> None:
    ours = run("s-ours", SECOND)
    assert (
        pick([run("s-old", SECOND - timedelta(minutes=1)), ours], known=frozenset({"s-old"}))
        == ours
    )


def test_a_scheduled_fire_landing_while_waiting_is_not_the_trigger() -> None:
    fire = SECOND + timedelta(seconds=1)
    assert pick([run("s-fire", fire)], grid=frozenset({fire})) is None
    ours = run("s-ours", SECOND)
    assert pick([run("s-fire", fire), ours], grid=frozenset({fire})) == ours


def test_a_new_run_outside_the_trigger_window_is_not_the_trigger() -> None:
    # A buffered fire that started late, or a run started by someone else earlier.
    assert pick([run("s-late", SECOND - timedelta(seconds=30))]) is None
    assert pick([run("s-later", SECOND + timedelta(seconds=30))]) is None


def test_a_trigger_waits_until_the_servers_clock_is_past_the_newest_runs_second() -> None:
    newest = SECOND
    # The server had reached newest + 0.3 s when described: 0.7 s of that second remain.
    assert abs(same_second_wait(newest, newest + timedelta(seconds=0.3)) - 0.75) < 1e-9
    # Already past it on the server's clock, whatever the local clock says.
    assert same_second_wait(newest, newest + timedelta(seconds=1)) == 0.0
    assert same_second_wait(None, T) == 0.0
