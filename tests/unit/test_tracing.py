"""Tracing's settings, and what a worker does when tracing is asked for without the extra."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from opentelemetry import trace
from pydantic import ValidationError

from cronwarden.config import Settings, settings_error_message
from cronwarden.errors import CronwardenError, InvalidInput
from cronwarden.otel import DEFAULT_SERVICE_NAME
from cronwarden.tracing import OTEL_EXTRA_MISSING, GuardTracer, worker_tracing


def settings(**values: str) -> Settings:
    return Settings(_env_file=None, **values)  # type: ignore[call-arg, arg-type]


def test_tracing_is_off_unless_asked_for(monkeypatch: pytest.MonkeyPatch) -> None:
    assert settings().tracing == "off"
    assert worker_tracing(settings()) is None
    monkeypatch.setenv("CRONWARDEN_TRACING", "otlp")
    assert settings().tracing == "otlp"


def test_an_unknown_tracing_value_is_refused_naming_the_variable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("CRONWARDEN_TRACING", "jaeger")
    with pytest.raises(ValidationError) as caught:
        settings()
    message = settings_error_message(caught.value)
    assert message.startswith("CRONWARDEN_TRACING: "), message
    assert "'otlp'" in message and "'off'" in message


def test_tracing_without_the_extra_is_one_sentence_naming_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # As if the OpenTelemetry packages were not installed: their import fails, and so does that
    # of the module built on them (dropped from the cache so the import runs again).
    monkeypatch.setitem(sys.modules, "opentelemetry", None)
    monkeypatch.delitem(sys.modules, "cronwarden.otel", raising=False)
    with pytest.raises(CronwardenError) as caught:
        worker_tracing(settings(tracing="otlp"))
    assert str(caught.value) == OTEL_EXTRA_MISSING
    assert "cronwarden[otel]" in str(caught.value)
    # One sentence, not a traceback through the import machinery.
    assert caught.value.__cause__ is None and caught.value.__suppress_context__
    assert worker_tracing(settings(tracing="off")) is None


def test_tracing_off_loads_no_opentelemetry() -> None:
    probe = (
        "import json, sys\n"
        "import cronwarden.worker_runtime, cronwarden.activities.guard\n"
        "print(json.dumps([m for m in sys.modules if m.split('.')[0] == 'opentelemetry']))"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60
    )
    assert json.loads(done.stdout) == []


def test_the_off_tracer_hands_every_phase_one_shared_do_nothing_context() -> None:
    off = GuardTracer()
    off.run(logical_key="s@t", schedule_id="s", job="j", replay=False)
    acquire = off.phase("acquire", logical_key="s@t", schedule_id="s")
    assert off.phase("job", logical_key="s@t", schedule_id="s") is acquire
    with acquire, acquire:
        off.outcome("ran")


def test_the_service_is_named_cronwarden_worker_unless_opentelemetry_names_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("OTEL_SERVICE_NAME", raising=False)
    monkeypatch.delenv("OTEL_RESOURCE_ATTRIBUTES", raising=False)
    monkeypatch.setenv("CRONWARDEN_TRACING", "otlp")
    default = worker_tracing(settings())
    assert default is not None
    default.shutdown()
    assert default.provider.resource.attributes["service.name"] == DEFAULT_SERVICE_NAME
    monkeypatch.setenv("OTEL_SERVICE_NAME", "billing-cron")
    named = worker_tracing(settings())
    assert named is not None
    named.shutdown()
    assert named.provider.resource.attributes["service.name"] == "billing-cron"


def test_the_interceptor_traces_through_the_worker_s_provider(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("CRONWARDEN_TRACING", "otlp")
    tracing = worker_tracing(settings())
    assert tracing is not None
    # The global provider is left alone (a no-op one here, whose spans record nothing): the
    # interceptor's spans are the worker's provider's. Never ended, so nothing is sent.
    assert tracing.interceptor.tracer.start_span("probe").is_recording()
    assert not trace.get_tracer("elsewhere").start_span("probe").is_recording()
    tracing.shutdown()


@pytest.mark.parametrize(
    "variable", ["OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"]
)
def test_an_otlp_protocol_other_than_http_protobuf_is_refused(
    monkeypatch: pytest.MonkeyPatch, variable: str
) -> None:
    monkeypatch.setenv(variable, "grpc")
    with pytest.raises(InvalidInput) as caught:
        worker_tracing(settings(tracing="otlp"))
    assert str(caught.value).startswith(f"{variable}=grpc: ")
    assert "http/protobuf" in str(caught.value)


def test_the_traces_protocol_wins_over_the_general_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "http/protobuf")
    tracing = worker_tracing(settings(tracing="otlp"))
    assert tracing is not None
    tracing.shutdown()
