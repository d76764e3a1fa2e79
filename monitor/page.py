"""The status page: `/` lists every schedule with its health and recent fire slots,
`/schedules/{id}` one schedule's slots in full. Read-only, server-rendered, nothing loaded from
elsewhere (it works offline), every value escaped by the template engine.

Who may read it (`CRONWARDEN_STATUS_PAGE`): by default only clients on the loopback interface.
The port also serves /metrics and the probes, which Prometheus and the kubelet reach on the
pod's address, so the page cannot rely on the bind address to stay private: it checks the
peer. `kubectl port-forward` arrives on loopback, so an operator still reaches it that way.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import hmac
import ipaddress
from dataclasses import dataclass
from datetime import timedelta
from typing import Any
from urllib.parse import quote

import asyncpg
from aiohttp import web
from jinja2 import Environment, PackageLoader, select_autoescape

from cronwarden.activities.contract import format_fire_time
from cronwarden.logs import get_logger
from cronwarden.monitor import timeline
from cronwarden.monitor.passes import DATABASE_ERRORS
from cronwarden.monitor.status_view import PageLimits, StatusView, TemporalClient, read_status
from cronwarden.schedules.health import format_age
from cronwarden.schedules.run_ids import replay_workflow_id
from cronwarden.store.pool import create_pool
from cronwarden.times import duration_text, utc_text

log = get_logger("cronwarden.monitor")

REFRESH_SECONDS = 30
LEGEND = (
    (timeline.COMMITTED, "committed"),
    (timeline.REPLAYED, "committed by a replay"),
    (timeline.RUNNING, "running"),
    (timeline.SKIPPED, "skipped at the lease"),
    (timeline.DUE, "due"),
    (timeline.MISSING, "missing"),
    (timeline.OFF_GRID, "triggered off the grid"),
)


@dataclass(frozen=True)
class PageAccess:
    who: str = "local"
    """`local` (loopback clients only), `any`, or `off`."""
    token: str | None = None


@dataclass(frozen=True)
class TemporalLinks:
    """Where a slot's run is in Temporal's Web UI."""

    ui_url: str
    namespace: str

    def _base(self) -> str:
        return f"{self.ui_url.rstrip('/')}/namespaces/{quote(self.namespace, safe='')}"

    def schedule(self, schedule_id: str) -> str:
        return f"{self._base()}/schedules/{quote(schedule_id, safe='')}"

    def slot(self, schedule_id: str, slot: timeline.Slot) -> str:
        record = slot.record
        if record is not None and record.workflow_id and record.run_id:
            return (
                f"{self._base()}/workflows/{quote(record.workflow_id, safe='')}"
                f"/{quote(record.run_id, safe='')}/history"
            )
        if slot.state == timeline.RUNNING:
            # A running fire is the schedule's own run, or a replay holding the lease; the list
            # finds whichever exists.
            ids = (
                f"{schedule_id}-{format_fire_time(slot.fire_time)}",
                replay_workflow_id(schedule_id, slot.fire_time),
            )
            query = " OR ".join(f'WorkflowId="{i}"' for i in ids)
            return f"{self._base()}/workflows?query={quote(query, safe='')}"
        # Nothing ran for this slot: the schedule itself (its skips, its pause) is what to see.
        return self.schedule(schedule_id)


def _environment() -> Environment:
    env = Environment(
        loader=PackageLoader("cronwarden.monitor", "templates"),
        autoescape=select_autoescape(["html"]),
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["utc"] = lambda t: utc_text(t) if t is not None else "—"
    env.filters["ago"] = lambda t, now: format_age(now - t)
    env.filters["duration"] = lambda d: duration_text(d) if isinstance(d, timedelta) else str(d)
    return env


class StatusPage:
    """The page's routes. It reads with a pool of its own, opened on the first request: a
    burst of page loads must never hold the connections the monitor's passes page with."""

    def __init__(
        self,
        dsn: str,
        temporal: TemporalClient,
        *,
        access: PageAccess,
        links: TemporalLinks | None,
        limits: PageLimits | None = None,
        database_timeout: float = 10.0,
    ) -> None:
        self._dsn = dsn
        self._pool: asyncpg.Pool | None = None
        self._pool_lock = asyncio.Lock()
        self._database_timeout = database_timeout
        self._temporal = temporal
        self._access = access
        self._links = links
        self._limits = limits or PageLimits()
        self._env = _environment()

    def add_routes(self, app: web.Application) -> None:
        if self._access.who == "off":
            return
        app.router.add_get("/", self.overview)
        app.router.add_get("/schedules/{schedule_id}", self.schedule)

    def _allowed(self, request: web.Request) -> web.Response | None:
        """None when the request may read the page, else the refusal to answer with."""
        if self._access.who == "local" and not _local(request):
            return web.Response(
                status=403,
                text="the status page answers local clients only "
                "(CRONWARDEN_STATUS_PAGE=any opens it; set CRONWARDEN_STATUS_PAGE_TOKEN too)\n",
            )
        if self._access.token is not None and not _token_matches(request, self._access.token):
            return web.Response(
                status=401,
                text="the status page needs its token\n",
                headers={"WWW-Authenticate": 'Bearer, Basic realm="cronwarden status"'},
            )
        return None

    async def close(self) -> None:
        if self._pool is not None:
            await self._pool.close()
            self._pool = None

    async def _read(self, only: str | None = None) -> StatusView | web.Response:
        """The view, or a 503 naming the database failure (never a traceback page)."""
        pool: asyncpg.Pool | None = None
        try:
            async with self._pool_lock:
                if self._pool is None:
                    self._pool = await create_pool(
                        self._dsn, min_size=0, max_size=2, command_timeout=self._database_timeout
                    )
                pool = self._pool
            # Every statement is bounded by the command timeout and Temporal by the page's own
            # deadline; this bounds the wait for one of the pool's two connections.
            async with asyncio.timeout(self._database_timeout + self._limits.temporal_timeout):
                return await read_status(pool, self._temporal, limits=self._limits, only=only)
        except DATABASE_ERRORS as exc:
            log.warning("monitor.status-page-database-failed", error=f"{type(exc).__name__}: {exc}")
            if pool is not None and not isinstance(exc, TimeoutError):
                # Connections a database restart broke fail once: the next request starts
                # afresh. Only the pool this request used (another may have replaced it), and
                # never after a wait on a busy pool, which says nothing of its connections.
                if self._pool is pool:
                    self._pool = None
                pool.terminate()
            return web.Response(
                status=503, text=f"cannot read the database ({type(exc).__name__})\n"
            )

    async def overview(self, request: web.Request) -> web.Response:
        refused = self._allowed(request)
        if refused is not None:
            return refused
        view = await self._read()
        if isinstance(view, web.Response):
            return view
        shown = sum(s.slots is not None for s in view.schedules)
        return self._render(
            "overview.html", view=view, root="./", hidden=len(view.schedules) - shown
        )

    async def schedule(self, request: web.Request) -> web.Response:
        refused = self._allowed(request)
        if refused is not None:
            return refused
        schedule_id = request.match_info["schedule_id"]
        view = await self._read(only=schedule_id)
        if isinstance(view, web.Response):
            return view
        if not view.schedules:
            return web.Response(status=404, text=f"no schedule '{schedule_id}' in the heartbeats\n")
        [s] = view.schedules
        return self._render(
            "schedule.html",
            view=view,
            s=s,
            root="../",
            temporal_schedule=self._links.schedule(s.schedule_id) if self._links else None,
        )

    def _render(self, template: str, **context: Any) -> web.Response:
        html = self._env.get_template(template).render(
            legend=LEGEND,
            refresh_seconds=REFRESH_SECONDS,
            link=self._slot_link,
            **context,
        )
        return web.Response(text=html, content_type="text/html")

    def _slot_link(self, schedule_id: str, slot: timeline.Slot) -> str | None:
        return self._links.slot(schedule_id, slot) if self._links else None


# A browser on this host names the page by one of these; anything else reached it some other
# way: a rebinding DNS name, or a proxy on the loopback interface (a service mesh's sidecar
# delivers the pod's inbound traffic from 127.0.0.6) passing on a client from elsewhere.
_LOCAL_HOSTS = frozenset({"localhost", "127.0.0.1", "[::1]"})
_PROXY_HEADERS = ("Forwarded", "X-Forwarded-For", "X-Real-IP")


def _local(request: web.Request) -> bool:
    """A client on this host, talking to it directly."""
    return (
        _from_loopback(request)
        and _host_name(request.host or "") in _LOCAL_HOSTS
        and not any(h in request.headers for h in _PROXY_HEADERS)
    )


def _host_name(host: str) -> str:
    """The Host header without its port: `[::1]:8234` is `[::1]`, `localhost:8234` `localhost`."""
    host = host.lower()
    if host.startswith("["):
        return host[: host.find("]") + 1]
    return host.partition(":")[0]


def _from_loopback(request: web.Request) -> bool:
    peer = request.remote
    if not peer:
        return False
    try:
        address = ipaddress.ip_address(peer)
    except ValueError:
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return address.is_loopback


def _token_matches(request: web.Request, token: str) -> bool:
    header = request.headers.get("Authorization", "")
    scheme, _, value = header.partition(" ")
    offered: str | None = None
    if scheme.lower() == "bearer":
        offered = value.strip()
    elif scheme.lower() == "basic":
        # A browser asks for a user name and a password: the password is the token.
        try:
            offered = base64.b64decode(value.strip(), validate=True).decode().partition(":")[2]
        except (binascii.Error, UnicodeDecodeError):
            offered = None
    return offered is not None and hmac.compare_digest(offered.encode(), token.encode())
