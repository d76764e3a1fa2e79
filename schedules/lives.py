"""Deleting a schedule ends one life of its id, and the history says when.

A schedule id deleted and created again is two schedules to Temporal; their fires share the id
in every logical key. Without the end of the first life on record, `backfill plan` would judge
the time between the two by the first life's last definition and list its fires as missed, and
`backfill run` would apply them under the second life. So every delete cronwarden makes records
a deleted row in `definition_history`, at Temporal's clock read just before the delete (fires
up to the delete itself were due, and are done or in flight: never planned away).

The row is written once Temporal has deleted the schedule, never before: a row ahead of a
delete that then fails (or never happens, the command killed in between) would end a life that
goes on, and hide its missed fires. A delete whose row is lost the other way (killed after the
delete) is a life without a recorded end, which backfill infers from its last evidence
(backfill/plan.py `effective_history`).
"""

from __future__ import annotations

import asyncpg
from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode

from cronwarden.schedules.inventory import describe_or_none
from cronwarden.store import definitions


async def delete_schedule(client: Client, pool: asyncpg.Pool | None, schedule_id: str) -> None:
    """Delete the schedule in Temporal, then record the end of its life (with a pool).

    Deleted by someone else meanwhile (not found) still records the end: the id's life is over,
    and the time read before is after their delete, so the seconds between are judged as the
    old life's (done or missed fires of it, listed as such). A delete whose answer was lost (a
    timeout, the server unavailable) is looked up: gone, it is recorded; still there, the error
    stands and nothing is recorded.
    """
    from cronwarden.backfill.window import temporal_now

    at = await temporal_now(client) if pool is not None else None
    try:
        await client.get_schedule_handle(schedule_id).delete()
    except RPCError as exc:
        if exc.status != RPCStatusCode.NOT_FOUND and (
            exc.status not in _ANSWER_LOST or await describe_or_none(client, schedule_id)
        ):
            raise
    if pool is not None and at is not None:
        async with pool.acquire() as conn:
            await definitions.record_deleted(conn, schedule_id, at=at)


# Errors after which the delete may have been carried out all the same.
_ANSWER_LOST = frozenset(
    {RPCStatusCode.DEADLINE_EXCEEDED, RPCStatusCode.UNAVAILABLE, RPCStatusCode.CANCELLED}
)
