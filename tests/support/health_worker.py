"""An in-process worker serving its health port (and /metrics), for the tests that scrape it."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import asyncpg
from temporalio.client import Client

from cronwarden.config import Settings
from cronwarden.worker_runtime import run_worker
from tests.support.http_probe import http_get
from tests.support.waiting import wait_for


@asynccontextmanager
async def serving_worker(
    settings: Settings, *, client: Client, pool: asyncpg.Pool
) -> AsyncIterator[int]:
    """`run_worker` on `settings` (which name its health port), yielded once /readyz answers
    200; stopped (and awaited) on the way out. Yields the health port."""
    assert settings.health_port is not None
    port = settings.health_port
    stop = asyncio.Event()
    worker = asyncio.create_task(run_worker(settings, client=client, pool=pool, stop=stop))
    try:

        async def ready() -> bool | None:
            return True if (await http_get(port, "/readyz")).status == 200 else None

        await wait_for(ready, timeout=30, what="the worker to be ready")
        yield port
    finally:
        stop.set()
        await worker
