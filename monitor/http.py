"""The monitor's HTTP port: /metrics, /healthz, /readyz, and the status page.

`/healthz` (liveness) answers whenever the event loop does: a monitor that cannot reach the
database is alive, and restarting it would only repeat its "cannot reach the database" page.
`/readyz` (readiness) says whether a recent pass reached the database. Every answer, refusals
and errors included, carries the status page's security headers (monitor/page.py) and no-store.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable

from aiohttp import web

from cronwarden.logs import get_logger
from cronwarden.monitor.metrics import Metrics
from cronwarden.monitor.page import SECURITY_HEADERS, StatusPage
from cronwarden.web import metrics_response, serving

log = get_logger("cronwarden.monitor")


def monitor_app(
    metrics: Metrics, *, healthy: Callable[[], bool], page: StatusPage | None
) -> web.Application:
    async def metrics_route(request: web.Request) -> web.Response:
        return metrics_response(metrics.registry)

    async def healthz(request: web.Request) -> web.Response:
        return web.Response(text="ok\n")

    async def readyz(request: web.Request) -> web.Response:
        if healthy():
            return web.Response(text="ok\n")
        return web.Response(status=503, text="no recent pass reached the database\n")

    app = web.Application(middlewares=[_not_cached])
    app.router.add_get("/metrics", metrics_route)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    if page is not None:
        page.add_routes(app)
    return app


@web.middleware
async def _not_cached(
    request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
) -> web.StreamResponse:
    response: web.StreamResponse
    try:
        response = await handler(request)
    except web.HTTPMethodNotAllowed:
        response = web.Response(status=405, text="GET only\n", headers={"Allow": "GET, HEAD"})
    except web.HTTPNotFound:
        response = web.Response(status=404, text="not found\n")
    # Every answer is the state of one moment: a proxy must not serve it again later. One
    # request per connection, as probers and scrapers make them.
    response.headers["Cache-Control"] = "no-store"
    # Refusals and errors too: none of them may be framed or sniffed into something else.
    response.headers.update(SECURITY_HEADERS)
    response.force_close()
    return response


@contextlib.asynccontextmanager
async def serve_monitor(
    app: web.Application, *, host: str | None, port: int
) -> AsyncIterator[web.AppRunner]:
    """Serve the monitor's routes for the life of the block; host None: every interface."""
    where = f"{host or 'every interface'} port {port}"
    async with serving(
        app,
        host=host,
        port=port,
        port_taken=f"cannot serve metrics on {where}: another process uses that port "
        "(pick another with --metrics-port)",
    ) as runner:
        log.info("monitor.metrics-serving", host=host, port=port)
        yield runner
