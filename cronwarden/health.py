"""The worker's health endpoints, for Kubernetes probes.

- `/healthz`: the process and its event loop answer. A worker whose loop is wedged stops
  answering, and the liveness probe restarts it.
- `/readyz`: the worker polls its task queue, is not draining, and both Temporal and Postgres
  answered a probe. It turns 503 the moment a stop is requested, before the drain starts.

A tiny HTTP/1.1 responder on asyncio: two GET routes do not justify a web framework. Probe results
are cached briefly, so a probe every few seconds from several kubelets costs the servers one
round trip each per cache period.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import asyncpg
from temporalio.api.workflowservice.v1 import GetSystemInfoRequest
from temporalio.client import Client

from cronwarden.errors import PortInUse
from cronwarden.logs import get_logger

log = get_logger("cronwarden.health")

OK = "ok"
PROBE_TIMEOUT_SECONDS = 2.0
CACHE_SECONDS = 2.0
_READ_TIMEOUT_SECONDS = 5.0
_MAX_HEADER_LINES = 100


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


def _response(status: int, reason: str, body: dict[str, Any], *, head: bool) -> bytes:
    payload = json.dumps(body, sort_keys=True).encode()
    lines = [
        f"HTTP/1.1 {status} {reason}",
        "Content-Type: application/json",
        f"Content-Length: {len(payload)}",
        "Cache-Control: no-store",
        "Connection: close",
    ]
    return "\r\n".join(lines).encode() + b"\r\n\r\n" + (b"" if head else payload)


class HealthServer:
    def __init__(self, readiness: WorkerReadiness) -> None:
        self._readiness = readiness

    async def respond(self, method: str, path: str) -> bytes:
        head = method == "HEAD"
        if method not in {"GET", "HEAD"}:
            return _response(405, "Method Not Allowed", {"error": "GET only"}, head=head)
        route = path.split("?", 1)[0]
        if route == "/healthz":
            return _response(200, "OK", {"status": OK}, head=head)
        if route == "/readyz":
            state = await self._readiness.check()
            body = {"ready": state.ready, "checks": state.checks}
            if state.ready:
                return _response(200, "OK", body, head=head)
            return _response(503, "Service Unavailable", body, head=head)
        return _response(404, "Not Found", {"error": f"no route {route}"}, head=head)

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            async with asyncio.timeout(_READ_TIMEOUT_SECONDS):
                request_line = (await reader.readline()).decode("latin-1").split()
                for _ in range(_MAX_HEADER_LINES):
                    if (await reader.readline()) in (b"\r\n", b"\n", b""):
                        break
            if len(request_line) != 3:
                response = _response(400, "Bad Request", {"error": "bad request line"}, head=False)
            else:
                response = await self.respond(request_line[0], request_line[1])
            writer.write(response)
            await writer.drain()
        except (TimeoutError, ConnectionError):
            pass  # a prober that went away or never spoke: nothing to answer
        finally:
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()


@contextlib.asynccontextmanager
async def serve_health(port: int, readiness: WorkerReadiness) -> AsyncIterator[asyncio.Server]:
    """Serve /healthz and /readyz on every interface at `port` for the life of the block."""
    try:
        # host=None: every interface, IPv4 and IPv6, as a pod's probes need.
        server = await asyncio.start_server(HealthServer(readiness).handle, host=None, port=port)
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            raise PortInUse(
                f"the health port {port} is in use; choose another with --health-port "
                "or CRONWARDEN_HEALTH_PORT"
            ) from exc
        raise
    log.info("health.serving", port=port)
    try:
        yield server
    finally:
        server.close()
        await server.wait_closed()
