"""Many Temporal round trips at once, never more than a bound in flight."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar, cast

A = TypeVar("A")
T = TypeVar("T")


@dataclass(frozen=True)
class Outcome(Generic[T]):
    """What became of one item of `try_bounded`."""

    started: bool
    """False: another item had failed before this one's turn, so it was never called."""
    value: T | None = None
    error: BaseException | None = None


async def try_bounded(
    func: Callable[[A], Awaitable[T]], items: Sequence[A], *, limit: int
) -> list[Outcome[T]]:
    """Call `func` on each item, up to `limit` calls in flight; each item's outcome, in order.

    Once a call failed, no further call starts (as a one-by-one loop stops at its first
    error: with the server unreachable, a thousand items must not each wait out a timeout);
    the calls already in flight run to their end, so every outcome is known exactly: done,
    failed, or never started. A namespace with thousands of schedules must not open thousands
    of RPCs at once, hence the bound.
    """
    gate = asyncio.Semaphore(limit)
    failed = False

    async def one(item: A) -> Outcome[T]:
        nonlocal failed
        async with gate:
            # Checked after taking the gate: a call queued behind the bound sees a failure
            # that happened while it waited.
            if failed:
                return Outcome(started=False)
            try:
                return Outcome(started=True, value=await func(item))
            except Exception as exc:
                failed = True
                return Outcome(started=True, error=exc)
            except BaseException:
                # Cancelled (or the process stops): nothing more starts, and it propagates.
                failed = True
                raise

    return list(await asyncio.gather(*(one(i) for i in items)))


async def map_bounded(
    func: Callable[[A], Awaitable[T]], items: Sequence[A], *, limit: int
) -> list[T]:
    """`[await func(i) for i in items]`, with up to `limit` calls in flight (see `try_bounded`).

    The error raised is the one of the first failing item in `items`' order, whichever failed
    first in time.
    """
    outcomes = await try_bounded(func, items, limit=limit)
    for outcome in outcomes:
        if outcome.error is not None:
            raise outcome.error
    # An item is skipped only after another failed, whose error the loop above raised: here,
    # every item ran.
    return [cast(T, o.value) for o in outcomes]
