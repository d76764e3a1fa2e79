"""Tracing, opt-in: `CRONWARDEN_TRACING=otlp` with the `cronwarden[otel]` extra installed.

This module imports no OpenTelemetry. With tracing off (the default) the guard records into a
`GuardTracer`, whose calls do nothing, and a worker installed without the extra runs as it
always did. With it on, cronwarden.otel (imported only then) builds the worker's tracing.
"""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext
from typing import TYPE_CHECKING

from cronwarden.errors import CronwardenError

if TYPE_CHECKING:
    from cronwarden.config import Settings
    from cronwarden.otel import WorkerTracing

OTEL_EXTRA_MISSING = (
    "CRONWARDEN_TRACING=otlp needs the OpenTelemetry packages, which are not installed: "
    "install cronwarden[otel] (pip install 'cronwarden[otel]'), or set CRONWARDEN_TRACING=off"
)

_NO_SPAN: AbstractContextManager[None] = nullcontext()


class GuardTracer:
    """The guard's spans and its run's attributes. This one records nothing: every guarded run
    calls it, so with tracing off it costs a method call and no allocation."""

    def run(self, *, logical_key: str, schedule_id: str, job: str, replay: bool) -> None:
        """Names the run on the activity's span."""

    def outcome(self, outcome: str) -> None:
        """The run's outcome, on the activity's span (one of worker_metrics.OUTCOMES)."""

    def phase(
        self, name: str, *, logical_key: str, schedule_id: str
    ) -> AbstractContextManager[object]:
        """A span over one phase of the guard, a child of the activity's span."""
        return _NO_SPAN


def worker_tracing(settings: Settings) -> WorkerTracing | None:
    """The worker's tracing as configured, exporting by OTLP; None when it is off."""
    if settings.tracing == "off":
        return None
    try:
        import cronwarden.otel as otel
    except ImportError as exc:
        if (exc.name or "").partition(".")[0] != "opentelemetry":
            raise
        raise CronwardenError(OTEL_EXTRA_MISSING) from None
    return otel.exported_by_otlp()
