"""The outbox (`cronwarden.outbox`): one record per committed logical key."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

_COMMITTED = "SELECT args_digest, fencing_token FROM cronwarden.outbox WHERE logical_key = $1"
# A logical key names its fire time (`{schedule id}@{YYYY-MM-DDTHH:MM:SSZ}`), and the outbox is
# partitioned by fire time (migration 0019): naming it reads one month's index, not every
# month's. Found nothing, the key is read by key alone (as acquire_lease does, 0020).
_COMMITTED_AT = _COMMITTED + " AND fire_time = $2"
_KEY_TIME = re.compile(r"@([0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2})Z\Z")


def key_fire_time(logical_key: str) -> datetime | None:
    """The fire time `logical_key` names, or None."""
    named = _KEY_TIME.search(logical_key)
    if named is None:
        return None
    try:
        return datetime.fromisoformat(named[1]).replace(tzinfo=UTC)
    except ValueError:  # looks like a time, is none (2026-02-30T...)
        return None


@dataclass(frozen=True)
class CommittedRecord:
    """What a committed key's outbox record says about the run that committed it."""

    args_digest: str
    """The digest of the args the key committed with."""
    fencing_token: int
    """The committing run's lease token: a run whose COMMIT raised compares it with its own
    to learn whether it was its own commit that landed."""


async def committed(conn: Any, logical_key: str) -> CommittedRecord | None:
    """The key's outbox record, or None when the key has not committed."""
    at = key_fire_time(logical_key)
    row = None if at is None else await conn.fetchrow(_COMMITTED_AT, logical_key, at)
    if row is None:
        # Every month: a record written under another time than its key names still counts.
        row = await conn.fetchrow(_COMMITTED, logical_key)
    if row is None:
        return None
    return CommittedRecord(args_digest=row["args_digest"], fencing_token=row["fencing_token"])


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


# The status page's timelines: each schedule's newest records from its own start time on, one
# index range scan per schedule (outbox_schedule_fire_time), all schedules in one round trip.
_RECENT = """
SELECT o.schedule_id, o.fire_time, o.committed_at, o.worker, o.attempt, o.workflow_id, o.run_id
  FROM unnest($1::text[], $2::timestamptz[]) AS w(schedule_id, since)
 CROSS JOIN LATERAL (
       SELECT * FROM cronwarden.outbox o
        WHERE o.schedule_id = w.schedule_id AND o.fire_time >= w.since AND o.fire_time <= $4
        ORDER BY o.fire_time DESC
        LIMIT $3) o
"""


async def recent(
    conn: Any, since: dict[str, datetime], *, until: datetime, limit: int
) -> list[dict[str, Any]]:
    """Per schedule id in `since`, its newest `limit` records with `since[id] <= fire_time <=
    until` (pass `datetime.min` in UTC for no lower bound)."""
    if not since:
        return []
    ids, starts = zip(*since.items(), strict=True)
    return [dict(r) for r in await conn.fetch(_RECENT, list(ids), list(starts), limit, until)]


# The latest fire the schedule id committed before `before` (any time, with None): the last
# evidence of a life whose end was never recorded (backfill/plan.py `effective_history`).
_LAST_FIRE_BEFORE = """
SELECT max(fire_time) FROM cronwarden.outbox
 WHERE schedule_id = $1 AND ($2::timestamptz IS NULL OR fire_time < $2)
"""


async def last_fire_time(
    conn: Any, schedule_id: str, *, before: datetime | None
) -> datetime | None:
    """The latest committed fire time of the schedule id, before `before` if given."""
    last: datetime | None = await conn.fetchval(_LAST_FIRE_BEFORE, schedule_id, before)
    return last
