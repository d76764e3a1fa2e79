"""One budget of runs shared by every Temporal Worker of a worker process.

A Python SDK `Worker` polls one task queue. With per-job activity queues a process runs one
Worker per job besides the one on the schedule's queue, and each Worker's own
`max_concurrent_activities` would multiply the operator's `CRONWARDEN_MAX_CONCURRENT_RUNS` by
the number of jobs. The limit is kept for the process as a whole, in two parts:

- `RunSlots`, the activity slot supplier of every Worker, lets a poller ask Temporal for a task
  only while fewer than `limit` runs are under way in the process. Temporal reserves a slot
  BEFORE each poll, and an idle long poll keeps it for up to a minute: had a reservation counted
  against the limit, a process with more queues than slots would leave some job queues
  unpolled, their runs waiting for no reason. A reservation therefore costs nothing until a task
  arrives on it; a saturated process stops polling, and other workers get the runs.
- `RunSlots.running()`, entered by the guarded activity before anything else, holds the strict
  bound: several queues' pollers may each receive a task in the same instant, so a burst can
  hand the process up to one task per queue beyond the limit. Such a task waits here, its
  Temporal heartbeat kept up, and runs as soon as a run ends. No job starts, and no database
  connection is taken, beyond the limit.

The SDK calls `reserve_slot` on the worker's event loop, but `try_reserve_slot`,
`mark_slot_used` and `release_slot` from its own threads: counts are under a thread lock, and a
waiting reservation is woken on its loop with `call_soon_threadsafe`.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

from temporalio.worker import (
    CustomSlotSupplier,
    SlotMarkUsedContext,
    SlotPermit,
    SlotReleaseContext,
    SlotReserveContext,
)

# A task waiting for a run slot tells Temporal it is alive, and asks whether to give up, this
# often (the run's activity heartbeat timeout is 10 s).
WAIT_CHECK_EVERY = 1.0


class _Permit(SlotPermit):
    """A reservation; `used` once a task arrived on it (only then does it count)."""

    def __init__(self) -> None:
        self.used = False


class RunSlots(CustomSlotSupplier):
    """At most `limit` runs at once across every Worker this supplier is given to."""

    def __init__(self, limit: int) -> None:
        if limit < 1:
            raise ValueError(f"a run budget needs at least one slot, not {limit}")
        self.limit = limit
        self._delivered = 0
        self._lock = threading.Lock()
        self._waiters: list[asyncio.Future[None]] = []
        self._gate = asyncio.Semaphore(limit)

    @property
    def delivered(self) -> int:
        """Tasks Temporal handed to this process that have not finished yet."""
        with self._lock:
            return self._delivered

    async def reserve_slot(self, ctx: SlotReserveContext) -> SlotPermit:
        while True:
            with self._lock:
                if self._delivered < self.limit:
                    return _Permit()
                waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
                self._waiters.append(waiter)
            try:
                await waiter
            finally:
                with self._lock:
                    if waiter in self._waiters:
                        self._waiters.remove(waiter)

    def try_reserve_slot(self, ctx: SlotReserveContext) -> SlotPermit | None:
        with self._lock:
            return _Permit() if self._delivered < self.limit else None

    def mark_slot_used(self, ctx: SlotMarkUsedContext) -> None:
        with self._lock:
            if isinstance(ctx.permit, _Permit) and not ctx.permit.used:
                ctx.permit.used = True
                self._delivered += 1

    def release_slot(self, ctx: SlotReleaseContext) -> None:
        with self._lock:
            if not isinstance(ctx.permit, _Permit) or not ctx.permit.used:
                return  # a poll that ended without a task: it never counted
            ctx.permit.used = False
            self._delivered -= 1
            if self._delivered >= self.limit:
                return
            # Every waiting poller may poll again: reservations do not count.
            woken, self._waiters = self._waiters, []
        for waiter in woken:
            waiter.get_loop().call_soon_threadsafe(_wake, waiter)

    @asynccontextmanager
    async def running(
        self,
        heartbeat: Callable[[], None],
        give_up: Callable[[float], bool] | None = None,
    ) -> AsyncIterator[None]:
        """Hold one of the `limit` run slots while the block runs; `heartbeat` is called while
        waiting for one, and `give_up(seconds waited)` too: True raises `SlotNotTaken`, the
        wait abandoned (the task goes back, see worker_runtime.py)."""
        acquire = asyncio.ensure_future(self._gate.acquire())
        started = time.monotonic()
        try:
            while not (await asyncio.wait({acquire}, timeout=WAIT_CHECK_EVERY))[0]:
                heartbeat()
                if give_up is not None and give_up(time.monotonic() - started):
                    raise SlotNotTaken
        except BaseException:
            # Cancelled while waiting: a slot acquired in the same instant is given back.
            acquire.cancel()
            if acquire.done() and not acquire.cancelled():
                self._gate.release()
            raise
        try:
            yield
        finally:
            self._gate.release()


class SlotNotTaken(Exception):
    """A task gave up waiting for a run slot (see `RunSlots.running`)."""


def _wake(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)
