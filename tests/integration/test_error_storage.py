"""Every error text the store writes lands scrubbed, storable and bounded: a job's or a replay's
error and an incident's summary and details, on a real Postgres, whatever bytes the error
carried (a NUL used to fail the write, leaving the previous error in place)."""

from __future__ import annotations

import os

import asyncpg
import pytest

from cronwarden import redact
from cronwarden.store import heartbeats, incidents, notifications
from tests.support.monitor import stage

pytestmark = pytest.mark.integration

CONFIGURED = "hook-5b1d0c7e9a2f"
NOT_UTF8 = os.fsdecode(b"caf\xc3\xa9-\xff")  # a lone surrogate after the é
NASTY = (
    f"RuntimeError: posting to https://hooks.example/{CONFIGURED} failed\x00 for "
    f"{NOT_UTF8} via postgresql://app:pg-pass-77@db/ledger "
    "?token=tok-99x " + "z" * 1_000_000 + f" last: {CONFIGURED}"
)


@pytest.fixture(autouse=True)
def configured(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(redact, "_secrets", ())
    redact.remember([CONFIGURED])


def assert_stored(text: str) -> None:
    for secret in (CONFIGURED, "pg-pass-77", "tok-99x"):
        assert secret not in text, text[:300]
    assert "\x00" not in text and len(text) <= redact.ERROR_LIMIT
    assert text.startswith("RuntimeError: posting to https://hooks.example/***")
    assert "café-\\udcff" in text and text.endswith("characters in all]")


async def test_a_job_and_a_replay_error_are_stored_scrubbed(
    pool: asyncpg.Pool, schedule_id: str
) -> None:
    await stage(pool, schedule_id)
    async with pool.acquire() as conn:
        await heartbeats.record_failure(conn, schedule_id=schedule_id, error=NASTY)
        await heartbeats.record_replay_failure(
            conn, schedule_id=schedule_id, logical_key=f"{schedule_id}@x", error=NASTY
        )
        row = await heartbeats.get(conn, schedule_id)
    assert row is not None
    assert_stored(row["last_error"])
    assert_stored(row["last_replay_error"])


async def test_an_incident_keeps_no_secret_of_what_it_quotes(
    pool: asyncpg.Pool, schedule_id: str
) -> None:
    await stage(pool, schedule_id)
    async with pool.acquire() as conn:
        row = await incidents.open_incident(
            conn,
            schedule_id=schedule_id,
            kind=incidents.OVERDUE,
            summary=f"schedule {schedule_id} is overdue; last error: {NASTY}",
            details={"last_error": NASTY[:500], "nested": [{"url": f"x/{CONFIGURED}"}]},
        )
    assert row is not None
    text = f"{row['summary']} {row['details']}"
    for secret in (CONFIGURED, "pg-pass-77", "tok-99x"):
        assert secret not in text
    assert "\x00" not in text
    assert len(row["summary"]) <= incidents.SUMMARY_LIMIT
    assert row["details"]["nested"] == [{"url": "x/***"}]


async def test_a_sinks_error_on_a_notification_is_stored_scrubbed(
    pool: asyncpg.Pool, schedule_id: str
) -> None:
    # A sink's client error quotes the URL it posted to (its token) and what came back.
    await stage(pool, schedule_id)
    async with pool.acquire() as conn:
        incident = await incidents.open_incident(
            conn, schedule_id=schedule_id, kind=incidents.OVERDUE, summary="late", details={}
        )
        assert incident is not None
        await notifications.enqueue(
            conn,
            incident_id=incident["id"],
            event="trigger",
            sinks=["webhook", "slack"],
            message={"dedup_key": f"cronwarden:{schedule_id}"},
        )
        claimed = await notifications.claim_due(
            conn, claimer="m", claim_seconds=60, sink="webhook", limit=1
        )
        await notifications.mark_failed(
            conn,
            notification_id=claimed[0].id,
            claimer="m",
            error=NASTY,
            retry_in_seconds=1,
        )
        [dead] = await notifications.claim_due(
            conn, claimer="m", claim_seconds=60, sink="slack", limit=1
        )
        await notifications.mark_dead(conn, notification_id=dead.id, claimer="m", error=NASTY)
        rows = await conn.fetch(
            "SELECT last_error FROM cronwarden.notifications WHERE incident_id = $1",
            incident["id"],
        )
    assert len(rows) == 2
    for row in rows:
        assert_stored(row["last_error"])
