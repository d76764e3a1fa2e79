"""`cronwarden migrate --check [--wait]`: what a worker's init container runs, as the runtime role,
so a new worker never starts before the migrate Job applied its migrations."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from cronwarden.embedded import EmbeddedPostgres
from store.migrate import CHECK_APPLICATION_NAME, Migration, available_migrations, migrate
from store.pool import connect
from tests.integration.conftest import REPO_ROOT, cronwarden_argv, wait_for
from tests.support.cli import cli

pytestmark = pytest.mark.integration


def pending_message(pending: list[Migration]) -> str:
    names = ", ".join(f"{m.version:04d}_{m.name}" for m in pending)
    return f"{len(pending)} migration(s) pending ({names})"


async def test_check_waits_for_the_migrations_to_land(
    postgres_server: EmbeddedPostgres, cli_env: dict[str, str]
) -> None:
    name = f"empty_{uuid.uuid4().hex[:12]}"
    postgres_server.create_database(name, exists_ok=False)
    dsn = postgres_server.dsn(name)
    env = {**cli_env, "CRONWARDEN_DATABASE_URL": dsn}

    pending = await cli(env, "migrate", "--check")
    assert pending.code == 1
    assert pending_message(available_migrations()) in pending.stderr

    waiting = await asyncio.create_subprocess_exec(
        *cronwarden_argv("migrate", "--check", "--wait", "60"),
        env=env,
        cwd=REPO_ROOT,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    observer = await connect(dsn)
    try:
        # The database is migrated only once the check has asked at least once, found migrations
        # pending and is still running: a check that ignored --wait would have exited by then.
        async def polled_and_still_waiting() -> bool:
            if waiting.returncode is not None:
                out, err = await waiting.communicate()
                raise AssertionError(
                    f"the check exited {waiting.returncode} before the migrations landed: "
                    f"{out.decode()}{err.decode()}"
                )
            polling: int = await observer.fetchval(
                "SELECT count(*) FROM pg_stat_activity"
                " WHERE datname = $1 AND application_name = $2 AND state = 'idle'"
                " AND query LIKE '%schema_migrations%'",
                name,
                CHECK_APPLICATION_NAME,
            )
            return polling > 0

        await wait_for(polled_and_still_waiting, timeout=30, what="the check to poll the database")
        assert waiting.returncode is None

        applied = await migrate(observer)
        assert applied == available_migrations()
        out, err = await asyncio.wait_for(waiting.communicate(), timeout=60)
        code = await waiting.wait()
    finally:
        await observer.close()
        if waiting.returncode is None:
            waiting.kill()
            await waiting.wait()
    assert code == 0, err.decode()
    assert out.decode().strip() == "database is up to date"


async def test_check_that_gives_up_names_what_is_still_pending(
    postgres_server: EmbeddedPostgres, cli_env: dict[str, str]
) -> None:
    name = f"empty_{uuid.uuid4().hex[:12]}"
    postgres_server.create_database(name, exists_ok=False)
    env = {**cli_env, "CRONWARDEN_DATABASE_URL": postgres_server.dsn(name)}

    result = await cli(env, "migrate", "--check", "--wait", "0.5")
    assert result.code == 1
    assert pending_message(available_migrations()) in result.stderr


async def test_wait_without_check_is_refused(cli_env: dict[str, str]) -> None:
    result = await cli(cli_env, "migrate", "--wait", "5")
    assert result.code == 2
    assert "--wait only applies with --check" in result.stderr
