"""The status page: `/` lists every schedule with its health and recent fire slots,
`/schedules/{id}` one schedule's slots in full. Read-only, server-rendered, nothing loaded from
elsewhere (it works offline), every value escaped by the template engine.

Who may read it (`CRONWARDEN_STATUS_PAGE`): by default only clients on the loopback interface.
The port also serves /metrics and the probes, which Prometheus and the kubelet reach on the
pod's address, so the page cannot rely on the bind address to stay private: it checks the
peer. `kubectl port-forward` arrives on loopback, so an operator still reaches it that way.

A request reads Postgres only (see monitor/status_view.py), and one read serves every request
for the same page for `PageLimits.fresh_for` seconds: a burst of loads is one read and one
rendering. Every answer forbids framing and loading anything but its own style, and a request a
browser marks as cross-site, or that names another origin, is refused.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import hashlib
import hmac
import ipaddress
import re
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any
from urllib.parse import quote, urlsplit

import asyncpg
from aiohttp import web
from jinja2 import Environment, PackageLoader, select_autoescape
from multidict import MultiMapping

from cronwarden.activities.contract import format_fire_time
from cronwarden.logs import get_logger
from cronwarden.monitor import timeline
from cronwarden.monitor.grids import GridCache, GridRefresher, RefreshPolicy, TemporalClient
from cronwarden.monitor.passes import DATABASE_ERRORS
from cronwarden.monitor.shared_read import SharedRead
from cronwarden.monitor.status_view import (
    PageLimits,
    Ranking,
    read_one,
    read_page,
    read_ranking,
)
from cronwarden.schedules.health import format_age
from cronwarden.schedules.local_times import local_or_none
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
    # A zoned schedule's time on its own wall clock (empty for a UTC schedule or no time).
    env.filters["local"] = lambda t, zone: local_or_none(t, zone) or ""
    env.filters["ago"] = lambda t, now: format_age(now - t)
    env.filters["duration"] = lambda d: duration_text(d) if isinstance(d, timedelta) else str(d)
    env.filters["clip"] = clip
    return env


def clip(text: object, limit: int = 300) -> str:
    """Text from runs and incidents, cut to `limit` characters: a page's size must not depend
    on how long an error or a system incident's summary is."""
    value = "" if text is None else str(text)
    return value if len(value) <= limit else f"{value[:limit]}… ({len(value):,} characters)"


def echoed(text: str, limit: int = 100) -> str:
    """What a client sent, quoted back in a plain-text refusal: cut, and escaped to ASCII, so
    bytes that were not UTF-8 (kept by the parser as lone surrogates) or control characters
    can neither break the answer nor reach a terminal as themselves."""
    return clip(ascii(text), limit)


def _style_hash(env: Environment) -> str:
    """The CSP source that allows the page's one inline style: the hash of the style element's
    text exactly as rendered (templates/style.html)."""
    rendered = env.get_template("style.html").render()
    css = rendered[rendered.index("<style>") + len("<style>") : rendered.rindex("</style>")]
    return "'sha256-" + base64.b64encode(hashlib.sha256(css.encode()).digest()).decode() + "'"


_ENV = _environment()
# Nothing but the page's own style may load: no script, no frame, no form, no other host.
# The favicon is an empty data: URL (see base.html), hence img-src data:.
CONTENT_SECURITY_POLICY = (
    f"default-src 'none'; style-src {_style_hash(_ENV)}; img-src data:; base-uri 'none'; "
    "form-action 'none'; frame-ancestors 'none'"
)
SECURITY_HEADERS: Mapping[str, str] = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Frame-Options": "DENY",  # frame-ancestors for browsers that predate it
    "Referrer-Policy": "no-referrer",
    "X-Content-Type-Options": "nosniff",
    "Cross-Origin-Resource-Policy": "same-origin",
}
"""Sent with every answer of the monitor's port (monitor/http.py)."""


class StatusPage:
    """The page's routes. It reads with a pool of its own, opened on the first request: a
    burst of page loads must never hold the connections the monitor's passes page with. What
    Temporal says comes from `grids`, which a background task started with the app fills."""

    def __init__(
        self,
        dsn: str,
        temporal: TemporalClient,
        *,
        access: PageAccess,
        links: TemporalLinks | None,
        limits: PageLimits | None = None,
        refresh: RefreshPolicy | None = None,
        database_timeout: float = 10.0,
    ) -> None:
        self._dsn = dsn
        self._pool: asyncpg.Pool | None = None
        self._pool_lock = asyncio.Lock()
        self._database_timeout = database_timeout
        self._access = access
        self._links = links
        self._limits = limits or PageLimits()
        # A grid holds the slots of the longest timeline: a schedule's own page.
        self.grids = GridCache(refresh or RefreshPolicy(slots=self._limits.detail_slots))
        self.refresher = GridRefresher(self.grids, temporal, self._open_pool)
        self._refreshing: asyncio.Task[None] | None = None
        fresh_for = self._limits.fresh_for
        # One ranking (every schedule's health) serves every page; a few rendered pages are
        # kept, each for the same short while.
        self._rankings: SharedRead[str, Ranking] = SharedRead(fresh_for=fresh_for, max_keys=1)
        self._bodies: SharedRead[tuple[str, str], bytes] = SharedRead(
            fresh_for=fresh_for, max_keys=16
        )

    @property
    def reads(self) -> int:
        """How many times every schedule's health was read from Postgres."""
        return self._rankings.computations

    def forget_answers(self) -> None:
        """The next request reads afresh (tests wait on a change this way)."""
        self._rankings.forget()
        self._bodies.forget()

    def add_routes(self, app: web.Application) -> None:
        if self._access.who == "off":
            return
        app.router.add_get("/", self.overview)
        app.router.add_get("/schedules/{schedule_id}", self.schedule)
        app.on_startup.append(self._start_refreshing)
        app.on_cleanup.append(self._stop_refreshing)

    async def _start_refreshing(self, app: web.Application) -> None:
        self._refreshing = asyncio.create_task(self.refresher.run(), name="status-page-grids")
        self._refreshing.add_done_callback(_ended)

    async def _stop_refreshing(self, app: web.Application | None = None) -> None:
        task, self._refreshing = self._refreshing, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        await self._bodies.close()
        await self._rankings.close()

    def _allowed(self, request: web.Request) -> web.Response | None:
        """None when the request may read the page, else the refusal to answer with."""
        foreign = _cross_site(request)
        if foreign is not None:
            return web.Response(
                status=403, text=f"the status page refuses cross-site requests ({foreign})\n"
            )
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
        await self._stop_refreshing()
        if self._pool is not None:
            await self._pool.close()
            self._pool = None

    async def _open_pool(self) -> asyncpg.Pool:
        async with self._pool_lock:
            if self._pool is None:
                self._pool = await create_pool(
                    self._dsn, min_size=0, max_size=2, command_timeout=self._database_timeout
                )
            return self._pool

    async def _answer(
        self, make: Callable[[asyncpg.Pool, Ranking], Awaitable[web.Response]]
    ) -> web.Response:
        """`make`'s answer from the shared ranking, or a 503 naming the database failure (never
        a traceback page)."""
        pool: asyncpg.Pool | None = None
        try:
            pool = await self._open_pool()
            # Every statement is bounded by the command timeout; this bounds the wait for one
            # of the pool's two connections too. No Temporal call happens in here.
            async with asyncio.timeout(2 * self._database_timeout):
                ranking = await self._rankings.get("all", lambda: read_ranking(pool, self.grids))
                return await make(pool, ranking)
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
        page = page_number(request.query)
        if isinstance(page, web.Response):
            return page

        async def make(pool: asyncpg.Pool, ranking: Ranking) -> web.Response:
            pages = ranking.pages(self._limits.page_size)
            if page > pages:
                return web.Response(
                    status=404,
                    text=f"no page {page}: the overview has pages 1 to {pages}\n",
                )

            async def body() -> bytes:
                view = await read_page(pool, self.grids, ranking, page=page, limits=self._limits)
                return await self._render("overview.html", view=view, root="./")

            return _html(await self._bodies.get(("page", str(page)), body))

        return await self._answer(make)

    async def schedule(self, request: web.Request) -> web.Response:
        refused = self._allowed(request)
        if refused is not None:
            return refused
        schedule_id = request.match_info["schedule_id"]

        async def make(pool: asyncpg.Pool, ranking: Ranking) -> web.Response:
            if ranking.find(schedule_id) is None:
                return web.Response(
                    status=404, text=f"no schedule {echoed(schedule_id)} in the heartbeats\n"
                )

            async def body() -> bytes:
                view = await read_one(pool, self.grids, ranking, schedule_id, limits=self._limits)
                assert view is not None  # found in this very ranking
                [s] = view.schedules
                return await self._render(
                    "schedule.html",
                    view=view,
                    s=s,
                    root="../",
                    temporal_schedule=self._links.schedule(s.schedule_id) if self._links else None,
                )

            return _html(await self._bodies.get(("schedule", schedule_id), body))

        return await self._answer(make)

    async def _render(self, template: str, **context: Any) -> bytes:
        # In a thread: a page of a hundred timelines must not stall the loop that pages people.
        return await asyncio.to_thread(render, template, links=self._links, **context)


def render(template: str, *, links: TemporalLinks | None, **context: Any) -> bytes:
    """One of the page's templates, as the bytes sent."""

    def slot_link(schedule_id: str, slot: timeline.Slot) -> str | None:
        return links.slot(schedule_id, slot) if links else None

    html = _ENV.get_template(template).render(
        legend=LEGEND, refresh_seconds=REFRESH_SECONDS, link=slot_link, **context
    )
    return html.encode()


def _ended(task: asyncio.Task[None]) -> None:
    # The task ends only when cancelled at shutdown; anything else leaves every grid pending
    # from then on, which must be loud.
    if not task.cancelled() and task.exception() is not None:
        log.error(
            "monitor.status-grids-stopped",
            error=f"{type(task.exception()).__name__}: {task.exception()}",
        )


def _html(body: bytes) -> web.Response:
    return web.Response(body=body, content_type="text/html", charset="utf-8")


_PAGE = re.compile(r"[0-9]{1,30}")


def page_number(query: MultiMapping[str]) -> int | web.Response:
    """`?page=N` (from 1; absent: 1), or the 400 answering a value that is not a page number.
    ASCII digits only (int() would also take other scripts' digits and spaces), never more than
    30 of them converted. A number past the last page is the caller's 404."""
    values = query.getall("page", [])
    if not values:
        return 1
    if len(values) > 1 or not _PAGE.fullmatch(values[0]):
        return web.Response(status=400, text="page must be a whole number from 1: ?page=2\n")
    page = int(values[0])
    if page < 1:
        return web.Response(status=400, text="page must be a whole number from 1: ?page=2\n")
    return page


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


def _cross_site(request: web.Request) -> str | None:
    """Why a request is refused as cross-site, or None. Browsers say where a request comes from
    (Fetch Metadata), and name the origin of a script's request: a page elsewhere that makes
    the operator's browser load this one is refused, whatever the access mode."""
    site = request.headers.get("Sec-Fetch-Site")
    if site is not None and site.strip().lower() == "cross-site":
        return "Sec-Fetch-Site: cross-site"
    origin = request.headers.get("Origin")
    if origin is not None and not _same_origin(origin, request.host or ""):
        return f"Origin {echoed(origin)}"
    return None


def _same_origin(origin: str, host: str) -> bool:
    try:
        parts = urlsplit(origin)
    except ValueError:
        return False
    # `Origin: null` (a sandboxed frame, a file:) has no scheme: it is nobody's.
    return parts.scheme in ("http", "https") and parts.netloc.lower() == host.lower()


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
        except (binascii.Error, ValueError, UnicodeDecodeError):
            # ValueError: text that is not ASCII at all, which b64decode refuses outright.
            offered = None
    if offered is None:
        return False
    try:
        offered_bytes = offered.encode()
    except UnicodeEncodeError:
        # Header bytes that were not UTF-8 reach us as lone surrogates: not the token.
        return False
    return hmac.compare_digest(offered_bytes, token.encode())
