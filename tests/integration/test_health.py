"""The health endpoints (the worker's and the monitor's), served in-process against the real
servers: liveness never depends on a server, readiness does."""

from __future__ import annotations

import asyncio
import re
import socket
from pathlib import Path

import asyncpg
import pytest
import structlog.testing
from pydantic import SecretStr
from temporalio.client import Client

from cronwarden.config import Settings
from cronwarden.embedded import EmbeddedTemporal, free_port
from cronwarden.errors import PortInUse
from cronwarden.health import WorkerReadiness, serve_health
from cronwarden.monitor.process import run_monitor
from cronwarden.store.pool import create_pool
from cronwarden.worker_runtime import run_worker
from tests.support.http_probe import Answer, http_get, http_get_text
from tests.support.servers import embedded_postgres, worker_settings
from tests.support.waiting import wait_for

pytestmark = pytest.mark.integration


async def test_the_health_endpoints_answer_as_specified(
    temporal_server: EmbeddedTemporal, client: Client, pool: asyncpg.Pool, task_queue: str
) -> None:
    port = free_port()
    settings = worker_settings(temporal_server, task_queue, health_port=port)
    stop = asyncio.Event()
    worker = asyncio.create_task(run_worker(settings, client=client, pool=pool, stop=stop))
    try:

        async def ready() -> Answer | None:
            answer = await http_get(port, "/readyz")
            return answer if answer.status == 200 else None

        answer = await wait_for(ready, timeout=30, what="/readyz to answer 200")
        assert answer is not None
        assert answer.body == {
            "ready": True,
            "checks": {"worker": "ok", "temporal": "ok", "postgres": "ok"},
        }
        assert await http_get(port, "/healthz") == Answer(200, {"status": "ok"})
        assert await http_get(port, "/readyz?verbose=1") == answer
        assert (await http_get(port, "/healthz", method="HEAD")) == Answer(200, {})
        assert (await http_get_text(port, "/metrics"))[0] == 200
        assert (await http_get(port, "/healthz", method="POST")).status == 405

        stop.set()
        draining = await http_get(port, "/readyz")
        assert draining == Answer(503, {"ready": False, "checks": {"worker": "draining"}})
    finally:
        stop.set()
        await worker
    # Gone with the worker.
    assert (await http_get(port, "/healthz")).status == 0


async def test_readiness_names_the_server_that_does_not_answer(
    temporal_server: EmbeddedTemporal, client: Client, database: str
) -> None:
    dead_port = free_port()
    dead_temporal = await Client.connect(f"127.0.0.1:{dead_port}", lazy=True)
    pool = await create_pool(database, max_size=2)
    readiness = WorkerReadiness(
        client=dead_temporal, pool=pool, polling=lambda: True, draining=lambda: False
    )
    with structlog.testing.capture_logs() as logs:
        state = await readiness.check()
    assert state.ready is False
    assert state.checks["postgres"] == "ok" and state.checks["worker"] == "ok"
    # The body gives the kind of failure only; where it tried to connect goes to the log.
    assert re.fullmatch(r"failed \(\w+\)|no answer within .*", state.checks["temporal"])
    assert str(dead_port) not in state.checks["temporal"]
    [failed] = [e for e in logs if e["event"] == "health.probe_failed"]
    assert failed["server"] == "temporal" and str(dead_port) in failed["error"]

    cached = WorkerReadiness(
        client=client, pool=pool, polling=lambda: True, draining=lambda: False, cache_seconds=3600
    )
    assert (await cached.check()).ready is True
    await pool.close()
    # Within the cache period a probe does not touch the servers; a fresh one sees the loss.
    assert (await cached.check()).ready is True
    fresh = WorkerReadiness(
        client=client, pool=pool, polling=lambda: True, draining=lambda: False, cache_seconds=0
    )
    state = await fresh.check()
    assert state.ready is False and state.checks["postgres"] == "failed (InterfaceError)"
    assert state.checks["temporal"] == "ok"


async def test_a_health_port_in_use_is_refused_naming_the_port(
    client: Client, pool: asyncpg.Pool
) -> None:
    with socket.socket() as taken:
        taken.bind(("0.0.0.0", 0))
        taken.listen()
        port = taken.getsockname()[1]
        readiness = WorkerReadiness(
            client=client, pool=pool, polling=lambda: True, draining=lambda: False
        )
        with pytest.raises(PortInUse, match=f"health port {port} is in use"):
            async with serve_health(port, readiness):
                pass


async def test_with_postgres_and_temporal_down_the_worker_is_alive_and_not_ready(
    tmp_path: Path,
) -> None:
    dead_temporal = await Client.connect(f"127.0.0.1:{free_port()}", lazy=True)
    with embedded_postgres(tmp_path) as postgres:
        pool = await create_pool(postgres.dsn("postgres"), max_size=2)
    # The server is stopped: the pool's connections are dead, and new ones are refused.
    readiness = WorkerReadiness(
        client=dead_temporal, pool=pool, polling=lambda: True, draining=lambda: False
    )
    port = free_port()
    try:
        async with serve_health(port, readiness):
            assert await http_get(port, "/healthz") == Answer(200, {"status": "ok"})
            answer = await http_get(port, "/readyz")
            assert answer.status == 503
            assert answer.body["checks"]["worker"] == "ok"
            assert answer.body["checks"]["postgres"] != "ok"
            assert answer.body["checks"]["temporal"] != "ok"
    finally:
        pool.terminate()


async def test_with_postgres_down_the_monitor_is_alive_and_not_ready() -> None:
    # Nothing listens on this port: every pass fails to reach the database.
    settings = Settings(database_url=SecretStr(f"postgresql://postgres@127.0.0.1:{free_port()}/x"))
    port = free_port()
    stop = asyncio.Event()
    with structlog.testing.capture_logs() as logs:
        monitor = asyncio.create_task(
            run_monitor(settings, interval=0.2, metrics_port=port, stop=stop, handle_signals=False)
        )
        try:

            async def failed_twice() -> bool | None:
                failed = [e for e in logs if e["event"] == "monitor.database-unreachable"]
                return True if len(failed) >= 2 else None

            await wait_for(failed_twice, timeout=30, what="two passes that missed the database")
            assert await http_get_text(port, "/healthz") == (200, "ok\n")
            status, _ = await http_get_text(port, "/readyz")
            assert status == 503
        finally:
            stop.set()
            await asyncio.wait_for(monitor, timeout=30)
