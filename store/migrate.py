"""Numbered, forward-only migrations, applied under an advisory lock.

Two replicas starting at once both call `migrate`: the advisory lock makes the second wait until
the first has finished, then find nothing left to do.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import re
from dataclasses import dataclass
from importlib import resources

import asyncpg

from cronwarden.errors import CronwardenError
from cronwarden.store import outbox_partitions

# Arbitrary but fixed: the key every cronwarden process locks before touching the schema.
MIGRATION_LOCK_KEY = 0x63726F6E77617264  # "cronward"
# The application name of a `migrate --check` connection, so a waiting init container can be
# told apart from the workers in pg_stat_activity.
CHECK_APPLICATION_NAME = "cronwarden-migrate-check"
LOCK_POLL_SECONDS = 0.2
_NAME = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")


# The ledger of applied migrations. deploy/sql/roles.sql runs the same statement (a test holds
# the two equal), so the ledger and its read-only grant exist before any migration ran.
LEDGER_DDL = """CREATE TABLE IF NOT EXISTS cronwarden.schema_migrations (
    version    integer PRIMARY KEY,
    name       text        NOT NULL,
    checksum   text        NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
);"""

# deploy/sql/roles.sql's runtime role, where it exists, gets DML on every table by default
# privileges; these are its exceptions, applied here too because a table a migration creates after
# roles.sql ran gets only the defaults. The migrator owns the tables, so it may revoke.
RUNTIME_EXCEPTIONS = """
DO $$
BEGIN
    IF EXISTS (SELECT FROM pg_roles WHERE rolname = 'cronwarden_runtime') THEN
        REVOKE INSERT, UPDATE, DELETE, TRUNCATE ON cronwarden.schema_migrations
            FROM cronwarden_runtime;
        REVOKE UPDATE, DELETE, TRUNCATE ON cronwarden.outbox FROM cronwarden_runtime;
        -- Created by migration 0024: absent while a database is migrated through an older one.
        IF to_regclass('cronwarden.change_log') IS NOT NULL THEN
            REVOKE UPDATE, DELETE, TRUNCATE ON cronwarden.change_log FROM cronwarden_runtime;
        END IF;
    END IF;
END
$$;
"""


# Migrations that must not stop commits for longer than an instant: each has a step run first,
# outside any transaction (builds and scans under locks that let writes through), and its own
# transaction starts with a short lock timeout and is tried again when it runs out, so commits
# queue behind its ACCESS EXCLUSIVE lock for at most that long at a time.
ONLINE_PREPARATIONS = {19: outbox_partitions.prepare_conversion}
# What a preparation leaves that must not outlive a migration that gave up: the outbox's CHECK
# bound would start refusing live fires once its month comes.
ONLINE_ABANDON = {19: outbox_partitions.abandon_conversion}
ONLINE_LOCK_TIMEOUT = "2s"
ONLINE_ATTEMPTS = 30


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    sql: str

    @property
    def checksum(self) -> str:
        return hashlib.sha256(self.sql.encode()).hexdigest()


def available_migrations() -> list[Migration]:
    found: list[Migration] = []
    for entry in resources.files("cronwarden.store").joinpath("migrations").iterdir():
        match = _NAME.match(entry.name)
        if match is None:
            continue
        found.append(Migration(int(match[1]), match[2], entry.read_text(encoding="utf-8")))
    found.sort(key=lambda m: m.version)
    versions = [m.version for m in found]
    if len(set(versions)) != len(versions):
        raise CronwardenError(f"two migrations share a version number: {versions}")
    return found


async def migrate(conn: asyncpg.Connection, *, through: int | None = None) -> list[Migration]:
    """Apply every pending migration (up to version `through`, for tests that need an older
    schema); returns the ones this call applied."""
    applied_now: list[Migration] = []
    # Polled, not waited for: a session waiting inside `pg_advisory_lock` is a transaction in
    # progress, which a CREATE INDEX CONCURRENTLY of the holder (an online migration) waits
    # out, while it waits for the holder: a deadlock.
    while True:
        if await conn.fetchval("SELECT pg_try_advisory_lock($1)", MIGRATION_LOCK_KEY):
            break
        await asyncio.sleep(LOCK_POLL_SECONDS)
    try:
        await conn.execute(f"CREATE SCHEMA IF NOT EXISTS cronwarden;\n{LEDGER_DDL}")
        rows = await conn.fetch("SELECT version, name, checksum FROM cronwarden.schema_migrations")
        done = {r["version"]: r for r in rows}
        for migration in available_migrations():
            if through is not None and migration.version > through:
                break
            row = done.get(migration.version)
            if row is not None:
                if row["checksum"] != migration.checksum:
                    # Forward-only: a released migration that changed would leave databases
                    # migrated before and after the edit in different shapes.
                    raise CronwardenError(
                        f"migration {migration.version:04d}_{migration.name} was edited after it "
                        "was applied; add a new migration instead"
                    )
                continue
            prepare = ONLINE_PREPARATIONS.get(migration.version)
            if prepare is None:
                await _apply(conn, migration)
            else:
                try:
                    await prepare(conn)
                    await _apply_online(conn, migration)
                except BaseException:
                    # Best effort: the error that stopped the migration is the one to report.
                    # Left behind, the bound refuses fires only from its month on, a month or
                    # more away, and the next migrate sets it afresh.
                    with contextlib.suppress(Exception):
                        await ONLINE_ABANDON[migration.version](conn)
                    raise
            applied_now.append(migration)
            # At once, not at the end: a table a migration (re)creates gets the migrator's
            # default grants, UPDATE and DELETE on the outbox included, and a later step that
            # fails must not leave the runtime role able to delete the records exactly-once
            # rests on.
            await conn.execute(RUNTIME_EXCEPTIONS)
        await conn.execute(RUNTIME_EXCEPTIONS)
        if through is None:
            # Every migrate makes sure the outbox's months ahead exist (the monitor does too).
            await outbox_partitions.create_ahead(conn)
    finally:
        await conn.execute("SELECT pg_advisory_unlock($1)", MIGRATION_LOCK_KEY)
    return applied_now


async def _apply(conn: asyncpg.Connection, migration: Migration, *, lock_timeout: str = "") -> None:
    async with conn.transaction():
        if lock_timeout:
            await conn.execute(f"SET LOCAL lock_timeout = '{lock_timeout}'")
        await conn.execute(migration.sql)
        await conn.execute(
            "INSERT INTO cronwarden.schema_migrations (version, name, checksum)"
            " VALUES ($1, $2, $3)",
            migration.version,
            migration.name,
            migration.checksum,
        )


async def _apply_online(conn: asyncpg.Connection, migration: Migration) -> None:
    for attempt in range(ONLINE_ATTEMPTS):
        try:
            await _apply(conn, migration, lock_timeout=ONLINE_LOCK_TIMEOUT)
            return
        except asyncpg.LockNotAvailableError:
            # Rolled back whole; commits that queued behind the wait go on meanwhile.
            if attempt == ONLINE_ATTEMPTS - 1:
                raise CronwardenError(
                    f"migration {migration.version:04d}_{migration.name} could not take its "
                    f"locks in {ONLINE_ATTEMPTS} tries of {ONLINE_LOCK_TIMEOUT}: a transaction "
                    "holds cronwarden.outbox for long (see pg_stat_activity); run migrate again"
                ) from None
            await asyncio.sleep(min(0.2 * 2**attempt, 5.0))


async def pending_migrations(conn: asyncpg.Connection) -> list[Migration]:
    """The migrations this code has and the database has not applied. Read-only: the runtime
    role may ask, and nothing is locked."""
    try:
        rows = await conn.fetch("SELECT version FROM cronwarden.schema_migrations")
    except asyncpg.UndefinedTableError:  # never migrated: no schema, no ledger
        rows = []
    done = {r["version"] for r in rows}
    return [m for m in available_migrations() if m.version not in done]


async def wait_until_migrated(conn: asyncpg.Connection, *, timeout: float) -> list[Migration]:
    """Poll until nothing is pending or `timeout` seconds passed; what is still pending.

    Workers run this before they start, so a new image never polls against the schema of the
    previous one while the release's migrate step is still applying this one's migrations."""
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        pending = await pending_migrations(conn)
        if not pending or asyncio.get_running_loop().time() >= deadline:
            return pending
        await asyncio.sleep(min(2.0, max(deadline - asyncio.get_running_loop().time(), 0.0)))
