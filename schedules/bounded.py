"""Many Temporal round trips at once, never more than a bound in flight."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar

A = TypeVar("A")
T = TypeVar("T")


async def map_bounded(
    func: Callable[[A], Awaitable[T]], items: Sequence[A], *, limit: int
) -> list[T]:
    """`[await func(i) for i in items]`, with up to `limit` calls in flight.

    Every call runs to its end before anything is raised, and the error raised is the one of the
    first failing item in `items`' order: the same error a one-by-one loop would have stopped on,
    whichever call happened to fail first in time. A namespace with thousands of schedules must
    not open thousands of RPCs at once, hence the bound.
    """
    gate = asyncio.Semaphore(limit)

    async def one(item: A) -> T:
        async with gate:
            return await func(item)

    done: list[T] = []
    for result in await asyncio.gather(*(one(i) for i in items), return_exceptions=True):
        if isinstance(result, BaseException):
            raise result
        done.append(result)
    return done
