"""One computation per key at a time, its result reused for a short while: what keeps a burst
of page loads from becoming a burst of reads.

Concurrent callers of `get` with one key await the same task; its value then serves every
caller for `fresh_for` seconds. A caller that goes away (its client disconnected) does not
cancel the computation the others wait for. A failure is not kept: the next caller tries again.
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Hashable
from dataclasses import dataclass
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


@dataclass(frozen=True)
class _Kept(Generic[V]):
    value: V
    at: float


class SharedRead(Generic[K, V]):
    def __init__(
        self,
        *,
        fresh_for: float,
        max_keys: int,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.fresh_for = fresh_for
        self._max_keys = max_keys
        self._clock = clock
        self._kept: OrderedDict[K, _Kept[V]] = OrderedDict()
        self._flying: dict[K, asyncio.Future[V]] = {}
        self.computations = 0
        """How many times a value was computed (for tests and the bench)."""

    async def get(self, key: K, compute: Callable[[], Awaitable[V]]) -> V:
        kept = self._kept.get(key)
        if kept is not None and self._clock() - kept.at < self.fresh_for:
            self._kept.move_to_end(key)
            return kept.value
        flying = self._flying.get(key)
        if flying is None:
            self.computations += 1
            flying = asyncio.ensure_future(compute())
            self._flying[key] = flying
            flying.add_done_callback(lambda done: self._landed(key, done))
        # Shielded: cancelling one waiter must not cancel the read the others share.
        return await asyncio.shield(flying)

    def _landed(self, key: K, done: asyncio.Future[V]) -> None:
        if self._flying.get(key) is done:
            del self._flying[key]
        if done.cancelled() or done.exception() is not None:
            return
        self._kept[key] = _Kept(done.result(), self._clock())
        self._kept.move_to_end(key)
        while len(self._kept) > self._max_keys:
            self._kept.popitem(last=False)

    def forget(self) -> None:
        self._kept.clear()

    async def close(self) -> None:
        """Cancel the reads in flight (at shutdown) and drop what is kept."""
        flying = list(self._flying.values())
        for future in flying:
            future.cancel()
        await asyncio.gather(*flying, return_exceptions=True)
        self._kept.clear()
