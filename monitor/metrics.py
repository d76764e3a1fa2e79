"""The monitor's Prometheus metrics, exposed by the official client library.

A pass replaces the whole picture at once (which schedules are watched, how long since each one
succeeded), so the state lives in this plain object and a custom collector turns it into metric
families at scrape time: a schedule deleted since the last pass disappears from /metrics instead
of lingering as a stale labelled gauge. Each monitor has its own registry, never the library's
global one, so several monitors in one process (tests, `cronwarden dev`) each report their own.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector


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
    registry: CollectorRegistry = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        self.registry = CollectorRegistry()
        self.registry.register(_MonitorCollector(self))

    def notification_sent(self, sink: str) -> None:
        self.sent[sink] += 1

    def notification_failed(self, sink: str) -> None:
        self.failed[sink] += 1

    def notification_dead(self, sink: str) -> None:
        self.dead[sink] += 1

    def render(self) -> str:
        """The text exposition format, as /metrics serves it."""
        return generate_latest(self.registry).decode()

    def healthy(self, *, max_age: float) -> bool:
        """A monitor is healthy while it completes passes that reach the database."""
        return self.last_pass_at is not None and time.time() - self.last_pass_at <= max_age


class _MonitorCollector(Collector):
    def __init__(self, metrics: Metrics) -> None:
        self._metrics = metrics

    def collect(self) -> Iterator[Metric]:
        m = self._metrics
        ages = GaugeMetricFamily(
            "cronwarden_schedule_seconds_since_last_success",
            "Seconds since the schedule's last committed run (absent: it never succeeded).",
            labels=["schedule_id"],
        )
        for sid, age in sorted(m.seconds_since_success.items()):
            if age is not None:
                ages.add_metric([sid], age)
        yield ages
        yield GaugeMetricFamily(
            "cronwarden_schedules_watched",
            "Unpaused schedules with a heartbeat row.",
            value=len(m.seconds_since_success),
        )
        yield GaugeMetricFamily(
            "cronwarden_schedules_overdue", "Schedules overdue at the last pass.", value=m.overdue
        )
        yield GaugeMetricFamily(
            "cronwarden_open_incidents", "Open incidents at the last pass.", value=m.open_incidents
        )
        for name, help_text, counts in (
            ("cronwarden_notifications_sent", "Notifications delivered, by sink.", m.sent),
            (
                "cronwarden_notifications_failed",
                "Delivery attempts that failed, by sink.",
                m.failed,
            ),
            (
                "cronwarden_notifications_dead_lettered",
                "Notifications given up on (payload refused by the sink, or no monitor has the "
                "sink), by sink.",
                m.dead,
            ),
        ):
            family = CounterMetricFamily(name, help_text, labels=["sink"])
            for sink, n in sorted(counts.items()):
                family.add_metric([sink], n)
            yield family
        yield GaugeMetricFamily(
            "cronwarden_monitor_database_up",
            "1 if the last pass reached the database.",
            value=int(m.database_up),
        )
        if m.temporal_reachable is not None:
            yield GaugeMetricFamily(
                "cronwarden_monitor_temporal_reachable",
                "1 if Temporal answered the last check of the recorded pauses.",
                value=int(m.temporal_reachable),
            )
            yield GaugeMetricFamily(
                "cronwarden_monitor_pauses_unverified",
                "Recorded pauses the last pass could not check against Temporal (a pause lifted "
                "there stays silent meanwhile).",
                value=m.pauses_unverified,
            )
        if m.last_pass_at is not None:
            yield GaugeMetricFamily(
                "cronwarden_monitor_last_pass_timestamp_seconds",
                "Unix time of the last pass that reached the database.",
                value=m.last_pass_at,
            )
