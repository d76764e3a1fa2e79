"""The fixtures of every test on real servers: one embedded Postgres and one Temporal dev server
per session; a fresh database (copied from a migrated template) and a fresh task queue per test.

A conftest registers them by importing them (tests/integration/conftest.py); the fault suite's
imports all but the two servers and defines its own, which the others then run on.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator, Iterator

import asyncpg
import pytest
import pytest_asyncio
from temporalio.client import Client
from temporalio.worker import Worker

from cronwarden.embedded import EmbeddedPostgres, EmbeddedTemporal
from cronwarden.store.pool import create_pool
from tests.support.database import create_test_database
from tests.support.paths import REPO_ROOT
from tests.support.servers import TEST_JOBS, embedded_postgres, embedded_temporal, in_process_worker

TEMPLATE_DB = "cw_template"


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
        CRONWARDEN_JOBS=TEST_JOBS,
        CRONWARDEN_TASK_QUEUE=task_queue,
        PYTHONPATH=str(REPO_ROOT),
    )
    return env
