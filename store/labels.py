"""The labels of each schedule, from its latest recorded definition: what the pages read to
carry a schedule's labels to the sinks (routing in PagerDuty, grouping in a webhook's
receiver), from Postgres alone (never a call to Temporal), as the zones are (store/zones.py).

Read from the definition history rather than a copy on the heartbeat row: every apply that
changes a definition records it there already, so there is one place a label is written and
nothing to keep in step; and a deleted schedule's last labels stay readable, so the resolve of
its open incident goes where its trigger went.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from cronwarden.schedules.labels import labels_of

# The newest live definition of each id asked for (a delete's row is skipped: its schedule's
# last labels still route the resolve). Only a labelled definition carries `labels`.
_LATEST_LABELS = """
SELECT DISTINCT ON (schedule_id) schedule_id, definition->'labels' AS labels
  FROM cronwarden.definition_history
 WHERE schedule_id = ANY($1::text[]) AND NOT deleted
 ORDER BY schedule_id, applied_at DESC
"""


async def latest_labels(conn: Any, schedule_ids: Sequence[str]) -> dict[str, dict[str, str]]:
    """Schedule id -> the labels its latest recorded definition carries; ids without labels
    (and with no recorded definition) are left out."""
    if not schedule_ids:
        return {}
    rows = await conn.fetch(_LATEST_LABELS, list(schedule_ids))
    # The pool decodes jsonb (store/pool.py).
    found = {r["schedule_id"]: labels_of({"labels": r["labels"]}) for r in rows}
    return {k: v for k, v in found.items() if v}
