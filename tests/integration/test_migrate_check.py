"""`cronwarden migrate --check [--wait]`: what a worker's init container runs, as the runtime role,
so a new worker never starts before the migrate Job applied its migrations."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from cronwarden.embedded import EmbeddedPostgres
from store.migrate import migrate
from store.pool import connect
from tests.integration.conftest import REPO_ROOT, cronwarden_argv
from tests.integration.test_cli import cli

pytestmark = pytest.mark.integration


async def test_check_waits_for_the_migrations_to_land(
    postgres_server: EmbeddedPostgres, cli_env: dict[str, str]
) -> None:
    name = f"empty_{uuid.uuid4().hex[:12]}"
    postgres_server.create_database(name, exists_ok=False)
    env = {**cli_env, "CRONWARDEN_DATABASE_URL": postgres_server.dsn(name)}

    pending = await cli(env, "migrate", "--check")
    assert pending.code == 1
    assert "1 migration(s) pending (0001_initial)" in pending.stderr

    waiting = await asyncio.create_subprocess_exec(
        *cronwarden_argv("migrate", "--check", "--wait", "60"),
        env=env,
        cwd=REPO_ROOT,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    conn = await connect(postgres_server.dsn(name))
    try:
        await migrate(conn)
    finally:
        await conn.close()
    out, err = await asyncio.wait_for(waiting.communicate(), timeout=60)
    assert waiting.returncode == 0, err.decode()
    assert out.decode().strip() == "database is up to date"


async def test_wait_without_check_is_refused(cli_env: dict[str, str]) -> None:
    result = await cli(cli_env, "migrate", "--wait", "5")
    assert result.code == 2
    assert "--wait only applies with --check" in result.stderr
