"""Deleting a schedule ends one life of its id, and the history says when.

A schedule id deleted and created again is two schedules to Temporal; their fires share the id
in every logical key. Without the end of the first life on record, `backfill plan` would judge
the time between the two by the first life's last definition and list its fires as missed, and
`backfill run` would apply them under the second life. So every delete cronwarden makes records
a deleted row in `definition_history` first, at Temporal's clock read just before the delete
(fires up to the delete itself were due, and are done or in flight: never planned away).
"""

from __future__ import annotations

import asyncio

import asyncpg
from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode

from cronwarden.store import definitions


async def delete_schedule(client: Client, pool: asyncpg.Pool | None, schedule_id: str) -> None:
    """Delete the schedule in Temporal, recording the end of its life first (with a pool).

    A delete Temporal refuses takes its row back: the life goes on. A schedule someone else
    deleted meanwhile keeps the row, which is then a little late (after their delete), so the
    seconds between are judged as the old life's: done or missed fires of it, listed as such.
    A delete interrupted before Temporal answered keeps the row too: the schedule may be gone,
    and a row that ends a life too early hides a few fires from plans (until the next apply
    records the live definition again), where one missing would let a re-created schedule's
    backfill replay the old life's fires.
    """
    from cronwarden.backfill.window import temporal_now

    at = None
    if pool is not None:
        at = await temporal_now(client)
        async with pool.acquire() as conn:
            await definitions.record_deleted(conn, schedule_id, at=at)
    try:
        await client.get_schedule_handle(schedule_id).delete()
    except RPCError as exc:
        if exc.status == RPCStatusCode.NOT_FOUND:
            return
        if pool is not None and at is not None:
            async with pool.acquire() as conn:
                await asyncio.shield(definitions.forget_deleted(conn, schedule_id, at=at))
        raise
