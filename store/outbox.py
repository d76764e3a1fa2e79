"""The outbox (`cronwarden.outbox`): one record per committed logical key."""

from __future__ import annotations

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
