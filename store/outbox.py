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
# ONE range scan of the (schedule_id, fire_time) index over the page's span, whose fire times
# come back as a single bigint[] value, and the page minus them is taken in Python. Sending the
# page to Postgres instead (an EXCEPT or a NOT EXISTS per element against `unnest($2)`) costs
# more client CPU than the subtraction itself: the driver checks every element of a list
# parameter against the abstract Sequence type, about 0.8 ms a page, where decoding one array
# and a set difference take about 0.2. On a shared machine that CPU is taken from the
# matching-times stream the plan waits on (bench/backfill_plan.py).
_DONE_FIRE_TIMES = """
SELECT coalesce(array_agg(extract(epoch FROM fire_time)::bigint), '{}')
  FROM cronwarden.outbox
 WHERE schedule_id = $1 AND fire_time BETWEEN to_timestamp($2) AND to_timestamp($3)
"""

_DONE_IN_WINDOW = """
SELECT count(*) FROM cronwarden.outbox
 WHERE schedule_id = $1 AND fire_time BETWEEN $2 AND $3
"""


async def missing_fire_times(conn: Any, schedule_id: str, fire_times: Sequence[int]) -> list[int]:
    """The fire times (epoch seconds) among `fire_times` (ascending, each once) that have no
    outbox record, ascending."""
    if not fire_times:
        return []
    done: list[int] = await conn.fetchval(
        _DONE_FIRE_TIMES, schedule_id, fire_times[0], fire_times[-1]
    )
    # Set operations, not a loop per time: each runs in C over the page's thousand times.
    return sorted(set(fire_times).difference(done))


async def done_in_window(conn: Any, schedule_id: str, start: datetime, end: datetime) -> int:
    """Outbox records of the schedule with `start <= fire_time <= end`, whatever produced them."""
    value: int = await conn.fetchval(_DONE_IN_WINDOW, schedule_id, start, end)
    return value
