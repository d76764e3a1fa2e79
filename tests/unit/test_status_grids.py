"""The status page's cache of Temporal's grids and its shared reads: pure logic, no servers."""

from __future__ import annotations

import asyncio
from array import array
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest

from cronwarden.monitor.grids import PENDING_NOTE, Grid, GridCache, Live, RefreshPolicy
from cronwarden.monitor.shared_read import SharedRead

T0 = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def minutely(start: datetime, count: int) -> array[int]:
    first = int(start.timestamp())
    return array("q", (first + 60 * i for i in range(count)))


def test_a_schedule_no_page_asked_for_yet_is_pending_and_wanting_it_wakes_the_refresher() -> None:
    cache = GridCache()
    assert cache.lookup("a", "d1", now=T0, n=5).note == PENDING_NOTE
    cache.want([("a", "d1")])
    assert cache._wake.is_set()
    assert cache.due(now=T0) == [("a", "d1")]


def test_a_grid_serves_its_digest_until_its_window_runs_out() -> None:
    cache = GridCache()
    cache.want([("a", "d1")])
    until = T0 + timedelta(minutes=10)
    cache.put("a", grid=Grid("d1", minutely(T0 - timedelta(minutes=9), 20), until))
    found = cache.lookup("a", "d1", now=T0 + timedelta(seconds=30), n=3)
    assert found.expected == [T0 - timedelta(minutes=2), T0 - timedelta(minutes=1), T0]
    # Another definition (applied since): pending until the grid of that digest is read.
    assert cache.lookup("a", "d2", now=T0, n=3).expected is None
    # Past the window the grid covers, nothing is known about the new slots.
    assert cache.lookup("a", "d1", now=until + timedelta(seconds=1), n=3).expected is None


def test_a_grid_of_a_digest_replaced_meanwhile_is_not_kept() -> None:
    cache = GridCache()
    cache.want([("a", "d1")])
    cache.want([("a", "d2")])  # applied again while the round read d1's grid
    cache.put("a", grid=Grid("d1", minutely(T0, 3), T0 + timedelta(minutes=10)))
    assert cache.lookup("a", "d2", now=T0, n=3).note == PENDING_NOTE
    assert cache.needs_grid("a", "d2", now=T0)


def test_rounds_take_the_schedules_without_a_grid_first() -> None:
    clock = Clock()
    cache = GridCache(clock=clock)
    cache.want([("old", "d"), ("new", "d")])
    cache.put("old", grid=Grid("d", minutely(T0, 3), T0 + timedelta(hours=1)))
    assert [sid for sid, _ in cache.due(now=T0)] == ["new", "old"]
    # No page asked for either lately: nothing to refresh.
    clock.now += RefreshPolicy().wanted_for + 1
    assert cache.due(now=T0) == []


def test_runs_in_flight_are_forgotten_once_they_are_old() -> None:
    clock = Clock()
    cache = GridCache(clock=clock)
    cache.want([("a", "d")])
    cache.put("a", live=Live(frozenset({T0}), 1, clock.now))
    assert cache.running("a") == {T0}
    clock.now += 3 * RefreshPolicy().period + 1
    assert cache.running("a") == frozenset()
    assert cache.lookup("a", "d", now=T0, n=3).buffered == 0


def test_the_cache_keeps_at_most_its_bound_dropping_the_least_recently_shown() -> None:
    cache = GridCache(RefreshPolicy(max_schedules=2))
    cache.want([("a", None), ("b", None)])
    cache.want([("a", None)])
    cache.want([("c", None)])
    assert len(cache) == 2 and [sid for sid, _ in cache.due(now=T0)] == ["a", "c"]


async def test_concurrent_callers_share_one_computation_and_reuse_it_while_fresh() -> None:
    clock = Clock()
    shared: SharedRead[str, int] = SharedRead(fresh_for=5, max_keys=4, clock=clock)
    release = asyncio.Event()
    calls = 0

    async def compute() -> int:
        nonlocal calls
        calls += 1
        await release.wait()
        return calls

    waiters = [asyncio.create_task(shared.get("k", compute)) for _ in range(40)]
    await asyncio.sleep(0)
    release.set()
    assert await asyncio.gather(*waiters) == [1] * 40
    assert await shared.get("k", compute) == 1
    clock.now += 5
    assert await shared.get("k", compute) == 2
    assert shared.computations == 2


async def test_a_caller_that_goes_away_does_not_cancel_the_read_others_wait_for() -> None:
    shared: SharedRead[str, str] = SharedRead(fresh_for=5, max_keys=4)
    release = asyncio.Event()

    async def compute() -> str:
        await release.wait()
        return "done"

    leaving = asyncio.create_task(shared.get("k", compute))
    staying = asyncio.create_task(shared.get("k", compute))
    await asyncio.sleep(0)
    leaving.cancel()
    release.set()
    assert await staying == "done"
    with pytest.raises(asyncio.CancelledError):
        await leaving


async def test_a_failed_read_is_not_kept() -> None:
    shared: SharedRead[str, int] = SharedRead(fresh_for=5, max_keys=4)
    outcomes: Iterator[Exception | int] = iter([ValueError("down"), 7])

    async def compute() -> int:
        outcome = next(outcomes)
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    with pytest.raises(ValueError):
        await shared.get("k", compute)
    assert await shared.get("k", compute) == 7
