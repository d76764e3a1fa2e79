"""Helpers of the monitor's tests: a receiver standing in for the sinks, settings and
environments pointed at it, a monitor stepped in process, and heartbeat rows staged in SQL."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from cronwarden.config import Settings
from cronwarden.monitor.passes import Monitor, options_from_settings
from cronwarden.monitor.pauses import PauseCheck
from cronwarden.monitor.process import sinks_from_settings
from tests.support.cli import cronwarden_argv
from tests.support.database import fetch
from tests.support.paths import REPO_ROOT
from tests.support.receiver import Receiver

SECRET = "whsec-test-7f3a"
ROUTING_KEY = "pd-routing-key-91c2"
SLACK_PATH = "/slack/T000/B000/slack-token-5d1e"


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with Receiver() as r:
        yield r


def settings_for(database: str, receiver: Receiver, **overrides: Any) -> dict[str, Any]:
    values: dict[str, Any] = {
        "database_url": database,
        "alert_webhook_url": receiver.url("/hook"),
        "alert_webhook_secret": SECRET,
        "monitor_retry_base_seconds": 0.05,
        "monitor_retry_max_seconds": 0.2,
        "monitor_send_timeout_seconds": 5,
    }
    values.update(overrides)
    return values


def env_for(values: dict[str, Any]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CRONWARDEN_")}
    env.update({f"CRONWARDEN_{k.upper()}": str(v) for k, v in values.items()})
    env["PYTHONPATH"] = str(REPO_ROOT)
    return env


@asynccontextmanager
async def monitoring(
    database: str,
    receiver: Receiver,
    *,
    pauses: PauseCheck | None = None,
    state_file: Path | None = None,
    **overrides: Any,
) -> AsyncIterator[Monitor]:
    """A monitor stepped by the test. `state_file`: where its database alert's state lives
    (default: none, nothing shared with other monitors)."""
    settings = Settings.model_validate(settings_for(database, receiver, **overrides))
    options = options_from_settings(settings, interval=0.2)
    monitor = Monitor(
        dsn=settings.dsn,
        sinks=sinks_from_settings(settings),
        options=replace(options, state_file=state_file),
        pauses=pauses,
    )
    try:
        yield monitor
    finally:
        await monitor.close()


async def passes(monitor: Monitor, n: int = 1) -> None:
    for _ in range(n):
        await monitor.run_pass()


async def stage(
    pool: asyncpg.Pool,
    schedule_id: str,
    *,
    late: str = "1 hour",
    grace: str = "1 minute",
    succeeded: bool = True,
    paused: bool = False,
) -> None:
    """A heartbeat row whose expected fire was `late` ago (database time)."""
    async with pool.acquire() as conn:
        await conn.execute(
            """
            INSERT INTO cronwarden.heartbeats
                   (schedule_id, next_expected_at, grace, last_success_at, paused)
            VALUES ($1, now() - $2::text::interval, $3::text::interval,
                    CASE WHEN $4 THEN now() - interval '2 hours' END, $5)
            """,
            schedule_id,
            late,
            grace,
            succeeded,
            paused,
        )


async def stage_many(pool: asyncpg.Pool, prefix: str, n: int) -> list[str]:
    ids = [f"{prefix}-{i}" for i in range(n)]
    for sid in ids:
        await stage(pool, sid)
    return ids


RECOVERED = (
    "UPDATE cronwarden.heartbeats SET last_success_at = now(),"
    " next_expected_at = now() + interval '1 hour' WHERE schedule_id = $1"
)


async def expected_ago(pool: asyncpg.Pool, schedule_id: str, ago: str) -> None:
    """Move the schedule's expected fire to `ago` (a Postgres interval) before now."""
    async with pool.acquire() as conn:
        await conn.execute(
            "UPDATE cronwarden.heartbeats SET next_expected_at = now() - $2::text::interval"
            " WHERE schedule_id = $1",
            schedule_id,
            ago,
        )


async def heartbeat_lands(pool: asyncpg.Pool, schedule_id: str) -> None:
    """What a run's commit does to the row: success now, next fire in the future."""
    async with pool.acquire() as conn:
        await conn.execute(RECOVERED, schedule_id)


def events(receiver: Receiver, path: str = "/hook", **match: Any) -> list[dict[str, Any]]:
    bodies = [r.body for r in receiver.at(path, accepted_only=True)]
    return [b for b in bodies if all(b.get(k) == v for k, v in match.items())]


async def incidents_of(pool: asyncpg.Pool, schedule_id: str | None) -> list[asyncpg.Record]:
    return await fetch(
        pool,
        "SELECT * FROM cronwarden.incidents WHERE schedule_id IS NOT DISTINCT FROM $1 ORDER BY id",
        schedule_id,
    )


async def due_now(pool: asyncpg.Pool) -> None:
    """Move every backed-off notification's retry to now: the test, not the clock, decides."""
    async with pool.acquire() as conn:
        await conn.execute(
            "UPDATE cronwarden.notifications SET next_attempt_at = now() WHERE delivered_at IS NULL"
        )


async def start_monitor(env: dict[str, str], log: Path | None = None) -> asyncio.subprocess.Process:
    """A `cronwarden monitor` subprocess; its output goes to `log` if given, else nowhere."""
    # The child keeps its own copy of the descriptor.
    with log.open("ab") if log is not None else open(os.devnull, "wb") as out:
        return await asyncio.create_subprocess_exec(
            *cronwarden_argv("--log-json", "monitor", "--interval", "0.2"),
            env=env,
            cwd=REPO_ROOT,
            stdout=out,
            stderr=asyncio.subprocess.STDOUT,
        )


def held_mid_send(row: asyncpg.Record, *, attempts: int) -> bool:
    """A notification claimed by a sender that died mid-send: still claimed, not delivered, no
    error recorded and no attempt added since the claim."""
    return (
        row["delivered_at"] is None
        and row["claimed_until"] is not None
        and row["last_error"] is None
        and row["attempts"] == attempts
    )


async def waiting_on_locks(pool: asyncpg.Pool, at_least: int) -> bool:
    """At least this many monitor sessions wait for a lock (a test holds it)."""
    async with pool.acquire() as conn:
        waiting: int = await conn.fetchval(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
            " AND application_name = 'cronwarden' AND wait_event_type = 'Lock'"
        )
    return waiting >= at_least
