"""Duration bounds on the real servers: a worker runs the probe job under a schedule applied
with `expected_duration` and `late_start`; each run's commit records its start, duration and
the bound it broke, and the monitor pages `too-fast`, `too-slow` or `late-start` once, to a real
local HTTP receiver, and resolves once the next run is within bounds. A replay is never judged
late. Runs are started as `backfill run` and the run-commit tests start them (the workflow with
a fire time), under a schedule that never fires on its own during a test."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import asyncpg
import pytest
import pytest_asyncio
from temporalio.client import Client
from temporalio.service import RPCError
from temporalio.worker import Worker

from cronwarden.activities.contract import RAN, logical_key
from cronwarden.embedded import free_port
from cronwarden.monitor.http import monitor_app, serve_monitor
from cronwarden.monitor.metrics import Metrics
from cronwarden.monitor.page import PageAccess, StatusPage
from cronwarden.schedules.apply import apply_definitions
from cronwarden.schedules.mapping import run_input
from cronwarden.schedules.model import ScheduleDefinition
from cronwarden.schedules.run_ids import replay_workflow_id
from cronwarden.store.incidents import LATE_START, TOO_FAST, TOO_SLOW
from cronwarden.workflows.scheduled_run import ScheduledRunWorkflow
from tests.support.cleanup import delete_schedules
from tests.support.cli import cli
from tests.support.database import fetch
from tests.support.http_probe import http_get_text
from tests.support.monitor import events, incidents_of, monitoring, passes
from tests.support.monitor import receiver as receiver
from tests.support.receiver import Receiver
from tests.support.runs import args_digest, heartbeat
from tests.support.schedules import write_schedules_file, yearly_definition

pytestmark = pytest.mark.integration


def now_fire(offset: timedelta = timedelta(0)) -> datetime:
    """A fire time of whole seconds around now, unique per call within a test."""
    return datetime.now(UTC).replace(microsecond=0) + offset


@dataclass
class Bounded:
    """One schedule applied with bounds, the worker running its job, and what it recorded."""

    client: Client
    pool: asyncpg.Pool
    task_queue: str
    database: str
    receiver: Receiver
    schedule_id: str
    applied: list[str] = field(default_factory=list)
    defn: ScheduleDefinition | None = None

    async def apply(self, **fields: Any) -> None:
        self.defn = yearly_definition(self.schedule_id, lock_ttl="10s", timeout="30s", **fields)
        await apply_definitions(self.client, self.pool, [self.defn], task_queue=self.task_queue)
        self.applied.append(self.schedule_id)

    async def run(self, fire: datetime, *, sleep: float = 0.0, replay: bool = False) -> str:
        """Run `fire` to its end (a live fire's run, or a replay's); its logical key."""
        assert self.defn is not None
        args = {"sleep": sleep, "write": False}
        inp = replace(
            run_input(self.defn, task_queue=self.task_queue),
            args=args,
            args_digest=args_digest(args),
            fire_time=fire.isoformat(),
            replay=replay,
        )
        # A replay's id as `backfill run` names it; a live-looking one otherwise.
        workflow_id = (
            replay_workflow_id(self.schedule_id, fire)
            if replay
            else f"test-live-{self.schedule_id}-{uuid.uuid4().hex[:8]}"
        )
        handle = await self.client.start_workflow(
            ScheduledRunWorkflow.run, inp, id=workflow_id, task_queue=self.task_queue
        )
        assert (await handle.result()).outcome == RAN
        return logical_key(self.schedule_id, fire)

    async def record(self, key: str) -> asyncpg.Record:
        [row] = await fetch(
            self.pool,
            "SELECT started_at, duration, breach, committed_at, fire_time"
            " FROM cronwarden.outbox WHERE logical_key = $1",
            key,
        )
        return row

    async def page(self) -> str:
        """The schedule's status page, served by the monitor's app for one GET."""

        async def temporal() -> Client:
            return self.client

        page = StatusPage(self.database, temporal, access=PageAccess("local"), links=None)
        port = free_port()
        try:
            app = monitor_app(Metrics(), healthy=lambda: True, page=page)
            async with serve_monitor(app, host="127.0.0.1", port=port):
                status, html = await http_get_text(port, f"/schedules/{self.schedule_id}")
        finally:
            await page.close()
        assert status == 200
        return html


@pytest_asyncio.fixture(loop_scope="session")
async def bounded(
    client: Client,
    pool: asyncpg.Pool,
    task_queue: str,
    database: str,
    receiver: Receiver,
    schedule_id: str,
    worker: Worker,
) -> AsyncIterator[Bounded]:
    found = Bounded(client, pool, task_queue, database, receiver, schedule_id)
    yield found
    await delete_schedules(client, found.applied)


async def test_a_job_that_returns_at_once_under_min_pages_too_fast_once_and_a_run_within_resolves(
    bounded: Bounded,
) -> None:
    await bounded.apply(expected_duration={"min": "2s"})
    first = await bounded.run(now_fire())
    row = await bounded.record(first)
    assert row["breach"] == TOO_FAST and row["duration"] < timedelta(seconds=2)
    # The start is the lease's, by the database's clock: before the commit, after the fire.
    assert row["fire_time"] <= row["started_at"] <= row["committed_at"]
    beat = await heartbeat(bounded.pool, bounded.schedule_id)
    assert (beat["last_run_key"], beat["last_run_breach"]) == (first, TOO_FAST)
    assert beat["duration_min"] == timedelta(seconds=2) and beat["duration_max"] is None
    async with monitoring(bounded.database, bounded.receiver) as monitor:
        await passes(monitor, 2)
        [trigger] = events(bounded.receiver)
        assert trigger["kind"] == TOO_FAST and trigger["schedule_id"] == bounded.schedule_id
        assert f"run {first} took " in trigger["summary"]
        assert (
            "under its expected minimum of 2s: the job may have done nothing"
            in (trigger["summary"])
        )
        # Another run as fast: the same incident, no second page.
        second = await bounded.run(now_fire(timedelta(seconds=1)))
        assert (await heartbeat(bounded.pool, bounded.schedule_id))["last_run_key"] == second
        await passes(monitor, 2)
        assert events(bounded.receiver) == [trigger]
        # The next run within bounds resolves it, once.
        within = await bounded.run(now_fire(timedelta(seconds=2)), sleep=2.2)
        assert (await bounded.record(within))["breach"] is None
        await passes(monitor, 2)
    assert [e["event"] for e in events(bounded.receiver)] == ["trigger", "resolve"]
    [incident] = await incidents_of(bounded.pool, bounded.schedule_id)
    assert incident["kind"] == TOO_FAST and incident["resolution"] == "recovered"


async def test_a_job_that_sleeps_past_max_pages_too_slow_and_the_status_page_shows_it(
    bounded: Bounded,
) -> None:
    await bounded.apply(expected_duration={"min": "1s", "max": "2s"})
    slow = await bounded.run(now_fire(), sleep=3)
    row = await bounded.record(slow)
    assert row["breach"] == TOO_SLOW and row["duration"] > timedelta(seconds=3)
    async with monitoring(bounded.database, bounded.receiver) as monitor:
        await passes(monitor, 2)
        [trigger] = events(bounded.receiver)
        assert trigger["kind"] == TOO_SLOW
        assert "longer than its expected maximum of 2s" in trigger["summary"]
        assert trigger["details"]["expected_duration"] == {"min": "1s", "max": "2s"}
        assert trigger["details"]["duration_seconds"] > 3
        within = await bounded.run(now_fire(timedelta(seconds=1)), sleep=1.2)
        await passes(monitor, 2)
    assert [e["event"] for e in events(bounded.receiver)] == ["trigger", "resolve"]

    # The schedule's page shows each run's duration against the bounds.
    html = await bounded.page()
    assert 'id="run-durations"' in html
    assert "Expected duration: at least 1s and at most 2s" in html
    assert html.count('data-breach="too-slow"') == 1
    assert html.count('data-breach="within"') == 1
    assert f"<code>{slow}</code>" in html and f"<code>{within}</code>" in html


async def test_a_run_started_late_pages_late_start_but_a_replay_of_an_old_fire_is_never_late(
    bounded: Bounded,
) -> None:
    await bounded.apply(late_start="30s")
    # A live fire's run whose job starts ten minutes after its slot (a worker outage, a
    # catchup): late.
    late = await bounded.run(now_fire(-timedelta(minutes=10)))
    row = await bounded.record(late)
    assert row["breach"] == LATE_START
    assert row["started_at"] - row["fire_time"] >= timedelta(minutes=10)
    async with monitoring(bounded.database, bounded.receiver) as monitor:
        await passes(monitor, 2)
        [trigger] = events(bounded.receiver)
        assert trigger["kind"] == LATE_START
        assert "after its fire time, later than its late_start of 30s" in trigger["summary"]
        assert trigger["details"]["late_seconds"] >= 600
        # A replay runs a past fire on purpose: never judged late, and it never moves the live
        # judgement, so the incident stays open and nothing more pages.
        replayed = await bounded.run(now_fire(-timedelta(hours=2)), replay=True)
        assert (await bounded.record(replayed))["breach"] is None
        assert (await heartbeat(bounded.pool, bounded.schedule_id))["last_run_key"] == late
        await passes(monitor, 2)
        assert events(bounded.receiver) == [trigger]
        # The next live run on time resolves it.
        await bounded.run(now_fire())
        await passes(monitor, 2)
    assert [e["event"] for e in events(bounded.receiver)] == ["trigger", "resolve"]
    html = await bounded.page()
    assert html.count('data-breach="late-start"') == 1 and "replay</span>" in html


@pytest.mark.parametrize(
    ("fields", "problem"),
    [
        ("expected_duration: {min: 10m, max: 5s}", "min (10m) must be shorter than max (5s)"),
        ("expected_duration: {min: 0s}", "field 'expected_duration.min'"),
        ("expected_duration: {min: 5s, maxx: 1m}", "unknown field 'maxx' (did you mean 'max'?)"),
        ("late_start: 5s", "field 'late_start': 5s is below the minimum of 30s"),
    ],
    ids=["min-above-max", "zero", "unknown-key", "late-start-below-floor"],
)
async def test_bad_bounds_are_refused_by_apply_with_one_error_and_change_nothing(
    client: Client,
    pool: asyncpg.Pool,
    cli_env: dict[str, str],
    tmp_path: Path,
    schedule_id: str,
    fields: str,
    problem: str,
) -> None:
    text = f"""
        schedules:
          - id: {schedule_id}
            job: probe
            cron: "0 3 1 1 *"
            {fields}
        """
    result = await cli(cli_env, "schedules", "apply", str(write_schedules_file(tmp_path, text)))
    assert result.code == 2, result
    assert result.stderr.count(problem) == 1, result.stderr
    with pytest.raises(RPCError):
        await client.get_schedule_handle(schedule_id).describe()
    assert (
        await fetch(pool, "SELECT 1 FROM cronwarden.heartbeats WHERE schedule_id = $1", schedule_id)
        == []
    )
