"""Real servers for integration tests: one embedded Postgres and one Temporal dev server per
session; a fresh database (copied from a migrated template) and a fresh task queue per test."""

from __future__ import annotations

import asyncio
import os
import sys
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any, TypeVar

import asyncpg
import pytest
import pytest_asyncio
from temporalio.client import Client
from temporalio.worker import Worker

import tests.jobs  # noqa: F401  (registers the test jobs in REGISTRY, for in-process workers)
from cronwarden.activities.jobs import REGISTRY, JobRegistry
from cronwarden.config import Settings
from cronwarden.embedded import EmbeddedPostgres, EmbeddedTemporal, free_port
from cronwarden.store.pool import create_pool
from cronwarden.worker_runtime import build_worker
from tests.support.database import create_test_database

REPO_ROOT = Path(__file__).resolve().parents[2]
TEMPLATE_DB = "cw_template"
T = TypeVar("T")


def embedded_postgres(root: Path) -> EmbeddedPostgres:
    """A throwaway Postgres under `root` (fsync off: tests never survive a host crash)."""
    return EmbeddedPostgres(
        data_dir=root / "data", port=free_port(), fast_unsafe=True, log_file=root / "pg.log"
    )


def embedded_temporal(root: Path, *, persisted: bool = False) -> EmbeddedTemporal:
    """A Temporal dev server; `persisted` keeps its state in a SQLite file across restarts."""
    return EmbeddedTemporal(
        port=free_port(),
        ui_port=None,
        db_file=root / "temporal.db" if persisted else None,
        log_file=root / "temporal.log",
    )


@pytest.fixture(scope="session")
def postgres_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedPostgres]:
    with embedded_postgres(tmp_path_factory.mktemp("postgres")) as server:
        yield server


@pytest.fixture(scope="session")
def temporal_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedTemporal]:
    with embedded_temporal(tmp_path_factory.mktemp("temporal")) as server:
        yield server


@pytest_asyncio.fixture(scope="session", loop_scope="session")
async def template_db(postgres_server: EmbeddedPostgres) -> str:
    await create_test_database(postgres_server, TEMPLATE_DB)
    return TEMPLATE_DB


@pytest.fixture
def database(postgres_server: EmbeddedPostgres, template_db: str) -> str:
    """DSN of a new database holding the migrated schema, private to this test."""
    name = f"t_{uuid.uuid4().hex[:16]}"
    postgres_server.create_database(name, template=template_db, exists_ok=False)
    return postgres_server.dsn(name)


@pytest_asyncio.fixture(loop_scope="session")
async def pool(database: str) -> AsyncIterator[asyncpg.Pool]:
    p = await create_pool(database, max_size=30)
    try:
        yield p
    finally:
        await p.close()


@pytest_asyncio.fixture(scope="session", loop_scope="session")
async def client(temporal_server: EmbeddedTemporal) -> Client:
    return await Client.connect(temporal_server.address)


@pytest.fixture
def task_queue() -> str:
    return f"tq-{uuid.uuid4().hex}"


@pytest.fixture
def schedule_id() -> str:
    return f"s-{uuid.uuid4().hex[:12]}"


def in_process_worker(
    client: Client, pool: asyncpg.Pool, task_queue: str, registry: JobRegistry = REGISTRY
) -> Worker:
    return build_worker(
        client=client,
        pool=pool,
        registry=registry,
        task_queue=task_queue,
        graceful_shutdown=timedelta(seconds=5),
    )


@pytest_asyncio.fixture(loop_scope="session")
async def worker(client: Client, pool: asyncpg.Pool, task_queue: str) -> AsyncIterator[Worker]:
    async with in_process_worker(client, pool, task_queue) as w:
        yield w


@pytest.fixture
def cli_env(database: str, temporal_server: EmbeddedTemporal, task_queue: str) -> dict[str, str]:
    """Environment for a cronwarden subprocess pointed at this test's servers."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CRONWARDEN_")}
    env.update(
        CRONWARDEN_TEMPORAL_ADDRESS=temporal_server.address,
        CRONWARDEN_DATABASE_URL=database,
        CRONWARDEN_JOBS="tests.jobs",
        CRONWARDEN_TASK_QUEUE=task_queue,
        PYTHONPATH=str(REPO_ROOT),
    )
    return env


def worker_settings(temporal_server: EmbeddedTemporal, task_queue: str, **values: Any) -> Settings:
    """Settings for an in-process `run_worker` on this test's servers and task queue."""
    return Settings(
        _env_file=None,  # type: ignore[call-arg]
        temporal_address=temporal_server.address,
        task_queue=task_queue,
        jobs="tests.jobs",
        **values,
    )


def cronwarden_argv(*args: str) -> list[str]:
    return [sys.executable, "-m", "cronwarden", *args]


async def wait_for(
    check: Callable[[], Awaitable[T]], *, timeout: float, what: str, interval: float = 0.2
) -> T:
    """Poll `check` until it returns something truthy; fail naming `what` at the deadline."""
    deadline = time.monotonic() + timeout
    last: T | None = None
    while time.monotonic() < deadline:
        last = await check()
        if last:
            return last
        await asyncio.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what} (last: {last!r})")


async def fetch(dsn_or_pool: Any, query: str, *args: Any) -> list[asyncpg.Record]:
    async with dsn_or_pool.acquire() as conn:
        rows: list[asyncpg.Record] = await conn.fetch(query, *args)
        return rows
