"""The worker's health endpoints, for Kubernetes probes.

- `/healthz`: the process and its event loop answer. A worker whose loop is wedged stops
  answering, and the liveness probe restarts it.
- `/readyz`: the worker polls its task queue, is not draining, and both Temporal and Postgres
  answered a probe. It turns 503 the moment a stop is requested, before the drain starts.

- `/metrics` (when the worker hands in its registry): its Prometheus metrics
  (`cronwarden/worker_metrics.py`).

Served by aiohttp, the exposition by the Prometheus client library. Probe results are cached
briefly, so a probe every few seconds from several kubelets costs the servers one
round trip each per cache period.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import asyncpg
from aiohttp import web
from prometheus_client import CollectorRegistry
from temporalio.api.workflowservice.v1 import GetSystemInfoRequest
from temporalio.client import Client

from cronwarden.logs import get_logger
from cronwarden.web import metrics_response, serving

log = get_logger("cronwarden.health")

OK = "ok"
PROBE_TIMEOUT_SECONDS = 2.0
CACHE_SECONDS = 2.0


@dataclass(frozen=True)
class Readiness:
    ready: bool
    checks: dict[str, str]
    """Each check's state: "ok", or why it is not."""


async def _probe(server: str, check: Callable[[], Awaitable[Any]]) -> str:
    try:
        await asyncio.wait_for(check(), PROBE_TIMEOUT_SECONDS)
    except TimeoutError:
        return f"no answer within {PROBE_TIMEOUT_SECONDS:g}s"
    except Exception as exc:  # any failure means "not ready"
        # The body is served to whoever reaches the port: it names the kind of failure only.
        # The message, which may name internal hosts and ports, goes to the log.
        log.warning("health.probe_failed", server=server, error=f"{type(exc).__name__}: {exc}")
        return f"failed ({type(exc).__name__})"
    return OK


class WorkerReadiness:
    """Whether a worker should count as ready. `polling` and `draining` read the worker's own
    state; the server probes are cached for `cache_seconds`."""

    def __init__(
        self,
        *,
        client: Client,
        pool: asyncpg.Pool,
        polling: Callable[[], bool],
        draining: Callable[[], bool],
        cache_seconds: float = CACHE_SECONDS,
    ) -> None:
        self._client = client
        self._pool = pool
        self._polling = polling
        self._draining = draining
        self._cache_seconds = cache_seconds
        self._probed_at = float("-inf")
        self._servers: dict[str, str] = {}
        self._lock = asyncio.Lock()

    async def _servers_state(self) -> dict[str, str]:
        # One probe at a time: concurrent requests wait for it and share its result.
        async with self._lock:
            if time.monotonic() - self._probed_at >= self._cache_seconds:
                temporal, postgres = await asyncio.gather(
                    _probe(
                        "temporal",
                        lambda: self._client.workflow_service.get_system_info(
                            GetSystemInfoRequest(),
                            timeout=timedelta(seconds=PROBE_TIMEOUT_SECONDS),
                        ),
                    ),
                    _probe("postgres", lambda: self._pool.fetchval("SELECT 1")),
                )
                self._servers = {"temporal": temporal, "postgres": postgres}
                self._probed_at = time.monotonic()
            return dict(self._servers)

    async def check(self) -> Readiness:
        if self._draining():
            # No probe: a draining worker is not ready whatever the servers say.
            return Readiness(False, {"worker": "draining"})
        checks = {"worker": OK if self._polling() else "not polling yet"}
        checks |= await self._servers_state()
        return Readiness(all(v == OK for v in checks.values()), checks)


def _json(status: int, body: dict[str, Any]) -> web.Response:
    return web.json_response(
        body, status=status, dumps=functools.partial(json.dumps, sort_keys=True)
    )


class HealthServer:
    """The routes. HEAD is answered for every GET route (aiohttp's `add_get`), without a body."""

    def __init__(self, readiness: WorkerReadiness, *, metrics: CollectorRegistry | None) -> None:
        self._readiness = readiness
        self._metrics = metrics

    def app(self) -> web.Application:
        app = web.Application(middlewares=[_plain_answers])
        app.router.add_get("/healthz", self.healthz)
        app.router.add_get("/readyz", self.readyz)
        if self._metrics is not None:
            app.router.add_get("/metrics", self.metrics)
        return app

    async def healthz(self, request: web.Request) -> web.Response:
        return _json(200, {"status": OK})

    async def readyz(self, request: web.Request) -> web.Response:
        state = await self._readiness.check()
        return _json(200 if state.ready else 503, {"ready": state.ready, "checks": state.checks})

    async def metrics(self, request: web.Request) -> web.Response:
        assert self._metrics is not None
        return metrics_response(self._metrics)


@web.middleware
async def _plain_answers(
    request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
) -> web.StreamResponse:
    """Errors as JSON like every other answer; nothing cached by a proxy; one request per
    connection, as probers make them (none of them holds a connection open for the next)."""
    response: web.StreamResponse
    try:
        response = await handler(request)
    except web.HTTPMethodNotAllowed:
        response = _json(405, {"error": "GET only"})
    except web.HTTPNotFound:
        response = _json(404, {"error": f"no route {request.path}"})
    response.headers["Cache-Control"] = "no-store"
    response.force_close()
    return response


@contextlib.asynccontextmanager
async def serve_health(
    port: int, readiness: WorkerReadiness, *, metrics: CollectorRegistry | None = None
) -> AsyncIterator[web.AppRunner]:
    """Serve /healthz and /readyz (and /metrics, given a registry) on every interface at
    `port` for the life of the block."""
    async with serving(
        HealthServer(readiness, metrics=metrics).app(),
        host=None,
        port=port,
        port_taken=f"the health port {port} is in use; choose another with --health-port "
        "or CRONWARDEN_HEALTH_PORT",
    ) as runner:
        log.info("health.serving", port=port, metrics=metrics is not None)
        yield runner
