"""`cronwarden migrate --check [--wait]`: what a worker's init container runs, as the runtime role,
so a new worker never starts before the monitor's migrate step applied its migrations."""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import uuid
from pathlib import Path

import pytest

from cronwarden.embedded import EmbeddedPostgres
from cronwarden.store.migrate import (
    CHECK_APPLICATION_NAME,
    Migration,
    available_migrations,
    migrate,
)
from cronwarden.store.pool import connect
from tests.support.cli import cli, cronwarden_argv
from tests.support.paths import REPO_ROOT
from tests.support.waiting import wait_for

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


def pid_one_of(unshare_pid: int) -> int:
    """The host pid of the process `unshare --pid --fork` started as PID 1 of its namespace."""
    children = Path(f"/proc/{unshare_pid}/task/{unshare_pid}/children").read_text().split()
    [child] = [int(c) for c in children]
    nspids = next(
        line.split()[1:]
        for line in Path(f"/proc/{child}/status").read_text().splitlines()
        if line.startswith("NSpid:")
    )
    assert nspids[-1] == "1", nspids
    return child


async def test_a_waiting_check_running_as_pid_1_stops_on_sigterm(
    postgres_server: EmbeddedPostgres, cli_env: dict[str, str], tmp_path: Path
) -> None:
    """An init container's entrypoint is PID 1 of its PID namespace, where the kernel ignores a
    signal the process has no handler for: run it that way, as the runtime role would, with the
    DSN in a mounted file."""
    unshare = shutil.which("unshare")
    assert unshare is not None, "util-linux's unshare is needed to run a process as PID 1"
    name = f"empty_{uuid.uuid4().hex[:12]}"
    postgres_server.create_database(name, exists_ok=False)
    dsn_file = tmp_path / "runtime-url"
    dsn_file.write_text(postgres_server.dsn(name) + "\n")
    env = {k: v for k, v in cli_env.items() if k != "CRONWARDEN_DATABASE_URL"}
    env["CRONWARDEN_DATABASE_URL_FILE"] = str(dsn_file)
    waiting = await asyncio.create_subprocess_exec(
        unshare,
        "--pid",
        "--fork",
        "--kill-child",
        *cronwarden_argv("migrate", "--check", "--wait", "10m"),
        env=env,
        cwd=REPO_ROOT,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    observer = await connect(postgres_server.dsn(name))
    try:

        async def polling() -> bool:
            assert waiting.returncode is None, "the check exited before it was stopped"
            count: int = await observer.fetchval(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = $1"
                " AND application_name = $2",
                name,
                CHECK_APPLICATION_NAME,
            )
            return count > 0

        await wait_for(polling, timeout=30, what="the check to poll the database")
        os.kill(pid_one_of(waiting.pid), signal.SIGTERM)
        try:
            _, err = await asyncio.wait_for(waiting.communicate(), timeout=30)
        except TimeoutError:
            raise AssertionError("the check, PID 1 of its namespace, ignored SIGTERM") from None
    finally:
        await observer.close()
        if waiting.returncode is None:
            waiting.kill()  # unshare, and with it (--kill-child) its child
            await waiting.wait()
    assert waiting.returncode == 128 + signal.SIGTERM, err.decode()
