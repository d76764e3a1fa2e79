"""Scrubbing of secrets: the ones configured, in every spelling an error may give them, and the
ones recognisable by their shape; the bounded, storable form error texts are kept in; and the
standard library's log lines going through the same pipeline."""

from __future__ import annotations

import json
import logging
import os
from urllib.parse import quote

import pytest

from cronwarden import logs, redact
from cronwarden.redact import MASK, for_storage, printable

SLACK = "https://hooks.example/services/slack-0123456789abcdef"
TOKEN = "slack-0123456789abcdef"
PASSWORD = "pw-Sx9!q@ss"


@pytest.fixture(autouse=True)
def configured(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(redact, "_secrets", ())
    redact.remember([SLACK, "/services/slack-0123456789abcdef", PASSWORD])


@pytest.mark.parametrize(
    "text",
    [
        f"POST {SLACK} failed",
        f"quoted alone: {TOKEN}",
        f"encoded: {quote(SLACK, safe='')}",
        f"form-encoded: {quote(PASSWORD, safe='')}",
        f"in JSON: {json.dumps({'url': SLACK, 'pw': PASSWORD})}",
        f"wrapped: {TOKEN[:9]}\n        {TOKEN[9:]}",
        f"spaced: {TOKEN[:4]} {TOKEN[4:]}",
    ],
    ids=["as-is", "token-alone", "url-encoded", "encoded-password", "json", "line-break", "space"],
)
def test_a_configured_secret_is_blanked_in_every_spelling(text: str) -> None:
    scrubbed = redact.redact(text)
    assert TOKEN[9:] not in scrubbed and "Sx9" not in scrubbed, scrubbed
    assert MASK in scrubbed


@pytest.mark.parametrize(
    ("text", "kept", "gone"),
    [
        ("clone https://deploy:hunter2x@git.example/r.git", "https://deploy:***@", "hunter2x"),
        ("postgresql://app:s3cr3t@db:5432/ledger", "postgresql://app:***@db", "s3cr3t"),
        ("postgresql://app@db/ledger?password=s3cr3t&sslmode=require", "sslmode", "s3cr3t"),
        ("host=db user=app password='s3 cr3t' dbname=x", "dbname=x", "cr3t"),
        ("https://ghp0token1234@github.com/o/r", "https://***@github.com", "ghp0token1234"),
        ("GET /v1?page=2&token=abc123def&x=1", "page=2&token=***&x=1", "abc123def"),
        ("https://s3/o?X-Amz-Signature=f00ba4&X-Amz-Credential=AKIA1", "X-Amz-", "f00ba4"),
        ("https://x/y?sig=zz9zz9&key=kk8kk8", "sig=***", "kk8kk8"),
        ("Authorization: Bearer eyJhbGc.eyJzdWI.sig", "Authorization: Bearer ***", "eyJ"),
        ("{'Authorization': 'Basic dXNlcjpwYXNz'}", "'Authorization': 'Basic ***'", "dXNlc"),
        ("sent with bearer abcdef123456", "bearer ***", "abcdef123456"),
        ('{"routing_key": "R0UT1NG", "event_action": "trigger"}', "event_action", "R0UT1NG"),
        (
            "https://hooks.slack.com/services/T0AAAA/B0BBBB/xoxXXXXXXXXX",
            "hooks.slack.com/services/***",
            "xoxXXX",
        ),
        (
            "https://events.pagerduty.com/integration/0123abcd0123abcd/enqueue",
            "/integration/***/enqueue",
            "0123abcd",
        ),
        ("https://discord.com/api/webhooks/123/AbCdEf-123", "webhooks/123/***", "AbCdEf"),
        ("https%3A%2F%2Fdeploy%3Ahunter2x%40git.example", "deploy%3A***%40git", "hunter2x"),
        ("https://x/?token%3Dabc123def", "token%3D***", "abc123def"),
    ],
)
def test_a_credential_is_blanked_by_its_shape(text: str, kept: str, gone: str) -> None:
    scrubbed = redact.redact(text)
    assert gone not in scrubbed and kept in scrubbed, scrubbed


@pytest.mark.parametrize(
    "text",
    [
        "run s-1@2026-01-05T09:30:00Z: logical_key=s-1@2026 fencing_token=42 lock key held",
        "postgresql://app@db:5432/ledger",
        "https://events.pagerduty.com/v2/enqueue answered 503",
        "apply: 3 schedules, 0 changed; see https://docs.example/guide#keys",
    ],
)
def test_ordinary_text_is_left_alone(text: str) -> None:
    assert redact.redact(text) == text


def test_redacting_twice_changes_nothing_more() -> None:
    once = redact.redact(f"{SLACK} postgresql://a:b3c4d5@h/d?token=abc Bearer zzzzzzzz")
    assert redact.redact(once) == once


def test_text_that_is_not_utf8_is_stored_escaped() -> None:
    assert printable(b"caf\xc3\xa9 \xff\xfe") == "café \\xff\\xfe"
    assert printable(os.fsdecode(b"name-\xff")) == "name-\\udcff"
    assert printable("nul\x00here") == "nul\\x00here"
    # Every one encodes as UTF-8 and holds no NUL: Postgres' text takes it.
    for text in (b"\xff\x00", "\ud800", "a\x00b"):
        stored = for_storage(text)
        stored.encode("utf-8")
        assert "\x00" not in stored


def test_a_huge_error_is_cut_with_a_marker_after_it_is_scrubbed() -> None:
    text = "x" * 1_000_000 + f" finally {SLACK}"
    stored = for_storage(text)
    assert len(stored) <= 2000
    assert stored.endswith(f"[cut: {len(text) - len(SLACK) + len(MASK)} characters in all]")
    # A secret straddling the cut: blanked whole first, so no half of it survives the cut.
    straddling = "y" * 1990 + SLACK
    assert TOKEN[:6] not in for_storage(straddling)
    # Text made of little but secrets shrinks when blanked: nothing is left of any of them.
    assert TOKEN not in for_storage(SLACK * 50_000)


def test_a_short_error_is_kept_whole() -> None:
    assert for_storage("boom") == "boom"


def test_library_log_lines_and_their_tracebacks_are_redacted(
    capsys: pytest.CaptureFixture[str],
) -> None:
    logs.configure(json=True)
    try:
        try:
            raise ConnectionError(f"refused by {SLACK}")
        except ConnectionError as cause:
            raise RuntimeError("job failed: password=hunter2x") from cause
    except RuntimeError:
        logging.getLogger("temporalio.activity").warning(
            "Completing activity as failed", exc_info=True
        )
    logging.getLogger("aiohttp.server").error("Error handling %s", f"{SLACK}?token=abc123")
    logging.getLogger("asyncio").error("Task exception was never retrieved: %s", PASSWORD)
    lines = [json.loads(line) for line in capsys.readouterr().err.splitlines()]
    text = json.dumps(lines)
    assert TOKEN not in text and "hunter2x" not in text and "Sx9" not in text, text
    sdk, server, loop = lines
    assert sdk["event"] == "library.log" and sdk["logger"] == "temporalio.activity"
    assert f"refused by {MASK}" in sdk["exception"], sdk
    assert "password=***" in sdk["exception"]
    assert server["message"] == f"Error handling {MASK}?token={MASK}"
    assert loop["level"] == "error"


def test_the_bridge_is_installed_once(capsys: pytest.CaptureFixture[str]) -> None:
    logs.configure(json=True)
    logs.configure(json=True)
    logging.getLogger("temporalio.worker").warning("once")
    assert capsys.readouterr().err.count('"once"') == 1
