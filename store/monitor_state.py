"""The monitor's own liveness (`cronwarden.monitor_state`): one row per monitor process, bumped
on every completed pass, so "is anything watching?" is a query."""

from __future__ import annotations

from typing import Any

_RECORD_PASS = """
INSERT INTO cronwarden.monitor_state AS m (monitor_id, host, pid, passes, sinks)
VALUES ($1, $2, $3, 1, $4)
ON CONFLICT (monitor_id) DO UPDATE
   SET last_pass_at = now(), passes = m.passes + 1, sinks = EXCLUDED.sinks
"""

# Every sink some monitor passing lately delivers to: a replica pages for all of them, so a page
# reaches a sink that only another replica has (it claims those rows, see notifications).
_PEER_SINKS = """
SELECT DISTINCT unnest(sinks) AS sink
  FROM cronwarden.monitor_state
 WHERE last_pass_at > now() - make_interval(secs => $1)
 ORDER BY 1
"""

_LATEST = """
SELECT monitor_id, host, pid, started_at, last_pass_at, passes,
       extract(epoch FROM now() - last_pass_at)::float8 AS seconds_since_pass
  FROM cronwarden.monitor_state
 ORDER BY last_pass_at DESC
"""


async def record_pass(conn: Any, *, monitor_id: str, host: str, pid: int, sinks: list[str]) -> None:
    await conn.execute(_RECORD_PASS, monitor_id, host, pid, sinks)


async def peer_sinks(conn: Any, *, within_seconds: float) -> list[str]:
    """The sinks of every monitor that passed in the last `within_seconds`."""
    return [r["sink"] for r in await conn.fetch(_PEER_SINKS, within_seconds)]


async def monitors(conn: Any) -> list[dict[str, Any]]:
    """Every monitor that ever passed, the most recent first."""
    return [dict(r) for r in await conn.fetch(_LATEST)]
