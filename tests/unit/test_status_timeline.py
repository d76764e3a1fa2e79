"""The status page's slots: what each expected fire time became, from plain values."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from cronwarden.activities.contract import logical_key
from cronwarden.monitor import timeline
from cronwarden.monitor.timeline import LeaseSkip, Record, settle_time, slots

SID = "nightly"
T0 = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
STEP = timedelta(minutes=1)


def at(i: int) -> datetime:
    return T0 + i * STEP


def record(i: int, *, replay: bool = False, workflow_id: str | None = None) -> Record:
    return Record(
        fire_time=at(i),
        committed_at=at(i) + timedelta(seconds=1),
        worker="w1",
        attempt=1,
        workflow_id=workflow_id,
        run_id="r",
        replay=replay,
    )


def states(found: list[timeline.Slot]) -> list[str]:
    return [s.state for s in found]


def test_each_expected_fire_is_committed_replayed_running_skipped_due_or_missing() -> None:
    found = slots(
        SID,
        expected=[at(i) for i in range(7)],
        records=[record(0), record(1, replay=True)],
        running={at(2)},
        lease_skip=LeaseSkip(logical_key(SID, at(3)), "worker-7"),
        now=at(6) + timedelta(seconds=30),
        settle=timedelta(minutes=1),
        limit=10,
    )
    assert states(found) == [
        "committed",
        "replayed",
        "running",
        "skipped",
        "missing",
        "missing",
        "due",
    ]
    assert found[3].note == "the lease was held (held by worker-7)"
    assert [s.logical_key for s in found] == [logical_key(SID, at(i)) for i in range(7)]


def test_a_slot_turns_missing_once_its_settling_time_is_over() -> None:
    def state_after(seconds: int) -> list[str]:
        found = slots(
            SID,
            expected=[at(0)],
            records=[],
            running=set(),
            lease_skip=None,
            now=at(0) + timedelta(seconds=seconds),
            settle=timedelta(seconds=20),
            limit=5,
        )
        return states(found)

    assert state_after(19) == ["due"]
    assert state_after(20) == ["missing"]


def test_future_fire_times_are_not_slots_yet() -> None:
    found = slots(
        SID,
        expected=[at(0), at(1), at(2)],
        records=[record(0)],
        running=set(),
        lease_skip=None,
        now=at(1),
        settle=timedelta(0),
        limit=5,
    )
    assert [s.fire_time for s in found] == [at(0), at(1)]


def test_a_record_off_the_grid_shows_where_it_falls_but_only_inside_the_grid_span() -> None:
    manual = T0 + timedelta(seconds=90)  # between two expected fires: a manual trigger
    old = T0 - timedelta(days=3)  # before the span the timeline covers
    found = slots(
        SID,
        expected=[at(0), at(1), at(2)],
        records=[
            record(0),
            record(2),
            Record(manual, manual, "w", 1, None, None, False),
            Record(old, old, "w", 1, None, None, False),
        ],
        running=set(),
        lease_skip=None,
        now=at(3),
        settle=timedelta(0),
        limit=10,
    )
    assert states(found) == ["committed", "missing", "off-grid", "committed"]
    assert found[2].fire_time == manual


def test_only_the_last_slots_are_kept() -> None:
    found = slots(
        SID,
        expected=[at(i) for i in range(100)],
        records=[record(i) for i in range(100)],
        running=set(),
        lease_skip=None,
        now=at(100),
        settle=timedelta(0),
        limit=30,
    )
    assert len(found) == 30 and found[0].fire_time == at(70) and found[-1].fire_time == at(99)


def test_without_temporal_the_records_and_running_fires_show_and_nothing_is_called_missing() -> (
    None
):
    found = slots(
        SID,
        expected=None,
        records=[record(0), record(4, replay=True)],
        running={at(5)},
        lease_skip=LeaseSkip(logical_key(SID, at(2)), None),
        now=at(6),
        settle=timedelta(0),
        limit=10,
    )
    assert states(found) == ["committed", "replayed", "running"]


def test_settling_never_outlasts_the_grace_nor_a_minute() -> None:
    assert settle_time(timedelta(seconds=5)) == timedelta(seconds=5)
    assert settle_time(timedelta(minutes=15)) == timedelta(minutes=1)


def test_a_buffered_start_behind_a_running_fire_is_due_not_missing() -> None:
    found = slots(
        SID,
        expected=[at(i) for i in range(5)],
        records=[record(0)],
        running={at(1)},
        lease_skip=None,
        now=at(10),
        settle=timedelta(0),
        limit=10,
        buffered=1,
    )
    assert states(found) == ["committed", "running", "due", "missing", "missing"]
    assert found[2].note == "buffered behind the running fire"
