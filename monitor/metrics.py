"""Prometheus `/metrics`, `/healthz` and `/readyz`, served by a few lines of asyncio.

`/healthz` (liveness) answers whenever the event loop does: a monitor that cannot reach the
database is alive, and restarting it would only repeat its "cannot reach the database" page.
`/readyz` (readiness) says whether a recent pass reached the database.

The text exposition format is small and stable, so it is written by hand rather than pulling in
prometheus-client for a handful of gauges and two counters.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from cronwarden.logs import get_logger

log = get_logger("cronwarden.monitor")


def _label(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _number(value: float) -> str:
    return repr(float(value))


@dataclass
class Metrics:
    seconds_since_success: dict[str, float | None] = field(default_factory=dict)
    overdue: int = 0
    open_incidents: int = 0
    database_up: bool = False
    last_pass_at: float | None = None
    """Unix time of the last pass that reached the database."""
    sent: Counter[str] = field(default_factory=Counter)
    failed: Counter[str] = field(default_factory=Counter)
    dead: Counter[str] = field(default_factory=Counter)
    temporal_reachable: bool | None = None
    """Whether Temporal answered the last pause check (None: no pause check configured)."""
    pauses_unverified: int = 0
    """Recorded pauses the last pass could not check against Temporal."""

    def notification_sent(self, sink: str) -> None:
        self.sent[sink] += 1

    def notification_failed(self, sink: str) -> None:
        self.failed[sink] += 1

    def notification_dead(self, sink: str) -> None:
        self.dead[sink] += 1

    def render(self) -> str:
        lines: list[str] = []

        def family(name: str, kind: str, help_text: str) -> None:
            lines.append(f"# HELP {name} {help_text}")
            lines.append(f"# TYPE {name} {kind}")

        family(
            "cronwarden_schedule_seconds_since_last_success",
            "gauge",
            "Seconds since the schedule's last committed run (absent: it never succeeded).",
        )
        for sid, age in sorted(self.seconds_since_success.items()):
            if age is not None:
                lines.append(
                    f'cronwarden_schedule_seconds_since_last_success{{schedule_id="{_label(sid)}"}}'
                    f" {_number(age)}"
                )
        family("cronwarden_schedules_watched", "gauge", "Unpaused schedules with a heartbeat row.")
        lines.append(f"cronwarden_schedules_watched {len(self.seconds_since_success)}")
        family("cronwarden_schedules_overdue", "gauge", "Schedules overdue at the last pass.")
        lines.append(f"cronwarden_schedules_overdue {self.overdue}")
        family("cronwarden_open_incidents", "gauge", "Open incidents at the last pass.")
        lines.append(f"cronwarden_open_incidents {self.open_incidents}")
        family(
            "cronwarden_notifications_sent_total", "counter", "Notifications delivered, by sink."
        )
        for sink, n in sorted(self.sent.items()):
            lines.append(f'cronwarden_notifications_sent_total{{sink="{_label(sink)}"}} {n}')
        family(
            "cronwarden_notifications_failed_total",
            "counter",
            "Delivery attempts that failed, by sink.",
        )
        for sink, n in sorted(self.failed.items()):
            lines.append(f'cronwarden_notifications_failed_total{{sink="{_label(sink)}"}} {n}')
        family(
            "cronwarden_notifications_dead_lettered_total",
            "counter",
            "Notifications given up on (payload refused by the sink, or no monitor has the sink),"
            " by sink.",
        )
        for sink, n in sorted(self.dead.items()):
            lines.append(
                f'cronwarden_notifications_dead_lettered_total{{sink="{_label(sink)}"}} {n}'
            )
        family(
            "cronwarden_monitor_database_up", "gauge", "1 if the last pass reached the database."
        )
        lines.append(f"cronwarden_monitor_database_up {int(self.database_up)}")
        if self.temporal_reachable is not None:
            family(
                "cronwarden_monitor_temporal_reachable",
                "gauge",
                "1 if Temporal answered the last check of the recorded pauses.",
            )
            lines.append(f"cronwarden_monitor_temporal_reachable {int(self.temporal_reachable)}")
            family(
                "cronwarden_monitor_pauses_unverified",
                "gauge",
                "Recorded pauses the last pass could not check against Temporal (a pause lifted"
                " there stays silent meanwhile).",
            )
            lines.append(f"cronwarden_monitor_pauses_unverified {self.pauses_unverified}")
        if self.last_pass_at is not None:
            family(
                "cronwarden_monitor_last_pass_timestamp_seconds",
                "gauge",
                "Unix time of the last pass that reached the database.",
            )
            lines.append(
                f"cronwarden_monitor_last_pass_timestamp_seconds {_number(self.last_pass_at)}"
            )
        return "\n".join(lines) + "\n"

    def healthy(self, *, max_age: float) -> bool:
        """A monitor is healthy while it completes passes that reach the database."""
        return self.last_pass_at is not None and time.time() - self.last_pass_at <= max_age


async def serve(
    metrics: Metrics, *, host: str | None, port: int, healthy: Callable[[], bool]
) -> asyncio.Server:
    """Start the HTTP endpoint; the caller closes the returned server. host=None binds every
    interface (IPv4 and IPv6), as a pod's probes and Prometheus need. `healthy` decides
    `/readyz` only."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            request_line = await asyncio.wait_for(reader.readline(), timeout=5)
            # Drain the headers; nothing in them matters to us.
            while (await asyncio.wait_for(reader.readline(), timeout=5)) not in (
                b"\r\n",
                b"\n",
                b"",
            ):
                pass
            parts = request_line.decode("latin-1").split()
            path = parts[1].split("?", 1)[0] if len(parts) >= 2 else ""
            if path == "/metrics":
                status, body, ctype = "200 OK", metrics.render(), "text/plain; version=0.0.4"
            elif path == "/healthz":
                status, body, ctype = "200 OK", "ok\n", "text/plain"
            elif path == "/readyz":
                ok = healthy()
                status = "200 OK" if ok else "503 Service Unavailable"
                body, ctype = (
                    ("ok\n" if ok else "no recent pass reached the database\n"),
                    "text/plain",
                )
            else:
                status, body, ctype = "404 Not Found", "not found\n", "text/plain"
            data = body.encode()
            writer.write(
                f"HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {len(data)}\r\n"
                "Connection: close\r\n\r\n".encode()
                + data
            )
            await writer.drain()
        except (TimeoutError, ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()

    server = await asyncio.start_server(handle, host, port)
    log.info("monitor.metrics-serving", host=host, port=port)
    return server
