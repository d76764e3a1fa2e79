"""A test database: cronwarden's schema, plus the probe jobs' effects table."""

from __future__ import annotations

import tests.jobs
from cronwarden.embedded import EmbeddedPostgres
from cronwarden.store.migrate import migrate
from cronwarden.store.pool import connect


async def create_test_database(server: EmbeddedPostgres, name: str) -> str:
    """Create `name` on `server`, migrate it, add `test_effects`; its DSN."""
    server.create_database(name)
    dsn = server.dsn(name)
    conn = await connect(dsn)
    try:
        await migrate(conn)
        await conn.execute(tests.jobs.EFFECTS_DDL)
    finally:
        await conn.close()
    return dsn
