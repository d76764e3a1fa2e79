"""Pure decisions of notification delivery: how long a claim lasts, a sink's circuit breaker,
and how a page is fitted under its sink's size limit."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest
from pydantic import SecretStr

from cronwarden.monitor.messages import (
    LISTED,
    TRIGGER,
    compacted,
    incident_message,
    page_link,
    system_details,
    system_summary,
)
from cronwarden.monitor.notify import DeliveryPolicy
from cronwarden.monitor.sinks import BodyLimit, Sink, SinkError, fit
from cronwarden.monitor.sinks.breaker import Breaker, State
from cronwarden.monitor.sinks.pagerduty import PagerDutySink
from cronwarden.monitor.sinks.slack import SlackSink, slack_payload
from cronwarden.monitor.sinks.webhook import WebhookSink


@pytest.mark.parametrize(
    ("send_timeout", "database_timeout"), [(10.0, 30.0), (1.0, 2.0), (30.0, 5.0), (0.5, 60.0)]
)
def test_a_claim_outlasts_the_rest_of_the_claim_step_the_send_and_the_marking(
    send_timeout: float, database_timeout: float
) -> None:
    # After the claim's statement the holder may still spend up to one database step finishing
    # the claim, the send's total deadline, and one database step marking the row: a claim any
    # shorter can lapse first, and another replica sends the same page again.
    policy = DeliveryPolicy(send_timeout=send_timeout, database_timeout=database_timeout)
    assert policy.claim_seconds > send_timeout + 2 * database_timeout


def test_an_open_breaker_never_holds_a_page_longer_than_its_backoff_ceiling() -> None:
    assert DeliveryPolicy(breaker_cooldown=30, retry_max=300).cooldown == 30
    assert DeliveryPolicy(breaker_cooldown=30, retry_max=0.2).cooldown == 0.2


# The circuit breaker, clocked by hand ----------------------------------------------------------


def test_a_sink_that_has_not_answered_gets_one_send_at_a_time_then_its_concurrency() -> None:
    breaker = Breaker(failures_to_open=3, cooldown=10)
    assert breaker.allowance(0, concurrency=4) == 1
    breaker.succeeded()
    assert breaker.allowance(0, concurrency=4) == 4
    assert not breaker.failed(1)  # one failure: back to one at a time, still closed
    assert breaker.state(1) is State.CLOSED and breaker.allowance(1, concurrency=4) == 1


def test_the_breaker_opens_after_failures_in_a_row_and_probes_once_per_cooldown() -> None:
    breaker = Breaker(failures_to_open=3, cooldown=10)
    assert [breaker.failed(t) for t in (0, 1, 2)] == [False, False, True]
    assert breaker.state(2) is State.OPEN and breaker.allowance(11.9, concurrency=4) == 0
    # A send still in flight when it opened fails too: the cool-down is not extended.
    assert not breaker.failed(5)
    assert breaker.state(12) is State.HALF_OPEN and breaker.allowance(12, concurrency=4) == 1
    assert breaker.failed(12)  # the probe failed: a new cool-down from now
    assert breaker.state(21.9) is State.OPEN and breaker.state(22) is State.HALF_OPEN
    assert breaker.succeeded()  # the probe got an answer: closed, at full concurrency
    assert breaker.state(22) is State.CLOSED and breaker.allowance(22, concurrency=4) == 4


def test_an_answer_between_failures_resets_the_count() -> None:
    breaker = Breaker(failures_to_open=3, cooldown=10)
    breaker.failed(0)
    breaker.failed(1)
    assert not breaker.succeeded()
    assert not breaker.failed(2) and not breaker.failed(3)
    assert breaker.state(3) is State.CLOSED


# Pages that fit ---------------------------------------------------------------------------------

STATUS_PAGE = "https://status.example.test/cw"


def fleet(members: int, *, event: str = TRIGGER) -> dict[str, Any]:
    """The message of a system page over `members` schedules, as the monitor builds it."""
    ids = [f"nightly-export-{i:05d}" for i in range(members)]
    incident = {
        "id": 1,
        "schedule_id": None,
        "kind": "system",
        "summary": system_summary(ids),
        "details": system_details(ids),
        "opened_at": datetime(2026, 3, 1, tzinfo=UTC),
        "resolved_at": None,
        "resolution": None,
    }
    listed = [
        {
            "schedule_id": sid,
            "kind": "overdue",
            "summary": f"schedule {sid} is overdue: a run was expected at 2026-03-01T02:00:00Z "
            "(grace 15m); last success 2026-02-28T02:00:41Z; last error: " + "x" * 200,
        }
        for sid in ids
    ]
    return incident_message(event, incident, schedules=listed, link=page_link(STATUS_PAGE, None))


SINKS: dict[str, Sink] = {
    "webhook": WebhookSink(SecretStr("http://127.0.0.1:1/hook")),
    "slack": SlackSink(SecretStr("http://127.0.0.1:1/slack")),
    "pagerduty": PagerDutySink(SecretStr("rk"), "http://127.0.0.1:1/pd"),
}


@pytest.mark.parametrize("name", sorted(SINKS))
def test_a_fleet_page_of_10000_schedules_names_the_first_and_the_count_within_the_limit(
    name: str,
) -> None:
    sink = SINKS[name]
    message = fleet(10_000)
    assert len(message["schedules"]) == LISTED and message["schedules_total"] == 10_000
    body = fit(sink, message, limit=BodyLimit(sink.max_body)).body
    assert len(body) <= sink.max_body and len(body) < 20_000
    text = body.decode()
    assert "nightly-export-00000" in text and "nightly-export-09999" not in text
    assert "10,000" in text or "10000" in text
    assert STATUS_PAGE in text


def test_the_stored_summary_of_a_fleet_outage_names_ten_and_counts_the_rest() -> None:
    ids = [f"s-{i}" for i in range(10_000)]
    summary = system_summary(ids)
    assert summary == (
        "10,000 schedules went overdue together: " + ", ".join(ids[:10]) + " and 9,990 more"
    )
    assert system_summary(ids[:3]) == "3 schedules went overdue together: s-0, s-1, s-2"
    assert system_details(ids) == {"schedule_ids": ids[:20], "schedules_total": 10_000}


def test_pages_link_to_the_status_page_or_name_the_command_without_one() -> None:
    assert page_link(None, "a") is None
    assert page_link(STATUS_PAGE + "/", None) == STATUS_PAGE + "/"
    assert page_link(STATUS_PAGE, "a b/c") == STATUS_PAGE + "/schedules/a%20b%2Fc"
    unlinked = {**fleet(100), "link": None}
    text = slack_payload(unlinked)["blocks"][0]["text"]["text"]
    assert "more: see `cronwarden status`" in text


def test_a_body_of_exactly_the_limit_is_kept_whole_and_one_byte_over_is_shortened() -> None:
    sink = SINKS["webhook"]
    message = fleet(30)
    whole = sink.render(message)
    assert fit(sink, message, limit=BodyLimit(len(whole))).body == whole
    shorter = fit(sink, message, limit=BodyLimit(len(whole) - 1))
    assert len(shorter.body) < len(whole) and not shorter.shortest
    assert json.loads(shorter.body)["truncated"] is True
    assert json.loads(shorter.body)["schedules_total"] == 30


def test_every_shorter_version_keeps_what_identifies_the_page_and_the_last_is_small() -> None:
    message = fleet(10_000)
    versions = list(compacted(message))
    sizes = [len(SINKS["webhook"].render(v)) for v in versions]
    assert sizes == sorted(sizes, reverse=True) and sizes[-1] < 1000
    for version in versions:
        for key in ("event", "incident_id", "kind", "dedup_key", "schedules_total", "link"):
            assert version[key] == message[key]


def test_a_configured_limit_under_the_shortest_page_is_an_error_that_is_retried() -> None:
    sink = SINKS["webhook"]
    with pytest.raises(SinkError) as raised:
        fit(sink, fleet(10), limit=BodyLimit(200))
    assert raised.value.misconfigured and not raised.value.permanent
    # A limit learned from a 413 is a guess: the shortest version goes out anyway.
    learned = BodyLimit(10_000, learned=200)
    assert fit(sink, fleet(10), limit=learned).shortest


def test_a_413_lowers_the_limit_below_the_refused_body_and_never_raises_it() -> None:
    limit = BodyLimit(5000)
    limit.refused(4000)
    assert limit.bytes == 3999
    limit.refused(4500)
    assert limit.bytes == 3999


def test_a_huge_summary_or_member_list_in_a_slack_message_stays_under_slacks_limits() -> None:
    message = {**fleet(10_000), "summary": "é" * 100_000}
    payload = slack_payload(message)
    assert len(payload["text"]) <= 3000
    assert len(payload["blocks"][0]["text"]["text"]) <= 3000
    assert len(SINKS["slack"].render(message)) <= SINKS["slack"].max_body
