"""Waiting on real servers: poll a check until it holds, or fail naming what never happened."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import TypeVar

T = TypeVar("T")


async def wait_for(
    check: Callable[[], Awaitable[T]], *, timeout: float, what: str, interval: float = 0.2
) -> T:
    """Poll `check` until it returns something truthy; fail naming `what` at the deadline."""
    deadline = time.monotonic() + timeout
    last: T | None = None
    while time.monotonic() < deadline:
        last = await check()
        if last:
            return last
        await asyncio.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what} (last: {last!r})")


async def clock_past(moment: datetime) -> bool:
    """A `wait_for` check: the local clock has passed `moment`."""
    return datetime.now(UTC) > moment
