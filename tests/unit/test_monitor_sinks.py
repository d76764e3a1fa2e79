"""Each sink's payload against its service's documented format, the webhook signature, and the
Prometheus text the metrics endpoint serves."""

from __future__ import annotations

import hashlib
import hmac
import json
import time
from datetime import UTC, datetime
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families
from pydantic import SecretStr

from cronwarden.monitor.messages import (
    DB_UNREACHABLE,
    RESOLVE,
    TRIGGER,
    database_unreachable_message,
    incident_message,
)
from cronwarden.monitor.metrics import Metrics
from cronwarden.monitor.sinks import status_error
from cronwarden.monitor.sinks.pagerduty import PagerDutySink, pagerduty_event
from cronwarden.monitor.sinks.slack import slack_payload
from cronwarden.monitor.sinks.webhook import SIGNATURE_HEADER, WebhookSink

OPENED = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
# Events API v2: https://developer.pagerduty.com/docs/events-api-v2/trigger-events/
PD_SEVERITIES = {"critical", "error", "warning", "info"}
PD_PAYLOAD_FIELDS = {
    "summary",
    "source",
    "severity",
    "timestamp",
    "component",
    "group",
    "class",
    "custom_details",
}


def incident(**overrides: Any) -> dict[str, Any]:
    row: dict[str, Any] = {
        "id": 7,
        "schedule_id": "nightly",
        "kind": "overdue",
        "summary": "schedule nightly is overdue",
        "details": {"grace": "15m"},
        "opened_at": OPENED,
        "resolved_at": None,
        "resolution": None,
    }
    row.update(overrides)
    return row


def test_a_pagerduty_trigger_has_the_events_v2_shape() -> None:
    event = pagerduty_event(incident_message(TRIGGER, incident()), routing_key="rk")
    assert set(event) == {"routing_key", "event_action", "dedup_key", "payload"}
    assert event["routing_key"] == "rk"
    assert event["event_action"] == "trigger"
    assert event["dedup_key"] == "cronwarden:nightly"
    payload = event["payload"]
    assert {"summary", "source", "severity"} <= set(payload) <= PD_PAYLOAD_FIELDS
    assert payload["severity"] in PD_SEVERITIES
    assert payload["timestamp"] == "2026-03-01T12:00:00Z"
    assert payload["component"] == "nightly"


def test_a_pagerduty_resolve_carries_only_the_key_action_and_dedup_key() -> None:
    resolved = incident(resolved_at=OPENED, resolution="recovered")
    event = pagerduty_event(incident_message(RESOLVE, resolved), routing_key="rk")
    assert event == {
        "routing_key": "rk",
        "event_action": "resolve",
        "dedup_key": "cronwarden:nightly",
    }


def test_a_pagerduty_summary_is_cut_to_the_api_limit() -> None:
    long = incident(summary="x" * 5000)
    event = pagerduty_event(incident_message(TRIGGER, long), routing_key="rk")
    assert len(event["payload"]["summary"]) == 1024


def test_system_and_database_pages_are_critical_with_their_own_dedup_keys() -> None:
    system = incident(schedule_id=None, kind="system")
    listed = [{"schedule_id": "a", "kind": "overdue", "summary": "a is overdue"}]
    event = pagerduty_event(incident_message(TRIGGER, system, schedules=listed), routing_key="k")
    assert event["dedup_key"] == "cronwarden:system"
    assert event["payload"]["severity"] == "critical"
    assert event["payload"]["custom_details"]["schedules"] == ["a"]
    db = database_unreachable_message(
        TRIGGER, monitor_id="m1", host="monitor-7d9f", error="OSError: refused"
    )
    assert db["kind"] == DB_UNREACHABLE
    assert pagerduty_event(db, routing_key="k")["dedup_key"] == "cronwarden:monitor:monitor-7d9f"


def test_a_slack_message_has_text_and_one_mrkdwn_section() -> None:
    body = slack_payload(incident_message(TRIGGER, incident(summary="a <b> & c")))
    assert set(body) == {"text", "blocks"}
    assert isinstance(body["text"], str) and "a &lt;b&gt; &amp; c" in body["text"]
    [block] = body["blocks"]
    assert block["type"] == "section"
    assert block["text"]["type"] == "mrkdwn"
    assert len(block["text"]["text"]) <= 3000


def test_a_slack_message_says_the_cause_and_the_command_that_closes_the_gap() -> None:
    command = (
        "cronwarden backfill run nightly --start 2026-01-05T09:30:00Z --end 2026-01-05T10:00:00Z"
    )
    details = {
        "grace": "15m",
        "cause": "no worker polls the task queue 'q'",
        "next_command": command,
    }
    message = incident_message(TRIGGER, incident(details=details))
    assert (message["cause"], message["next_command"]) == (details["cause"], command)
    [block] = slack_payload(message)["blocks"]
    assert "no worker polls the task queue 'q'" in block["text"]["text"]
    assert f"`{command}`" in block["text"]["text"]


def test_a_webhook_body_is_signed_with_hmac_sha256_of_the_raw_body() -> None:
    sink = WebhookSink(SecretStr("http://127.0.0.1:1/hook"), SecretStr("s3cret"))
    body = sink.render(incident_message(TRIGGER, incident()))
    headers = sink.headers(body, delivery_id="42")
    expected = hmac.new(b"s3cret", body, hashlib.sha256).hexdigest()
    assert headers[SIGNATURE_HEADER] == f"sha256={expected}"
    assert json.loads(body)["dedup_key"] == "cronwarden:nightly"
    unsigned = WebhookSink(SecretStr("http://127.0.0.1:1/hook"))
    assert SIGNATURE_HEADER not in unsigned.headers(body, delivery_id="42")


def test_a_sink_holds_its_url_and_key_as_secrets() -> None:
    sink = PagerDutySink(SecretStr("routing-key-123"), "http://127.0.0.1:1/pd")
    assert "routing-key-123" not in repr(sink)
    assert "routing-key-123" in sink.render(incident_message(TRIGGER, incident())).decode()


def test_metrics_render_in_the_prometheus_text_format() -> None:
    metrics = Metrics(
        seconds_since_success={"a": 12.5, 'we"ird': 3.0, "never": None},
        overdue=2,
        open_incidents=1,
        database_up=True,
        last_pass_at=1_700_000_000.0,
    )
    metrics.notification_sent("webhook")
    metrics.notification_failed("slack")
    families = {f.name: f for f in text_string_to_metric_families(metrics.render())}
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for f in families.values()
        for s in f.samples
    }
    ages = "cronwarden_schedule_seconds_since_last_success"
    assert samples[(ages, (("schedule_id", "a"),))] == 12.5
    assert samples[(ages, (("schedule_id", 'we"ird'),))] == 3.0
    assert not any(labels == (("schedule_id", "never"),) for _, labels in samples)
    assert samples[("cronwarden_schedules_watched", ())] == 3
    assert samples[("cronwarden_schedules_overdue", ())] == 2
    assert samples[("cronwarden_open_incidents", ())] == 1
    assert samples[("cronwarden_notifications_sent_total", (("sink", "webhook"),))] == 1
    assert samples[("cronwarden_notifications_failed_total", (("sink", "slack"),))] == 1
    assert samples[("cronwarden_monitor_last_pass_timestamp_seconds", ())] == 1_700_000_000.0
    assert families["cronwarden_notifications_sent"].type == "counter"
    # No pause check configured: Temporal's reachability is not reported at all.
    assert "cronwarden_monitor_temporal_reachable" not in families


def test_two_monitors_in_one_process_report_their_own_numbers() -> None:
    first, second = Metrics(), Metrics()
    first.notification_sent("webhook")
    assert 'cronwarden_notifications_sent_total{sink="webhook"}' in first.render()
    assert "cronwarden_notifications_sent_total{" not in second.render()


def test_healthz_fails_once_no_pass_reached_the_database_for_too_long() -> None:
    assert not Metrics().healthy(max_age=60)
    assert Metrics(last_pass_at=time.time() - 10).healthy(max_age=60)
    assert not Metrics(last_pass_at=time.time() - 61).healthy(max_age=60)


@pytest.mark.parametrize("status", [400, 422])
def test_only_a_payload_the_sink_can_never_accept_is_given_up_on(status: int) -> None:
    error = status_error(status)
    assert error.permanent and not error.misconfigured and not error.too_large


def test_a_body_too_large_is_shortened_never_given_up_on_nor_blamed_on_the_sink() -> None:
    error = status_error(413)
    assert error.too_large and not error.permanent and not error.misconfigured
    assert not error.sink_failed  # the sink answered: its breaker does not count it


@pytest.mark.parametrize("status", [401, 403, 404, 410])
def test_a_refused_address_or_credential_is_retried_and_called_a_configuration_error(
    status: int,
) -> None:
    error = status_error(status)
    assert not error.permanent and error.misconfigured
    assert str(error) == f"HTTP {status}: check the sink's URL and credentials"


@pytest.mark.parametrize("status", [405, 408, 409, 425, 429, 451, 500, 502, 503, 504])
def test_every_other_failure_is_retried(status: int) -> None:
    error = status_error(status)
    assert not error.permanent and not error.misconfigured
