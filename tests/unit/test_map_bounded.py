"""`map_bounded`: results in order, a bound on calls in flight, and the error a one-by-one loop
would have stopped on."""

from __future__ import annotations

import asyncio

import pytest

from cronwarden.schedules.bounded import map_bounded


async def test_results_keep_the_items_order_and_never_exceed_the_bound() -> None:
    in_flight, most = 0, 0

    async def slow_double(n: int) -> int:
        nonlocal in_flight, most
        in_flight += 1
        most = max(most, in_flight)
        # Later items finish first: the order of the results must not follow completion.
        await asyncio.sleep((20 - n) / 2000)
        in_flight -= 1
        return n * 2

    assert await map_bounded(slow_double, list(range(20)), limit=4) == [n * 2 for n in range(20)]
    assert most == 4


async def test_the_error_raised_is_the_first_failing_items_in_order_among_calls_in_flight() -> None:
    ran: list[int] = []

    async def check(n: int) -> int:
        # All ten are in flight at once. Item 3 fails last in time, item 8 first: item 3's
        # error is the one raised, and the calls already running still finish.
        await asyncio.sleep(0.02 if n == 3 else 0)
        ran.append(n)
        if n in (3, 8):
            raise ValueError(f"item {n}")
        return n

    with pytest.raises(ValueError, match="item 3"):
        await map_bounded(check, list(range(10)), limit=10)
    assert sorted(ran) == list(range(10))


async def test_no_call_starts_after_one_failed() -> None:
    started: list[int] = []

    async def check(n: int) -> int:
        started.append(n)
        if n == 1:
            raise ValueError(f"item {n}")
        await asyncio.sleep(0.01)
        return n

    # Items 0 and 1 take the two places; item 1 fails while items 2.. wait for a place: none
    # of them is ever called (with the server unreachable, each would wait out its timeout).
    with pytest.raises(ValueError, match="item 1"):
        await map_bounded(check, list(range(10)), limit=2)
    assert started == [0, 1]
