"""The outbox (`cronwarden.outbox`): one record per committed logical key."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

_DONE_DIGEST = "SELECT args_digest FROM cronwarden.outbox WHERE logical_key = $1"
_COMMITTED_TOKEN = "SELECT fencing_token FROM cronwarden.outbox WHERE logical_key = $1"


async def done_digest(conn: Any, logical_key: str) -> str | None:
    """The args digest the key committed with, or None when the key has not committed."""
    value: str | None = await conn.fetchval(_DONE_DIGEST, logical_key)
    return value


async def committed_token(conn: Any, logical_key: str) -> int | None:
    """The fencing token of the run that committed the key: tells a run whose COMMIT raised
    whether it was its own commit that landed."""
    value: int | None = await conn.fetchval(_COMMITTED_TOKEN, logical_key)
    return value


_COMMITTED_KEYS = "SELECT logical_key FROM cronwarden.outbox WHERE logical_key = ANY($1::text[])"


async def committed_keys(conn: Any, keys: list[str]) -> set[str]:
    """Which of `keys` have an outbox record."""
    return {row["logical_key"] for row in await conn.fetch(_COMMITTED_KEYS, keys)}


# One statement per page of fire times (epoch seconds, as Temporal hands them over; ascending):
# the page travels as one array parameter, the outbox is read with ONE range scan of the
# (schedule_id, fire_time) index over the page's span, and only the MISSING times come back. In
# the usual case (almost every key done) almost nothing crosses the wire and no Python object
# is built per key. A NOT EXISTS probe per element, or returning the range's rows to subtract
# in Python, measured the same within noise on a year of minutely fires (`python -m
# bench.backfill_plan` prints all three): Temporal's matching-times stream is most of the cost.
_MISSING_FIRE_TIMES = """
SELECT s FROM (
    SELECT s FROM unnest($2::bigint[]) AS s
    EXCEPT
    SELECT extract(epoch FROM fire_time)::bigint
      FROM cronwarden.outbox
     WHERE schedule_id = $1 AND fire_time BETWEEN to_timestamp($3) AND to_timestamp($4)
) AS missing
ORDER BY s
"""

_DONE_IN_WINDOW = """
SELECT count(*) FROM cronwarden.outbox
 WHERE schedule_id = $1 AND fire_time BETWEEN $2 AND $3
"""


async def missing_fire_times(conn: Any, schedule_id: str, fire_times: Sequence[int]) -> list[int]:
    """The fire times (epoch seconds) among `fire_times` that have no outbox record."""
    if not fire_times:
        return []
    rows = await conn.fetch(
        _MISSING_FIRE_TIMES, schedule_id, fire_times, min(fire_times), max(fire_times)
    )
    return [row[0] for row in rows]


async def done_in_window(conn: Any, schedule_id: str, start: datetime, end: datetime) -> int:
    """Outbox records of the schedule with `start <= fire_time <= end`, whatever produced them."""
    value: int = await conn.fetchval(_DONE_IN_WINDOW, schedule_id, start, end)
    return value
