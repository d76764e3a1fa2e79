"""The monitor pod's init container, exactly as rendered, run as the kubelet runs it: as PID 1 of
its own PID namespace, with the DSN in a mounted file. It waits for the release Job's migration
while Postgres answers, and never keeps the monitor from starting (and paging) while Postgres is
down."""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import socket
import sys
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from cronwarden.embedded import EmbeddedPostgres
from cronwarden.store.migrate import CHECK_APPLICATION_NAME, migrate
from cronwarden.store.pool import connect
from tests.support.manifests import render
from tests.support.paths import REPO_ROOT
from tests.support.waiting import wait_for

pytestmark = pytest.mark.integration

KUBERNETES = REPO_ROOT / "deploy" / "kubernetes"


def monitor_init() -> dict[str, Any]:
    [monitor] = [
        d
        for d in render(KUBERNETES)
        if d["kind"] in {"Deployment", "StatefulSet"}
        and d["metadata"]["name"] == "cronwarden-monitor"
    ]
    [init] = monitor["spec"]["template"]["spec"]["initContainers"]
    assert isinstance(init, dict)
    return init


def runtime_env(cli_env: dict[str, str], dsn: str, tmp_path: Path) -> dict[str, str]:
    """The container's environment: its settings, the DSN as the mounted file it reads, and the
    image's `cronwarden` on PATH."""
    dsn_file = tmp_path / "runtime-url"
    dsn_file.write_text(dsn + "\n")
    env = {k: v for k, v in cli_env.items() if k != "CRONWARDEN_DATABASE_URL"}
    env["CRONWARDEN_DATABASE_URL_FILE"] = str(dsn_file)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    return env


def as_pid_1(argv: list[str]) -> list[str]:
    """`argv` run as PID 1 of a new PID namespace, as the kubelet runs a container: the kernel
    delivers it no signal it set no handler for. Killing unshare kills the namespace."""
    unshare = shutil.which("unshare")
    assert unshare is not None, "util-linux's unshare is needed to run a process as PID 1"
    return [unshare, "--pid", "--fork", "--kill-child", *argv]


@asynccontextmanager
async def started_as_pid_1(env: dict[str, str]) -> AsyncIterator[asyncio.subprocess.Process]:
    """The rendered init container's command (the image's entrypoint when it names none)."""
    init = monitor_init()
    argv = as_pid_1([*init.get("command", ["cronwarden"]), *init.get("args", [])])
    pipe = asyncio.subprocess.PIPE
    process = await asyncio.create_subprocess_exec(
        *argv, env=env, cwd=REPO_ROOT, stdout=pipe, stderr=pipe
    )
    try:
        yield process
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()


def namespace_pid_1(unshare_pid: int) -> int:
    """The host pid of the process `unshare --fork` started as its namespace's PID 1."""
    [child] = Path(f"/proc/{unshare_pid}/task/{unshare_pid}/children").read_text().split()
    return int(child)


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


async def finished(process: asyncio.subprocess.Process) -> tuple[int, str]:
    out, err = await asyncio.wait_for(process.communicate(), timeout=60)
    assert process.returncode is not None
    return process.returncode, out.decode() + err.decode()


async def test_with_postgres_down_the_monitor_starts_anyway(
    cli_env: dict[str, str], tmp_path: Path
) -> None:
    dsn = f"postgresql://cronwarden_runtime:x@127.0.0.1:{closed_port()}/cronwarden"
    async with started_as_pid_1(runtime_env(cli_env, dsn, tmp_path)) as init:
        code, output = await finished(init)
    # A failed init container would hold the monitor back for as long as Postgres is down:
    # the one outage only the monitor can page.
    assert code == 0, output
    assert "starting the monitor anyway" in output


@pytest.fixture
def empty_database(postgres_server: EmbeddedPostgres) -> tuple[str, str]:
    """A database no migration ran in yet: a release whose Job has not migrated."""
    name = f"empty_{uuid.uuid4().hex[:12]}"
    postgres_server.create_database(name, exists_ok=False)
    return name, postgres_server.dsn(name)


@asynccontextmanager
async def waiting_for_migrations(
    cli_env: dict[str, str], tmp_path: Path, database: tuple[str, str]
) -> AsyncIterator[tuple[asyncio.subprocess.Process, asyncpg.Connection]]:
    """The init container started on `database` (no migration ran yet), once it is seen polling
    for the migrations; with a connection of the test's own to that database."""
    name, dsn = database
    observer = await connect(dsn)
    try:
        async with started_as_pid_1(runtime_env(cli_env, dsn, tmp_path)) as init:

            async def check_connected() -> bool:
                assert init.returncode is None, "the init container exited before the migration"
                rows = await observer.fetch(
                    "SELECT application_name FROM pg_stat_activity WHERE datname = $1", name
                )
                return CHECK_APPLICATION_NAME in {r["application_name"] for r in rows}

            await wait_for(check_connected, timeout=30, what="the init container to poll")
            yield init, observer
    finally:
        await observer.close()


async def test_with_postgres_up_the_monitor_waits_for_the_release_migration(
    cli_env: dict[str, str], tmp_path: Path, empty_database: tuple[str, str]
) -> None:
    async with waiting_for_migrations(cli_env, tmp_path, empty_database) as (init, observer):
        # The release Job's migrate lands; the monitor then starts on the new schema.
        await migrate(observer)
        code, output = await finished(init)
    assert code == 0, output
    assert "database is up to date" in output
    assert "starting the monitor anyway" not in output


async def test_a_waiting_monitor_init_container_stops_on_sigterm(
    cli_env: dict[str, str], tmp_path: Path, empty_database: tuple[str, str]
) -> None:
    async with waiting_for_migrations(cli_env, tmp_path, empty_database) as (init, _):
        os.kill(namespace_pid_1(init.pid), signal.SIGTERM)
        try:
            code, output = await finished(init)
        except TimeoutError:
            raise AssertionError("PID 1 of the init container ignored SIGTERM") from None
    # Stopped by the signal, not by the check giving up 10 minutes later.
    assert code == 128 + signal.SIGTERM, output
