"""deploy/sql/roles.sql on a real Postgres: the migrator owns the schema, the runtime role can
run the worker's statements and nothing more."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import asyncpg
import pytest
import pytest_asyncio
from temporalio.client import Client

import tests.support.jobs
from cronwarden.activities.contract import RAN, logical_key
from cronwarden.embedded import EmbeddedPostgres
from cronwarden.store.migrate import available_migrations, migrate
from cronwarden.store.pool import connect, create_pool
from tests.support.cli import cli
from tests.support.paths import REPO_ROOT
from tests.support.runs import FIRE, effects, start_run
from tests.support.servers import embedded_postgres, in_process_worker

pytestmark = pytest.mark.integration

ROLES_SQL = REPO_ROOT / "deploy" / "sql" / "roles.sql"
MIGRATOR = "cronwarden_migrator"
RUNTIME = "cronwarden_runtime"


def as_role(dsn: str, role: str) -> str:
    """The same database, logged in as `role` (the test cluster trusts local connections)."""
    parts = urlsplit(dsn)
    return urlunsplit(parts._replace(netloc=f"{role}@{parts.hostname}:{parts.port}"))


@pytest_asyncio.fixture(loop_scope="session")
async def roles(database: str) -> str:
    """Apply roles.sql as the superuser to this test's (already migrated) database."""
    conn = await connect(database)
    try:
        await conn.execute(ROLES_SQL.read_text())
    finally:
        await conn.close()
    return database


@pytest_asyncio.fixture(loop_scope="session")
async def runtime_conn(roles: str) -> AsyncIterator[asyncpg.Connection]:
    conn = await connect(as_role(roles, RUNTIME))
    try:
        yield conn
    finally:
        await conn.close()


@pytest.mark.parametrize(
    "statement",
    [
        "CREATE TABLE cronwarden.sneaky (id int)",
        "CREATE TABLE public.sneaky (id int)",
        "CREATE SCHEMA sneaky",
        "ALTER TABLE cronwarden.outbox ADD COLUMN sneaky text",
        "DROP TABLE cronwarden.locks",
        "TRUNCATE cronwarden.outbox",
        "CREATE INDEX sneaky ON cronwarden.outbox (worker)",
    ],
)
async def test_the_runtime_role_cannot_create_alter_or_drop(
    runtime_conn: asyncpg.Connection, statement: str
) -> None:
    with pytest.raises(asyncpg.InsufficientPrivilegeError):
        await runtime_conn.execute(statement)


DML = ("SELECT", "INSERT", "UPDATE", "DELETE")
# What the runtime role may do where it differs from full DML; every other table gets DML.
EXCEPTIONS = {
    "schema_migrations": {"SELECT"},
    "outbox": {"SELECT", "INSERT"},
    "change_log": {"SELECT", "INSERT"},
}


async def runtime_privileges(conn: asyncpg.Connection) -> dict[str, set[str]]:
    tables = [
        r["tablename"]
        for r in await conn.fetch(
            "SELECT tablename FROM pg_tables WHERE schemaname = 'cronwarden' ORDER BY tablename"
        )
    ]
    found: dict[str, set[str]] = {}
    for table in tables:
        found[table] = {
            p
            for p in (*DML, "TRUNCATE")
            if await conn.fetchval(
                "SELECT has_table_privilege($1, $2, $3)", RUNTIME, f"cronwarden.{table}", p
            )
        }
    return found


def intended(tables: dict[str, set[str]]) -> dict[str, set[str]]:
    return {t: EXCEPTIONS.get(t, set(DML)) for t in tables}


async def test_the_runtime_role_has_dml_on_every_cronwarden_table_but_the_ledger_and_outbox(
    roles: str, runtime_conn: asyncpg.Connection
) -> None:
    found = await runtime_privileges(runtime_conn)
    assert set(EXCEPTIONS) | {"locks", "heartbeats", "incidents"} <= set(found)
    assert found == intended(found)
    with pytest.raises(asyncpg.InsufficientPrivilegeError):
        await runtime_conn.execute("DELETE FROM cronwarden.schema_migrations")
    with pytest.raises(asyncpg.InsufficientPrivilegeError):
        await runtime_conn.execute("DELETE FROM cronwarden.outbox")
    with pytest.raises(asyncpg.InsufficientPrivilegeError):
        await runtime_conn.execute("UPDATE cronwarden.outbox SET result = NULL")
    async with runtime_conn.transaction():
        token = await runtime_conn.fetchval("SELECT nextval('cronwarden.lock_tokens')")
        await runtime_conn.execute(
            "INSERT INTO cronwarden.locks (name, token, expires_at, acquired_at)"
            " VALUES ('roles-test', $1, now(), now())",
            token,
        )
        await runtime_conn.execute("UPDATE cronwarden.locks SET holder = 'x'")
        await runtime_conn.execute("INSERT INTO cronwarden.heartbeats (schedule_id) VALUES ('r')")
        await runtime_conn.execute("DELETE FROM cronwarden.heartbeats")


async def test_the_change_log_is_append_only_for_the_runtime_role(
    runtime_conn: asyncpg.Connection,
) -> None:
    """Who changed what stays as written: the runtime role (every command's) may add a row and
    read it, never rewrite, delete or truncate one."""
    await runtime_conn.execute(
        "INSERT INTO cronwarden.change_log (actor, action, schedule_id, reason)"
        " VALUES ('alice', 'pause', 'roles-log', 'disk swap')"
    )
    assert await runtime_conn.fetchval("SELECT actor FROM cronwarden.change_log") == "alice"
    for statement in (
        "UPDATE cronwarden.change_log SET actor = 'mallory'",
        "DELETE FROM cronwarden.change_log",
        "TRUNCATE cronwarden.change_log",
    ):
        with pytest.raises(asyncpg.InsufficientPrivilegeError):
            await runtime_conn.execute(statement)
    assert await runtime_conn.fetchval("SELECT actor FROM cronwarden.change_log") == "alice"


async def test_roles_applied_before_the_first_migration_grant_the_same(
    postgres_server: EmbeddedPostgres,
) -> None:
    name = f"fresh_{uuid.uuid4().hex[:12]}"
    postgres_server.create_database(name, exists_ok=False)
    dsn = postgres_server.dsn(name)
    admin = await connect(dsn)
    try:
        await admin.execute(ROLES_SQL.read_text())
        migrator = await connect(as_role(dsn, MIGRATOR))
        try:
            assert await migrate(migrator) == available_migrations()
        finally:
            await migrator.close()
        found = await runtime_privileges(admin)
    finally:
        await admin.close()
    assert found == intended(found)
    assert set(EXCEPTIONS) <= set(found)


async def test_the_monitor_runs_a_pass_as_the_runtime_role(
    roles: str, cli_env: dict[str, str]
) -> None:
    admin = await connect(roles)
    try:
        # A heartbeat long overdue, so the pass has something to open.
        await admin.execute(
            "INSERT INTO cronwarden.heartbeats (schedule_id, next_expected_at)"
            " VALUES ('roles-overdue', now() - interval '1 hour')"
        )
    finally:
        await admin.close()
    env = {**cli_env, "CRONWARDEN_DATABASE_URL": as_role(roles, RUNTIME)}
    watched = await cli(env, "monitor", "--once")
    assert watched.code == 0, watched
    admin = await connect(roles)
    try:
        assert await admin.fetchval("SELECT count(*) FROM cronwarden.monitor_state") == 1
        incidents = await admin.fetch("SELECT schedule_id, kind FROM cronwarden.incidents")
    finally:
        await admin.close()
    assert incidents, "the pass opened no incident"


async def test_the_migrator_owns_the_schema_and_later_tables_reach_the_runtime_role(
    roles: str, runtime_conn: asyncpg.Connection
) -> None:
    migrator = await connect(as_role(roles, MIGRATOR))
    try:
        assert await migrate(migrator) == []  # up to date, and allowed to check
        # What a later migration does: alter an existing table, add a new one.
        await migrator.execute("ALTER TABLE cronwarden.outbox ADD COLUMN later text")
        await migrator.execute("CREATE TABLE cronwarden.later_table (id bigserial, note text)")
        owners = await migrator.fetch(
            "SELECT DISTINCT pg_get_userbyid(c.relowner) AS owner FROM pg_class c"
            " JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = 'cronwarden'"
        )
        assert [r["owner"] for r in owners] == [MIGRATOR]
    finally:
        await migrator.close()
    await runtime_conn.execute("INSERT INTO cronwarden.later_table (note) VALUES ('covered')")
    assert await runtime_conn.fetchval("SELECT note FROM cronwarden.later_table") == "covered"


async def test_roles_sql_runs_again_without_change(roles: str) -> None:
    conn = await connect(roles)
    try:
        before = await conn.fetch("SELECT relname, relacl::text FROM pg_class ORDER BY relname")
        await conn.execute(ROLES_SQL.read_text())
        after = await conn.fetch("SELECT relname, relacl::text FROM pg_class ORDER BY relname")
    finally:
        await conn.close()
    assert before == after


async def test_a_worker_on_the_runtime_role_runs_and_commits(
    roles: str, client: Client, task_queue: str, schedule_id: str
) -> None:
    admin = await connect(roles)
    try:
        # The grant a user gives for the tables their jobs write.
        await admin.execute(f"GRANT SELECT, INSERT ON public.test_effects TO {RUNTIME}")
    finally:
        await admin.close()
    pool = await create_pool(as_role(roles, RUNTIME), max_size=6)
    try:
        async with in_process_worker(client, pool, task_queue):
            handle = await start_run(client, task_queue, schedule_id)
            outcome = await asyncio.wait_for(handle.result(), timeout=30)
        assert outcome.outcome == RAN
        assert await effects(pool, logical_key(schedule_id, FIRE)) == 1
        user = await pool.fetchval("SELECT current_user")
        assert user == RUNTIME
    finally:
        await pool.close()


async def test_the_runtime_role_may_check_migrations_but_not_apply_them(
    roles: str, cli_env: dict[str, str]
) -> None:
    env = {**cli_env, "CRONWARDEN_DATABASE_URL": as_role(roles, RUNTIME)}
    checked = await cli(env, "migrate", "--check")
    assert (checked.code, checked.stdout.strip()) == (0, "database is up to date")
    applied = await cli(env, "migrate")
    assert applied.code == 1
    assert "permission denied" in applied.stderr


ADMIN = "cloud_admin"


async def owners(conn: asyncpg.Connection) -> set[str]:
    """Who owns the schema and every relation, function and type in it."""
    rows = await conn.fetch(
        """
        SELECT pg_get_userbyid(nspowner) AS owner FROM pg_namespace WHERE nspname = 'cronwarden'
        UNION SELECT pg_get_userbyid(relowner) FROM pg_class
              WHERE relnamespace = 'cronwarden'::regnamespace
        UNION SELECT pg_get_userbyid(proowner) FROM pg_proc
              WHERE pronamespace = 'cronwarden'::regnamespace
        UNION SELECT pg_get_userbyid(typowner) FROM pg_type
              WHERE typnamespace = 'cronwarden'::regnamespace
        """
    )
    return {r["owner"] for r in rows}


@pytest.mark.parametrize("migrated_before", [False, True], ids=["fresh", "migrated-before"])
async def test_a_createrole_admin_that_is_no_superuser_sets_up_the_roles(
    tmp_path: Path,
    client: Client,
    task_queue: str,
    schedule_id: str,
    cli_env: dict[str, str],
    migrated_before: bool,
) -> None:
    """What managed Postgres gives you: an admin with CREATEROLE that owns the database, on a
    cluster of its own (roles are cluster-wide, and a CREATEROLE admin administers only the
    roles it created)."""
    with embedded_postgres(tmp_path) as server:
        root = await connect(server.dsn("postgres"))
        try:
            await root.execute(f"CREATE ROLE {ADMIN} LOGIN CREATEROLE")
            await root.execute(f"CREATE DATABASE app OWNER {ADMIN}")
        finally:
            await root.close()
        dsn = as_role(server.dsn("app"), ADMIN)
        admin = await connect(dsn)
        try:
            assert not await admin.fetchval(
                "SELECT rolsuper FROM pg_roles WHERE rolname = $1", ADMIN
            )
            await admin.execute(tests.support.jobs.EFFECTS_DDL)
            if migrated_before:  # the schema, its tables and its function owned by the admin
                await migrate(admin)
            await admin.execute(ROLES_SQL.read_text())
            await admin.execute(f"GRANT SELECT, INSERT ON public.test_effects TO {RUNTIME}")
        finally:
            await admin.close()

        migrator = await connect(as_role(dsn, MIGRATOR))
        try:
            await migrate(migrator)
            assert await owners(migrator) == {MIGRATOR}
            # A later migration that replaces the heartbeat trigger's function.
            definition = await migrator.fetchval(
                "SELECT pg_get_functiondef('cronwarden.heartbeats_set_alert_after'::regproc)"
            )
            await migrator.execute(definition)
        finally:
            await migrator.close()

        pool = await create_pool(as_role(dsn, RUNTIME), max_size=6)
        try:
            async with pool.acquire() as conn:
                found = await runtime_privileges(conn)
            assert found == intended(found)
            async with in_process_worker(client, pool, task_queue):
                handle = await start_run(client, task_queue, schedule_id)
                outcome = await asyncio.wait_for(handle.result(), timeout=30)
            assert outcome.outcome == RAN
            assert await effects(pool, logical_key(schedule_id, FIRE)) == 1
        finally:
            await pool.close()
        monitor = await cli(
            {**cli_env, "CRONWARDEN_DATABASE_URL": as_role(dsn, RUNTIME)}, "monitor", "--once"
        )
        assert monitor.code == 0, monitor
