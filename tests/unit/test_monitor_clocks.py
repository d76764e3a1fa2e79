"""The monitor's own intervals run on the clock injected where the code reads it (the monotonic
one by default): a wall clock stepped a day back or forth between two readings changes none of
them. Rows' ages stay on Postgres' clock (store/retention.py, the passes' snapshot)."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from structlog.testing import capture_logs
from temporalio.client import Client

from cronwarden.embedded import free_port
from cronwarden.monitor import db_alert
from cronwarden.monitor.pauses import PauseCheck, PauseCheckPolicy
from cronwarden.monitor.process import Pruning
from cronwarden.store.retention import RetentionPolicy

DAY = 86400.0


class Clocks:
    """A monotonic clock the test moves, and a wall clock that jumps on every reading."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.monotonic = 1000.0
        self._jumps: Iterator[float] = iter([DAY, -2 * DAY, 3 * DAY, -4 * DAY] * 100)
        self._wall = time.time()
        real_time = time.time

        def jumping_wall() -> float:
            self._wall += next(self._jumps)
            return self._wall

        monkeypatch.setattr(time, "time", jumping_wall)
        self.real_time = real_time

    def read(self) -> float:
        return self.monotonic


@pytest.fixture
def clocks(monkeypatch: pytest.MonkeyPatch) -> Clocks:
    return Clocks(monkeypatch)


async def test_temporal_is_asked_again_after_reconnect_every_whatever_the_wall_clock_does(
    clocks: Clocks,
) -> None:
    attempts = 0

    async def refused() -> Client:
        nonlocal attempts
        attempts += 1
        raise OSError("connection refused")

    check = PauseCheck(refused, PauseCheckPolicy(reconnect_every=30), clock=clocks.read)
    assert await check.client_or_none() is None and attempts == 1
    for _ in range(5):  # the wall clock jumps days on each reading meanwhile
        clocks.monotonic += 5
        assert await check.client_or_none() is None
    assert attempts == 1, "a wall clock jump cut the back-off short"
    clocks.monotonic += 5.1
    assert await check.client_or_none() is None
    assert attempts == 2, "the back-off outlived its interval"


async def test_the_unverified_pause_warning_repeats_on_its_interval_only(clocks: Clocks) -> None:
    async def refused() -> Client:
        raise OSError("connection refused")

    check = PauseCheck(
        refused, PauseCheckPolicy(reconnect_every=0, warn_every=600), clock=clocks.read
    )
    rows = [{"schedule_id": "paused-one"}]

    async def warnings_after(seconds: float) -> int:
        clocks.monotonic += seconds
        with capture_logs() as logged:
            await check.lifts(rows)
        return sum(e["event"] == "monitor.pauses-unverified" for e in logged)

    assert await warnings_after(0) == 1
    assert [await warnings_after(100) for _ in range(5)] == [0] * 5
    assert await warnings_after(100) == 1


async def test_the_pruning_timer_follows_the_injected_clock(clocks: Clocks) -> None:
    nowhere = f"postgresql://app@127.0.0.1:{free_port()}/db"  # nothing listens: refused at once
    pruning = Pruning(nowhere, RetentionPolicy(), timeout=5, every=300, clock=clocks.read)
    assert pruning.due()
    assert await pruning.maybe_prune() is None  # failed: waits for its next turn
    for _ in range(4):
        clocks.monotonic += 50
        time.time()  # a day back or forth each time
        assert not pruning.due()
    clocks.monotonic += 100
    assert pruning.due()


def test_a_clock_that_went_back_pages_instead_of_silencing_the_alert() -> None:
    # The last page at 1,000; the clock now reads 400 (a reboot reset the monotonic clock, or
    # a wall clock was stepped back ten minutes): before, the alert stayed quiet until 1,900.
    opened = db_alert.AlertState(open=True, last_trigger_at=1000.0, failures=1)
    state, paged = db_alert.on_failure(opened, now=400.0, every=900)
    assert paged and state.last_trigger_at == 400.0
    # And from there on it counts from the new reading.
    assert not db_alert.on_failure(state, now=500.0, every=900)[1]


def test_the_alert_clock_is_monotonic(clocks: Clocks) -> None:
    before = db_alert.clock()
    time.time()  # jumps a day
    assert 0 <= db_alert.clock() - before < 60
