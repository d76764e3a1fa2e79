"""Migrations on real, empty databases: once, twice, and from two processes at once."""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import uuid

import pytest

from cronwarden.embedded import EmbeddedPostgres
from cronwarden.embedded.postgres import postgres_bin_dir
from cronwarden.errors import CronwardenError
from cronwarden.store.migrate import available_migrations, migrate
from cronwarden.store.pool import connect
from tests.support.cli import cronwarden_argv
from tests.support.paths import REPO_ROOT

pytestmark = pytest.mark.integration

# The SQL contract of DESIGN.md: users query these columns, so they must exist by these names.
CONTRACT = {
    "outbox": {
        "logical_key",
        "schedule_id",
        "fire_time",
        "result",
        "committed_at",
        "attempt",
        "fencing_token",
        "worker",
    },
    "locks": {"name", "holder", "token", "expires_at"},
    "heartbeats": {
        "schedule_id",
        "last_logical_key",
        "last_fire_time",
        "last_success_at",
        "next_expected_at",
        "grace",
        "paused",
        "paused_reason",
        "last_error",
        "updated_at",
    },
}


def empty_database(server: EmbeddedPostgres) -> str:
    name = f"empty_{uuid.uuid4().hex[:12]}"
    server.create_database(name, exists_ok=False)
    return server.dsn(name)


async def applied_versions(dsn: str) -> list[int]:
    conn = await connect(dsn)
    try:
        rows = await conn.fetch("SELECT version FROM cronwarden.schema_migrations ORDER BY 1")
    finally:
        await conn.close()
    return [r["version"] for r in rows]


async def test_migrations_apply_to_an_empty_database_and_create_the_contract(
    postgres_server: EmbeddedPostgres,
) -> None:
    dsn = empty_database(postgres_server)
    conn = await connect(dsn)
    try:
        applied = await migrate(conn)
        columns = await conn.fetch(
            "SELECT table_name, column_name FROM information_schema.columns"
            " WHERE table_schema = 'cronwarden'"
        )
    finally:
        await conn.close()
    assert [m.version for m in applied] == [m.version for m in available_migrations()]
    found: dict[str, set[str]] = {}
    for row in columns:
        found.setdefault(row["table_name"], set()).add(row["column_name"])
    for table, wanted in CONTRACT.items():
        assert wanted <= found.get(table, set()), (
            f"{table} lacks {wanted - found.get(table, set())}"
        )


async def test_a_second_migrate_finds_nothing_to_do(postgres_server: EmbeddedPostgres) -> None:
    dsn = empty_database(postgres_server)
    for expected in (len(available_migrations()), 0):
        conn = await connect(dsn)
        try:
            assert len(await migrate(conn)) == expected
        finally:
            await conn.close()
    assert await applied_versions(dsn) == [m.version for m in available_migrations()]


async def test_two_processes_migrating_at_once_both_succeed_and_apply_each_once(
    postgres_server: EmbeddedPostgres,
) -> None:
    dsn = empty_database(postgres_server)
    env = {"CRONWARDEN_DATABASE_URL": dsn, "PATH": "/usr/bin:/bin"}
    procs = [
        await asyncio.create_subprocess_exec(
            *cronwarden_argv("--log-json", "migrate"),
            env=env,
            cwd=REPO_ROOT,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
        )
        for _ in range(2)
    ]
    results = await asyncio.gather(*(p.communicate() for p in procs))
    outputs = [out.decode() for out, _ in results]
    assert [p.returncode for p in procs] == [0, 0], outputs
    assert sum("applied 0001_initial" in out for out in outputs) == 1, outputs
    assert sum("up to date" in out for out in outputs) == 1, outputs
    assert await applied_versions(dsn) == [m.version for m in available_migrations()]


async def test_an_edited_migration_is_refused(postgres_server: EmbeddedPostgres) -> None:
    dsn = empty_database(postgres_server)
    conn = await connect(dsn)
    try:
        await migrate(conn)
        await conn.execute("UPDATE cronwarden.schema_migrations SET checksum = 'edited'")
        with pytest.raises(CronwardenError, match="edited after it was applied"):
            await migrate(conn)
    finally:
        await conn.close()


SCHEMA_SNAPSHOT = REPO_ROOT / "store" / "schema.sql"
SNAPSHOT_HEADER = """\
-- The schema `cronwarden migrate` builds, as pg_dump prints it: read this, not the migrations, to
-- see the tables. Never edit it: a migration changes the schema, then
-- `make schema` rewrites this file (tests/integration/test_migrations.py checks the two agree).
"""
# What differs between pg_dump runs or versions and says nothing about the schema.
_DUMP_NOISE = re.compile(
    r"^(\\(un)?restrict .*|-- Dumped (from|by) .*|SET .*|SELECT pg_catalog\..*)$"
)


def schema_dump(dsn: str) -> str:
    dumped = subprocess.run(
        [
            str(postgres_bin_dir() / "pg_dump"),
            *("--schema-only", "--schema=cronwarden", "--no-owner", "--no-privileges"),
            dsn,
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    lines = [line for line in dumped.splitlines() if not _DUMP_NOISE.match(line)]
    body = re.sub(r"\n{3,}", "\n\n", "\n".join(lines)).strip()
    return f"{SNAPSHOT_HEADER}\n{body}\n"


async def test_the_migrations_build_the_schema_of_the_snapshot(
    postgres_server: EmbeddedPostgres,
) -> None:
    dsn = empty_database(postgres_server)
    conn = await connect(dsn)
    try:
        await migrate(conn)
    finally:
        await conn.close()
    dumped = await asyncio.to_thread(schema_dump, dsn)
    if os.environ.get("WRITE_SCHEMA_SNAPSHOT") == "1":
        SCHEMA_SNAPSHOT.write_text(dumped)
    assert "CREATE TABLE cronwarden.outbox" in dumped
    assert SCHEMA_SNAPSHOT.read_text() == dumped, (
        "store/schema.sql is not what the migrations build: run `make schema` and commit it"
    )
