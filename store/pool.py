"""The asyncpg pool, with connection failures turned into one sentence naming where."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import asyncpg

from cronwarden.config import describe_dsn
from cronwarden.errors import DatabaseUnreachable

# Errors that mean "the server is not there or would not let us in", as opposed to a bug.
_CONNECT_ERRORS: tuple[type[BaseException], ...] = (
    OSError,
    TimeoutError,
    asyncpg.PostgresError,
    asyncpg.InterfaceError,
)


async def _init_connection(conn: asyncpg.Connection) -> None:
    # JSON payloads only: results and args travel as jsonb, never pickled.
    await conn.set_type_codec("jsonb", encoder=json.dumps, decoder=json.loads, schema="pg_catalog")


class PoolConnection(asyncpg.Connection):  # type: ignore[misc]
    """A pooled connection whose release can skip the session reset, once.

    asyncpg resets a connection on every release (`pg_advisory_unlock_all(); CLOSE ALL;
    UNLISTEN *; RESET ALL`): a round trip that protects the next borrower from session state a
    previous one left behind. Code that ran only statements which change no session state asks
    to skip it (see `own_statements`); any other borrower, above all a job given a connection
    by `ctx.transaction()`, still gets the full reset.
    """

    _skip_reset = False

    def skip_next_reset(self) -> None:
        self._skip_reset = True

    def get_reset_query(self) -> str:
        if self._skip_reset:
            self._skip_reset = False
            return ""
        query: str = super().get_reset_query()
        return query


@asynccontextmanager
async def own_statements(pool: asyncpg.Pool, *, timeout: float | None = None) -> AsyncIterator[Any]:
    """A pooled connection for our own plain statements (no SET, LISTEN, advisory lock, cursor
    or explicit transaction), released without the reset round trip when the body ends
    normally. An open transaction is still rolled back on release, by asyncpg, whatever this
    says."""
    async with pool.acquire(timeout=timeout) as conn:
        yield conn
        # Reached only when the body returned normally. A statement that failed (or a
        # cancellation) may have left the session anywhere: that release gets the full reset.
        # A pool not created by `create_pool` has plain connections: they just reset as usual.
        skip = getattr(conn, "skip_next_reset", None)
        if skip is not None:
            skip()


def unreachable(dsn: str, exc: BaseException) -> DatabaseUnreachable:
    reason = str(exc).strip() or type(exc).__name__
    return DatabaseUnreachable(f"cannot reach Postgres at {describe_dsn(dsn)}: {reason}", dsn=dsn)


async def create_pool(
    dsn: str,
    *,
    min_size: int = 1,
    max_size: int = 10,
    timeout: float = 10.0,
    command_timeout: float | None = None,
) -> asyncpg.Pool:
    """`command_timeout` bounds every statement that names no timeout of its own, the reset
    asyncpg runs when a connection goes back to the pool among them."""
    try:
        pool = await asyncpg.create_pool(
            dsn,
            min_size=min_size,
            max_size=max_size,
            timeout=timeout,
            command_timeout=command_timeout,
            init=_init_connection,
            connection_class=PoolConnection,
            server_settings={"application_name": "cronwarden"},
        )
    except _CONNECT_ERRORS as exc:
        raise unreachable(dsn, exc) from exc
    assert pool is not None
    return pool


async def connect(
    dsn: str, *, timeout: float = 10.0, application_name: str = "cronwarden"
) -> asyncpg.Connection:
    # The application name is what an operator (or a test) sees in pg_stat_activity.
    try:
        conn: Any = await asyncpg.connect(
            dsn, timeout=timeout, server_settings={"application_name": application_name}
        )
    except _CONNECT_ERRORS as exc:
        raise unreachable(dsn, exc) from exc
    await _init_connection(conn)
    return conn
