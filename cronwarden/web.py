"""What the worker's health port and the monitor's HTTP port share: starting an aiohttp
application on a port with errors a user can act on, and the Prometheus exposition."""

from __future__ import annotations

import contextlib
import errno
from collections.abc import AsyncIterator

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from cronwarden.errors import CronwardenError, PortInUse

# A request still in flight at shutdown gets this long: every route answers in well under it.
SHUTDOWN_SECONDS = 2.0


def metrics_response(registry: CollectorRegistry) -> web.Response:
    # The text format, not OpenMetrics: what every Prometheus scrapes by default.
    response = web.Response(body=generate_latest(registry))
    response.headers["Content-Type"] = CONTENT_TYPE_LATEST
    return response


@contextlib.asynccontextmanager
async def serving(
    app: web.Application, *, host: str | None, port: int, port_taken: str
) -> AsyncIterator[web.AppRunner]:
    """Serve `app` on `host` (None: every interface, IPv4 and IPv6, as a pod's probes and
    Prometheus need) at `port` for the life of the block. A port another process holds raises
    PortInUse with `port_taken` as its message."""
    runner = web.AppRunner(
        app,
        access_log=None,  # probes and scrapes every few seconds: the log would be nothing else
        shutdown_timeout=SHUTDOWN_SECONDS,
    )
    await runner.setup()
    try:
        await web.TCPSite(runner, host=host, port=port).start()
    except OSError as exc:
        await runner.cleanup()
        if exc.errno == errno.EADDRINUSE:
            raise PortInUse(port_taken) from None
        where = f"{host or 'every interface'} port {port}"
        raise CronwardenError(
            f"cannot serve HTTP on {where}: {exc.strerror or type(exc).__name__}"
        ) from None
    try:
        yield runner
    finally:
        await runner.cleanup()
