"""The worker's tracing on OpenTelemetry (the `cronwarden[otel]` extra). Imported only when
tracing is on (cronwarden.tracing): without the extra, this import is what fails.

The worker never sets OpenTelemetry's global tracer provider: it can be set once per process,
and whatever else runs in the process (an application embedding the worker, the tests) may
want its own. Temporal's interceptor and the guard trace through the provider built here.
"""

from __future__ import annotations

import os
from contextlib import AbstractContextManager
from dataclasses import dataclass

from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from temporalio.contrib.opentelemetry import TracingInterceptor
from temporalio.worker import WorkflowRunner
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions

from cronwarden.errors import InvalidInput
from cronwarden.tracing import GuardTracer

DEFAULT_SERVICE_NAME = "cronwarden-worker"
"""`service.name` unless OTEL_SERVICE_NAME (or OTEL_RESOURCE_ATTRIBUTES) names one."""
PROTOCOL = "http/protobuf"
LOGICAL_KEY = "cronwarden.logical_key"
SCHEDULE_ID = "cronwarden.schedule_id"
JOB = "cronwarden.job"
REPLAY = "cronwarden.replay"
OUTCOME = "cronwarden.outcome"
PHASE_SPAN_PREFIX = "cronwarden."


class OtelGuardTracer(GuardTracer):
    """The guard's phases as spans. The run's attributes go on the current span, which in the
    activity is the interceptor's `RunActivity` span: one span per attempt carries them all."""

    def __init__(self, tracer: trace.Tracer) -> None:
        self._tracer = tracer

    def run(self, *, logical_key: str, schedule_id: str, job: str, replay: bool) -> None:
        trace.get_current_span().set_attributes(
            {LOGICAL_KEY: logical_key, SCHEDULE_ID: schedule_id, JOB: job, REPLAY: replay}
        )

    def outcome(self, outcome: str) -> None:
        trace.get_current_span().set_attribute(OUTCOME, outcome)

    def phase(
        self, name: str, *, logical_key: str, schedule_id: str
    ) -> AbstractContextManager[object]:
        return self._tracer.start_as_current_span(
            PHASE_SPAN_PREFIX + name,
            attributes={LOGICAL_KEY: logical_key, SCHEDULE_ID: schedule_id},
        )


@dataclass(frozen=True)
class WorkerTracing:
    """What a traced worker adds: Temporal's interceptor, the guard's tracer, and the sandbox
    passthrough the interceptor's workflow side needs."""

    provider: TracerProvider
    interceptor: TracingInterceptor
    guard: GuardTracer

    def workflow_runner(self) -> WorkflowRunner:
        # As the SDK's own OpenTelemetry plugin does: the workflow side of the interceptor
        # keeps its context in opentelemetry's context variables, which must be the same
        # module inside the sandbox as outside it, not a copy re-imported per workflow.
        return SandboxedWorkflowRunner(
            restrictions=SandboxRestrictions.default.with_passthrough_modules("opentelemetry")
        )

    def shutdown(self) -> None:
        """Export what is still buffered, then stop (blocks for up to the exporter's timeout)."""
        self.provider.shutdown()


def traced_by(provider: TracerProvider) -> WorkerTracing:
    """The worker's tracing through `provider` (the tests give one that keeps spans in memory)."""
    interceptor = TracingInterceptor(
        provider.get_tracer("temporalio.contrib.opentelemetry"),
        # A Schedule starts the run's workflow with no trace to join, and by default the
        # interceptor then makes no workflow spans at all: each activity attempt would be a
        # trace of its own. With them, a run's attempts share the StartActivity span's trace.
        always_create_workflow_spans=True,
    )
    return WorkerTracing(
        provider=provider,
        interceptor=interceptor,
        guard=OtelGuardTracer(provider.get_tracer("cronwarden")),
    )


def exported_by_otlp() -> WorkerTracing:
    """Tracing exported by OTLP over HTTP, configured by OpenTelemetry's variables: the
    exporter reads OTEL_EXPORTER_OTLP_[TRACES_]ENDPOINT, _HEADERS, _TIMEOUT and the rest, the
    resource OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES, the sampler OTEL_TRACES_SAMPLER."""
    for variable in ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"):
        protocol = os.environ.get(variable, "").strip()
        if protocol:
            if protocol != PROTOCOL:
                raise InvalidInput(
                    f"{variable}={protocol}: cronwarden exports traces by OTLP over "
                    f"{PROTOCOL} only (a collector's port 4318); set it to {PROTOCOL} or unset it"
                )
            break
    provider = TracerProvider(resource=_resource())
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    return traced_by(provider)


def _resource() -> Resource:
    found = Resource.create()
    if str(found.attributes.get(SERVICE_NAME, "")).startswith("unknown_service"):
        return found.merge(Resource({SERVICE_NAME: DEFAULT_SERVICE_NAME}))
    return found
