"""Many Temporal round trips at once, never more than a bound in flight."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar

A = TypeVar("A")
T = TypeVar("T")


class _NotStarted:
    """What a call not yet started when another failed returns instead of being made."""


_NOT_STARTED = _NotStarted()


async def map_bounded(
    func: Callable[[A], Awaitable[T]], items: Sequence[A], *, limit: int
) -> list[T]:
    """`[await func(i) for i in items]`, with up to `limit` calls in flight.

    Once a call failed, no further call starts (as a one-by-one loop stops at its first
    error: with the server unreachable, a thousand items must not each wait out a timeout);
    the calls already in flight run to their end. The error raised is the one of the first
    failing item in `items`' order, whichever failed first in time. A namespace with thousands
    of schedules must not open thousands of RPCs at once, hence the bound.
    """
    gate = asyncio.Semaphore(limit)
    failed = False

    async def one(item: A) -> T | _NotStarted:
        nonlocal failed
        async with gate:
            # Checked after taking the gate: a call queued behind the bound sees a failure
            # that happened while it waited.
            if failed:
                return _NOT_STARTED
            try:
                return await func(item)
            except BaseException:
                failed = True
                raise

    done: list[T] = []
    for result in await asyncio.gather(*(one(i) for i in items), return_exceptions=True):
        if isinstance(result, BaseException):
            raise result
        # A call is skipped only after another failed, whose error this loop raises: when
        # it ends, nothing was left out.
        if not isinstance(result, _NotStarted):
            done.append(result)
    return done
