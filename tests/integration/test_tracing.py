"""Tracing on real servers: a worker's guarded runs as spans, from Temporal's interceptor down
to the guard's phases, kept in memory or exported by OTLP over HTTP to a local receiver."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from itertools import pairwise

import asyncpg
import pytest
import pytest_asyncio
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from temporalio.client import Client

from cronwarden.activities.contract import RUN_GUARDED, logical_key
from cronwarden.embedded import EmbeddedTemporal
from cronwarden.otel import WorkerTracing, traced_by
from cronwarden.worker_runtime import run_worker
from cronwarden.workflows.scheduled_run import WORKFLOW_NAME
from tests.support.receiver import Receiver
from tests.support.runs import FIRE, start_run
from tests.support.servers import worker_settings
from tests.support.waiting import wait_for

pytestmark = pytest.mark.integration

START_ACTIVITY = f"StartActivity:{RUN_GUARDED}"
RUN_ACTIVITY = f"RunActivity:{RUN_GUARDED}"
PHASES = ("cronwarden.acquire", "cronwarden.job", "cronwarden.commit")
LOGICAL_KEY = "cronwarden.logical_key"


@dataclass
class Traced:
    exporter: InMemorySpanExporter
    tracing: WorkerTracing

    def spans(self, key: str) -> list[ReadableSpan]:
        """The finished spans of the trace whose activity span names `key`."""
        finished = self.exporter.get_finished_spans()
        runs = [s for s in finished if s.attributes and s.attributes.get(LOGICAL_KEY) == key]
        trace_ids = {s.context.trace_id for s in runs if s.context is not None}
        return [s for s in finished if s.context is not None and s.context.trace_id in trace_ids]


@pytest_asyncio.fixture(loop_scope="session")
async def traced(
    temporal_server: EmbeddedTemporal, client: Client, pool: asyncpg.Pool, task_queue: str
) -> AsyncIterator[Traced]:
    """A worker polling `task_queue` that traces into memory (no global provider is set)."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracing = traced_by(provider)
    stop = asyncio.Event()
    settings = worker_settings(temporal_server, task_queue)
    worker = asyncio.create_task(
        run_worker(settings, client=client, pool=pool, stop=stop, tracing=tracing)
    )
    try:
        yield Traced(exporter, tracing)
    finally:
        stop.set()
        await worker
        provider.shutdown()


def one(spans: Sequence[ReadableSpan], name: str) -> ReadableSpan:
    [span] = [s for s in spans if s.name == name]
    return span


def parent_of(span: ReadableSpan) -> int | None:
    return span.parent.span_id if span.parent is not None else None


def span_id(span: ReadableSpan) -> int:
    assert span.context is not None
    return int(span.context.span_id)


def trace_id(span: ReadableSpan) -> int:
    assert span.context is not None
    return int(span.context.trace_id)


async def test_a_run_is_one_trace_from_its_activity_down_to_each_guard_phase(
    client: Client, task_queue: str, schedule_id: str, traced: Traced
) -> None:
    key = logical_key(schedule_id, FIRE)
    handle = await start_run(client, task_queue, schedule_id)
    assert (await handle.result()).outcome == "ran"

    async def whole() -> list[ReadableSpan]:
        spans = traced.spans(key)
        names = {s.name for s in spans}
        return spans if {START_ACTIVITY, RUN_ACTIVITY, *PHASES} <= names else []

    spans = await wait_for(whole, timeout=10, what=f"the spans of {key}")
    start, run = one(spans, START_ACTIVITY), one(spans, RUN_ACTIVITY)
    # The workflow's span for the activity (made by the interceptor inside the sandbox) is the
    # parent of the attempt's, whose context crossed Temporal in the activity's headers.
    assert parent_of(run) == span_id(start)
    attributes = dict(run.attributes or {})
    assert attributes["temporalWorkflowID"] == handle.id
    assert {k: v for k, v in attributes.items() if k.startswith("cronwarden.")} == {
        LOGICAL_KEY: key,
        "cronwarden.schedule_id": schedule_id,
        "cronwarden.job": "probe",
        "cronwarden.replay": False,
        "cronwarden.outcome": "ran",
    }
    phases = [one(spans, name) for name in PHASES]
    assert {trace_id(s) for s in (start, run, *phases)} == {trace_id(start)}
    for phase in phases:
        assert parent_of(phase) == span_id(run), phase.name
        assert phase.attributes is not None
        assert dict(phase.attributes) == {LOGICAL_KEY: key, "cronwarden.schedule_id": schedule_id}
    # In order, none overlapping, all inside the attempt's span.
    bounds = [(p.start_time or 0, p.end_time or 0) for p in phases]
    assert (run.start_time or 0) <= bounds[0][0]
    assert all(a[1] <= b[0] for a, b in pairwise(bounds))
    assert bounds[-1][1] <= (run.end_time or 0)
    # The workflow's own span is exported too: zero-length, as the interceptor makes them all,
    # and in a trace of its own, as a Schedule's fire (like this start) brings none to join.
    [workflow] = [
        s
        for s in traced.exporter.get_finished_spans()
        if s.name == f"RunWorkflow:{WORKFLOW_NAME}"
        and (s.attributes or {}).get("temporalWorkflowID") == handle.id
    ]
    assert workflow.start_time == workflow.end_time


async def test_a_replay_of_a_done_key_is_traced_with_its_flag_and_only_its_acquire(
    client: Client, task_queue: str, schedule_id: str, traced: Traced
) -> None:
    key = logical_key(schedule_id, FIRE)
    assert (await (await start_run(client, task_queue, schedule_id)).result()).outcome == "ran"
    traced.exporter.clear()
    replay = await start_run(client, task_queue, schedule_id, replay=True)
    assert (await replay.result()).outcome == "already-done"

    async def ended() -> list[ReadableSpan]:
        spans = traced.spans(key)
        return spans if any(s.name == RUN_ACTIVITY for s in spans) else []

    spans = await wait_for(ended, timeout=10, what=f"the replay's spans of {key}")
    run = one(spans, RUN_ACTIVITY)
    assert run.attributes is not None
    assert run.attributes["cronwarden.replay"] is True
    assert run.attributes["cronwarden.outcome"] == "already-done"
    # The key was found done at the lease: no job, no commit.
    assert sorted(s.name for s in spans if s.name.startswith("cronwarden.")) == [
        "cronwarden.acquire"
    ]


async def test_a_run_started_by_a_traced_client_joins_the_client_s_trace(
    client: Client, task_queue: str, schedule_id: str, traced: Traced
) -> None:
    key = logical_key(schedule_id, FIRE)
    # An application that traces its own Temporal calls (here with the worker's interceptor).
    config = client.config()
    config["interceptors"] = [traced.tracing.interceptor]
    own = Client(**config)
    handle = await start_run(own, task_queue, schedule_id)
    assert (await handle.result()).outcome == "ran"

    async def whole() -> list[ReadableSpan]:
        spans = traced.spans(key)
        return (
            spans if {f"StartWorkflow:{WORKFLOW_NAME}", *PHASES} <= {s.name for s in spans} else []
        )

    spans = await wait_for(whole, timeout=10, what=f"the spans of {key}")
    root = one(spans, f"StartWorkflow:{WORKFLOW_NAME}")
    assert root.parent is None
    assert parent_of(one(spans, f"RunWorkflow:{WORKFLOW_NAME}")) == span_id(root)
    assert parent_of(one(spans, START_ACTIVITY)) == span_id(root)
    assert parent_of(one(spans, RUN_ACTIVITY)) == span_id(one(spans, START_ACTIVITY))


async def test_the_worker_exports_its_runs_by_otlp_where_opentelemetry_s_variables_point(
    temporal_server: EmbeddedTemporal,
    client: Client,
    pool: asyncpg.Pool,
    task_queue: str,
    schedule_id: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    key = logical_key(schedule_id, FIRE)
    with Receiver() as collector:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", collector.url(""))
        monkeypatch.setenv("OTEL_SERVICE_NAME", "cronwarden-test")
        settings = worker_settings(temporal_server, task_queue, tracing="otlp")
        stop = asyncio.Event()
        worker = asyncio.create_task(run_worker(settings, client=client, pool=pool, stop=stop))
        try:
            assert (await (await start_run(client, task_queue, schedule_id)).result()).outcome == (
                "ran"
            )
        finally:
            stop.set()
            # The worker's own tracing is flushed as it stops: every span is sent by then.
            await worker
        exported = [ExportTraceServiceRequest.FromString(r.raw) for r in collector.at("/v1/traces")]
    services: set[str] = set()
    phases: dict[str, str] = {}
    for request in exported:
        for resource_spans in request.resource_spans:
            services.update(
                a.value.string_value
                for a in resource_spans.resource.attributes
                if a.key == "service.name"
            )
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    attributes = {a.key: a.value.string_value for a in span.attributes}
                    if span.name in PHASES:
                        phases[span.name] = attributes[LOGICAL_KEY]
    assert services == {"cronwarden-test"}
    assert phases == dict.fromkeys(PHASES, key)
