"""The outbox (`cronwarden.outbox`): one record per committed logical key."""

from __future__ import annotations

from typing import Any

_DONE_DIGEST = "SELECT args_digest FROM cronwarden.outbox WHERE logical_key = $1"


async def done_digest(conn: Any, logical_key: str) -> str | None:
    """The args digest the key committed with, or None when the key has not committed."""
    value: str | None = await conn.fetchval(_DONE_DIGEST, logical_key)
    return value
