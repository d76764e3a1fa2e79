"""Ending timed pauses (`schedules pause --for 2h` / `--until T`): once a pause's end has passed
(by the database's clock), the pass unpauses the schedule the way `schedules unpause` does
(`operations.end_timed_pause`: the heartbeat row with its deadline moved past the paused time,
then Temporal), recorded in the change log as the monitor's change.

When it cannot (Temporal unreachable, or any error), the row records why (`unpause_error`) and
the pass's plan opens an `unpause-failed` incident from that, with Postgres alone; every later
pass tries again, and the incident resolves once the schedule runs again. Each try is bounded,
so a Temporal that hangs costs a pass no more than `timeout` per ended pause.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import asyncpg
from temporalio.client import Client

from cronwarden.logs import get_logger
from cronwarden.schedules import operations
from cronwarden.store import heartbeats
from cronwarden.times import utc_text, utc_text_or_none

log = get_logger("cronwarden.monitor")

ClientOrNone = Callable[[], Awaitable[Client | None]]

NO_TEMPORAL = "Temporal is not reachable from the monitor"


@dataclass
class Ended:
    unpaused: int = 0
    failed: int = 0


async def end_due(
    pool: asyncpg.Pool,
    client_or_none: ClientOrNone | None,
    *,
    timeout: float,
    database: Callable[[], asyncio.Timeout],
) -> Ended:
    """Unpause every schedule whose timed pause has ended; record why for each one that could
    not be. `database`: the bound of each database step of the pass."""
    done = Ended()
    async with database(), pool.acquire() as conn:
        rows = await heartbeats.ended_pauses(conn)
    if not rows:
        return done
    client = await client_or_none() if client_or_none is not None else None
    for row in rows:
        sid = str(row["schedule_id"])
        until = row["paused_until"]
        try:
            if client is None:
                raise ConnectionError(NO_TEMPORAL)
            async with asyncio.timeout(timeout):
                view = await operations.end_timed_pause(client, pool, sid, until=until)
        except Exception as exc:
            error = f"{type(exc).__name__}: {exc}".rstrip(": ")
            if isinstance(exc, TimeoutError):
                error = f"Temporal did not answer within {timeout:g}s"
            async with database(), pool.acquire() as conn:
                await heartbeats.record_unpause_failure(
                    conn, schedule_id=sid, paused_until=until, error=error
                )
            done.failed += 1
            log.error(
                "monitor.timed-unpause-failed",
                schedule_id=sid,
                paused_until=utc_text(until),
                error=error,
                first=row["unpause_error"] is None,
            )
            continue
        if view is None:
            continue  # unpaused or paused again since the pass read it
        done.unpaused += 1
        log.info(
            "monitor.timed-pause-ended",
            schedule_id=sid,
            paused_until=utc_text(until),
            next_fire=utc_text_or_none(view.next_fire_times[0] if view.next_fire_times else None),
        )
    return done
