"""The monitor's process: a pass of `monitor.passes` every `interval` seconds until told to
stop, or one pass (`--once`).

It wires the sinks the settings configure, serves /metrics, /healthz and /readyz (ready while a
pass reached the database within three intervals plus the database timeout, so a monitor stuck
on its database shows as not ready instead of looking fine), and stops on SIGINT/SIGTERM. A pass
never raises an expected database failure (`Monitor.step` pages about it instead); a pass that
fails on a bug is logged and the next one runs anyway, because one bad pass must not end the
watching. Only `--once` fails when its pass could not use the database: its caller has no next
pass to wait for.

After a pass, old incidents and notifications are pruned (`store.retention`), a few small
batches at a time. Every interval the process keeps (between passes, between prunes) runs on
the monotonic clock: a wall clock stepped by NTP or an operator neither skips nor repeats them.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import time
from collections.abc import Callable

from cronwarden.config import Settings
from cronwarden.errors import Unreachable
from cronwarden.logs import get_logger
from cronwarden.monitor.http import monitor_app, serve_monitor
from cronwarden.monitor.outbox_upkeep import OutboxUpkeep, upkeep_from_settings
from cronwarden.monitor.page import PageAccess, StatusPage, TemporalLinks
from cronwarden.monitor.passes import (
    DATABASE_ERRORS,
    DEFAULT_INTERVAL,
    Monitor,
    PassReport,
    options_from_settings,
)
from cronwarden.monitor.pauses import PauseCheck
from cronwarden.monitor.sinks import Sink
from cronwarden.monitor.sinks.pagerduty import PagerDutySink
from cronwarden.monitor.sinks.slack import SlackSink
from cronwarden.monitor.sinks.webhook import WebhookSink
from cronwarden.store import retention
from cronwarden.store.pool import connect as connect_database
from cronwarden.temporal import connect as connect_temporal

log = get_logger("cronwarden.monitor")

PRUNE_EVERY = 300.0
"""Seconds between two prunes that found no backlog."""


class Pruning:
    """Prunes old incidents and notifications at most every `every` seconds of the monotonic
    `clock`, and on the next pass again while a backlog is left. On a connection of its own,
    opened per prune (a few a hour): the pass's pool is not held for it."""

    def __init__(
        self,
        dsn: str,
        policy: retention.RetentionPolicy,
        *,
        timeout: float,
        every: float = PRUNE_EVERY,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.dsn = dsn
        self.policy = policy
        self.timeout = timeout
        self.every = every
        self._clock = clock
        self._next: float | None = None

    def due(self) -> bool:
        return self._next is None or self._clock() >= self._next

    async def maybe_prune(self) -> retention.Pruned | None:
        """Prune if due; None when not due or the database failed (the pass pages about that:
        a failed prune only waits for its next turn)."""
        if not self.due():
            return None
        self._next = self._clock() + self.every
        try:
            async with asyncio.timeout(self.timeout):
                conn = await connect_database(self.dsn, timeout=self.timeout)
                try:
                    pruned = await retention.prune(conn, self.policy)
                finally:
                    await conn.close()
        except DATABASE_ERRORS as exc:
            log.warning("monitor.prune-failed", error=type(exc).__name__)
            return None
        if pruned.more:
            self._next = self._clock()  # a backlog: the next pass goes on with it
        if pruned.notifications or pruned.incidents:
            log.info(
                "monitor.pruned",
                notifications=pruned.notifications,
                incidents=pruned.incidents,
                more=pruned.more,
            )
        return pruned


def pruning_from_settings(settings: Settings) -> Pruning:
    return Pruning(
        settings.dsn,
        retention.RetentionPolicy(keep=settings.monitor_retention),
        timeout=settings.monitor_database_timeout_seconds,
    )


def sinks_from_settings(settings: Settings) -> dict[str, Sink]:
    sinks: list[Sink] = []
    if settings.alert_webhook_url is not None:
        sinks.append(WebhookSink(settings.alert_webhook_url, settings.alert_webhook_secret))
    if settings.slack_webhook_url is not None:
        sinks.append(SlackSink(settings.slack_webhook_url))
    if settings.pagerduty_routing_key is not None:
        sinks.append(PagerDutySink(settings.pagerduty_routing_key, settings.pagerduty_url))
    return {s.name: s for s in sinks}


async def run_monitor(
    settings: Settings,
    *,
    once: bool = False,
    interval: float = DEFAULT_INTERVAL,
    metrics_port: int | None = None,
    metrics_host: str | None = None,
    stop: asyncio.Event | None = None,
    handle_signals: bool = True,
) -> PassReport | None:
    """Pass every `interval` seconds until `stop` is set (or SIGINT/SIGTERM), or once; the
    last pass's report (what `--once` prints)."""
    monitor = Monitor(
        dsn=settings.dsn,
        sinks=sinks_from_settings(settings),
        options=options_from_settings(settings, interval=interval),
        pauses=PauseCheck(lambda: connect_temporal(settings)),
    )
    stop = stop or asyncio.Event()
    page = status_page(settings, monitor) if metrics_port is not None else None
    async with contextlib.AsyncExitStack() as serving:
        if page is not None:
            serving.push_async_callback(page.close)
        if metrics_port is not None:
            app = monitor_app(
                monitor.metrics,
                healthy=lambda: monitor.metrics.healthy(
                    max_age=3 * interval + monitor.options.database_timeout
                ),
                page=page,
            )
            await serving.enter_async_context(
                serve_monitor(app, host=metrics_host, port=metrics_port)
            )
        await _watch(
            monitor,
            pruning_from_settings(settings),
            upkeep_from_settings(settings),
            once=once,
            interval=interval,
            stop=stop,
            handle_signals=handle_signals,
        )
    return monitor.last_report


def status_page(settings: Settings, monitor: Monitor) -> StatusPage | None:
    """The page the monitor's HTTP port serves, sharing the monitor's Temporal connection."""
    if settings.status_page == "off" or monitor.pauses is None:
        return None
    token = settings.status_page_token
    if settings.status_page == "any" and token is None:
        log.warning(
            "monitor.status-page-open",
            note="CRONWARDEN_STATUS_PAGE=any without CRONWARDEN_STATUS_PAGE_TOKEN: anyone who "
            "reaches the port reads the page",
        )
    return StatusPage(
        settings.dsn,
        monitor.pauses.client_or_none,
        access=PageAccess(
            who=settings.status_page, token=token.get_secret_value() if token else None
        ),
        links=(
            TemporalLinks(settings.temporal_ui_url, settings.namespace)
            if settings.temporal_ui_url
            else None
        ),
        database_timeout=settings.monitor_database_timeout_seconds,
    )


async def _watch(
    monitor: Monitor,
    pruning: Pruning,
    upkeep: OutboxUpkeep,
    *,
    once: bool,
    interval: float,
    stop: asyncio.Event,
    handle_signals: bool,
) -> None:
    loop = asyncio.get_running_loop()
    installed: list[signal.Signals] = []
    if handle_signals:
        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.add_signal_handler(sig, stop.set)
                installed.append(sig)
    if not monitor.sinks:
        log.warning("monitor.no-sinks", note="incidents are recorded but nobody is paged")
    log.info(
        "monitor.started",
        monitor_id=monitor.identity,
        interval=interval,
        once=once,
        sinks=monitor.sink_names,
    )
    try:
        if once:
            failed = await monitor.step()
            if failed is not None:
                raise Unreachable(f"the monitor pass could not use the database: {failed}")
            # A monitor run from cron (`--once`) is the only one some deployments have.
            await pruning.maybe_prune()
            await upkeep.maybe_run()
            return
        while not stop.is_set():
            try:
                if await monitor.step() is None:
                    await pruning.maybe_prune()
                    # The outbox's months: created ahead, dropped past the dedupe horizon.
                    await upkeep.maybe_run()
            except Exception as exc:
                # A bug in one pass must not end the watching: log it and try again next pass.
                log.error("monitor.pass-failed", error=f"{type(exc).__name__}: {exc}", exc_info=exc)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=interval)
    finally:
        for sig in installed:
            loop.remove_signal_handler(sig)
        await monitor.close()
        log.info("monitor.stopped", monitor_id=monitor.identity)
