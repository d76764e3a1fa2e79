"""The zone of each schedule, from its latest recorded definition: what the status page and the
pages read to show local time beside UTC, from Postgres alone (never a call to Temporal)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

# The newest entry of each id asked for; a delete's row has no definition, so a deleted
# schedule has no zone. Only zoned definitions carry `timezone` (a UTC one leaves it out).
_LATEST_ZONES = """
SELECT DISTINCT ON (schedule_id) schedule_id, definition->>'timezone' AS zone
  FROM cronwarden.definition_history
 WHERE schedule_id = ANY($1::text[])
 ORDER BY schedule_id, applied_at DESC
"""


async def latest_zones(conn: Any, schedule_ids: Sequence[str]) -> dict[str, str]:
    """Schedule id -> the IANA zone its latest recorded definition names; UTC schedules (and
    ids with no recorded definition) are left out."""
    if not schedule_ids:
        return {}
    rows = await conn.fetch(_LATEST_ZONES, list(schedule_ids))
    return {r["schedule_id"]: r["zone"] for r in rows if r["zone"]}
