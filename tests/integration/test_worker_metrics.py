"""The worker's /metrics, scraped over HTTP from a running worker's health port after real runs."""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import AsyncIterator

import asyncpg
import pytest
import pytest_asyncio
from prometheus_client import CONTENT_TYPE_LATEST
from prometheus_client.parser import text_string_to_metric_families
from temporalio.client import Client

from cronwarden.embedded import EmbeddedTemporal, free_port
from tests.support.health_worker import serving_worker
from tests.support.http_probe import http_get_text
from tests.support.runs import start_run
from tests.support.servers import worker_settings

pytestmark = pytest.mark.integration


@pytest_asyncio.fixture(loop_scope="session")
async def health_port(
    temporal_server: EmbeddedTemporal, client: Client, pool: asyncpg.Pool, task_queue: str
) -> AsyncIterator[int]:
    """A worker polling `task_queue`, its health port (and /metrics) answering."""
    settings = worker_settings(temporal_server, task_queue, health_port=free_port())
    async with serving_worker(settings, client=client, pool=pool) as port:
        yield port


async def scrape(port: int) -> str:
    status, text = await http_get_text(port, "/metrics")
    assert status == 200
    return text


async def test_a_run_and_its_replay_are_counted_by_outcome_with_their_phases_timed(
    client: Client, task_queue: str, schedule_id: str, health_port: int
) -> None:
    first = await start_run(client, task_queue, schedule_id)
    assert (await first.result()).outcome == "ran"
    again = await start_run(client, task_queue, schedule_id)
    assert (await again.result()).outcome == "already-done"
    replay = await start_run(client, task_queue, schedule_id, replay=True)
    assert (await replay.result()).outcome == "already-done"

    families = {f.name: f for f in text_string_to_metric_families(await scrape(health_port))}
    runs = {
        (s.labels["schedule_id"], s.labels["outcome"]): s.value
        for s in families["cronwarden_runs"].samples
        if s.name == "cronwarden_runs_total"
    }
    assert runs == {(schedule_id, "ran"): 1, (schedule_id, "already-done"): 2}
    # The replay (a `backfill run` of the key) is counted among the runs and on its own.
    replays = {
        s.labels["outcome"]: s.value
        for s in families["cronwarden_replays"].samples
        if s.name == "cronwarden_replays_total"
    }
    assert replays == {"already-done": 1}
    phases = {
        s.labels["phase"]: s.value
        for s in families["cronwarden_guard_phase_seconds"].samples
        if s.name == "cronwarden_guard_phase_seconds_count"
    }
    # Each asked for the lease (the later two found the key done there); only the first ran.
    assert phases == {"acquire": 3, "job": 1, "commit": 1}
    totals = {
        s.name: s.value
        for name in ("lease_takeovers", "commit_failures", "describe_calls")
        for s in families[f"cronwarden_{name}"].samples
        if s.name.endswith("_total")
    }
    # The run that ran described its schedule for the next fire times (the replays never do).
    assert totals == {
        "cronwarden_lease_takeovers_total": 0,
        "cronwarden_commit_failures_total": 0,
        "cronwarden_describe_calls_total": 1,
    }


def totals(text: str) -> dict[str, float]:
    return {
        s.name: s.value
        for f in text_string_to_metric_families(text)
        for s in f.samples
        if s.name in ("cronwarden_lease_takeovers_total", "cronwarden_commit_failures_total")
    }


async def test_an_expired_lease_taken_over_and_a_commit_that_failed_are_counted(
    client: Client,
    pool: asyncpg.Pool,
    database: str,
    task_queue: str,
    schedule_id: str,
    health_port: int,
) -> None:
    # A holder that died without releasing: its lease expired a minute ago.
    await pool.execute(
        "INSERT INTO cronwarden.locks (name, holder, attempt, token, expires_at, acquired_at,"
        " logical_key, schedule_id) VALUES ($1, 'dead-worker', 1,"
        " nextval('cronwarden.lock_tokens'), now() - interval '1 minute',"
        " now() - interval '2 minutes', $2, $3)",
        f"schedule:{schedule_id}",
        f"{schedule_id}@2026-01-01T00:00:00Z",
        schedule_id,
    )
    taken = await start_run(client, task_queue, schedule_id)
    assert (await taken.result()).outcome == "ran"
    assert totals(await scrape(health_port)) == {
        "cronwarden_lease_takeovers_total": 1,
        "cronwarden_commit_failures_total": 0,
    }
    # Its commit dies with its connection on the first attempt; the retry commits.
    dropped = await start_run(
        client,
        task_queue,
        f"{schedule_id}-drop",
        job="drop-connection-before-commit",
        args={"dsn": database},
    )
    assert (await dropped.result()).outcome == "ran"
    assert totals(await scrape(health_port)) == {
        "cronwarden_lease_takeovers_total": 1,
        "cronwarden_commit_failures_total": 1,
    }


async def test_the_metrics_page_has_the_exposition_content_type(health_port: int) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", health_port)
    writer.write(b"GET /metrics HTTP/1.1\r\nHost: probe\r\n\r\n")
    await writer.drain()
    raw = await reader.read()
    writer.close()
    await writer.wait_closed()
    head = raw.partition(b"\r\n\r\n")[0].decode().lower()
    assert f"content-type: {CONTENT_TYPE_LATEST}".lower() in head


@pytest.mark.skipif(
    shutil.which("promtool") is None,
    reason="promtool (Debian's `prometheus` package) is not installed",
)
async def test_promtool_accepts_the_metrics_page(
    client: Client, task_queue: str, schedule_id: str, health_port: int
) -> None:
    await (await start_run(client, task_queue, schedule_id)).result()
    promtool = await asyncio.create_subprocess_exec(
        "promtool",
        "check",
        "metrics",
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    said, _ = await promtool.communicate((await scrape(health_port)).encode())
    assert promtool.returncode == 0, said.decode()
