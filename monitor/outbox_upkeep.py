"""The monitor's upkeep of the outbox's partitions: months created ahead, months past the
dedupe horizon dropped whole (store/outbox_partitions.py, migration 0019).

Run after a pass that reached the database, at most once per `every` seconds of the monotonic
clock, on a connection of its own: its locks are taken with short timeouts inside the functions
it calls, and a month it could not create or drop now is done at a later turn (months ahead of
need, so a missed turn costs nothing). A failure is logged and waits for its next turn: the
pass has paged already if the database is away.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from datetime import timedelta

from cronwarden.config import Settings
from cronwarden.logs import get_logger
from cronwarden.monitor.passes import DATABASE_ERRORS
from cronwarden.store import outbox_partitions
from cronwarden.store.pool import connect as connect_database

log = get_logger("cronwarden.monitor")

UPKEEP_EVERY = 3600.0
"""Seconds between two upkeeps: months are created three ahead, so hours hardly matter."""


class OutboxUpkeep:
    def __init__(
        self,
        dsn: str,
        horizon: timedelta,
        *,
        timeout: float,
        every: float = UPKEEP_EVERY,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.dsn = dsn
        self.horizon = horizon
        self.timeout = timeout
        self.every = every
        self._clock = clock
        self._next: float | None = None

    async def maybe_run(self) -> outbox_partitions.Upkeep | None:
        """Create and drop partitions if due; None when not due or the database failed."""
        if self._next is not None and self._clock() < self._next:
            return None
        self._next = self._clock() + self.every
        try:
            async with asyncio.timeout(self.timeout):
                conn = await connect_database(self.dsn, timeout=self.timeout)
                try:
                    done = await outbox_partitions.upkeep(conn, self.horizon)
                finally:
                    await conn.close()
        except DATABASE_ERRORS as exc:
            log.warning("monitor.outbox-upkeep-failed", error=type(exc).__name__)
            return None
        if done.created or done.dropped:
            log.info("monitor.outbox-partitions", created=done.created, dropped=done.dropped)
        return done


def upkeep_from_settings(settings: Settings) -> OutboxUpkeep:
    return OutboxUpkeep(
        settings.dsn,
        settings.outbox_retention,
        timeout=settings.monitor_database_timeout_seconds,
    )
