"""Worker processes killed and stopped for real (subprocesses of `cronwarden worker`)."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
from collections.abc import Iterator
from datetime import timedelta

import asyncpg
import pytest
from temporalio.client import Client
from temporalio.worker import Worker

from activities.contract import RAN, logical_key
from activities.jobs import REGISTRY
from cronwarden.worker_runtime import build_worker
from tests.integration.conftest import REPO_ROOT, cronwarden_argv, fetch
from tests.integration.test_guard import FIRE, effects, lease_holder, start_run

pytestmark = pytest.mark.integration


@pytest.fixture
def spawn_worker(cli_env: dict[str, str]) -> Iterator[list[subprocess.Popen[bytes]]]:
    procs: list[subprocess.Popen[bytes]] = []
    yield procs
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)


def in_process_worker(client: Client, pool: asyncpg.Pool, task_queue: str) -> Worker:
    return build_worker(
        client=client,
        pool=pool,
        registry=REGISTRY,
        task_queue=task_queue,
        graceful_shutdown=timedelta(seconds=5),
    )


def start_worker_process(env: dict[str, str], *, graceful: float = 30) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        cronwarden_argv("--log-json", "worker"),
        env={**env, "CRONWARDEN_GRACEFUL_SHUTDOWN_SECONDS": str(graceful)},
        cwd=REPO_ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )


async def test_a_worker_killed_mid_job_is_replaced_and_the_key_still_applies_once(
    client: Client,
    pool: asyncpg.Pool,
    task_queue: str,
    schedule_id: str,
    cli_env: dict[str, str],
    spawn_worker: list[subprocess.Popen[bytes]],
) -> None:
    doomed = start_worker_process(cli_env)
    spawn_worker.append(doomed)
    handle = await start_run(client, task_queue, schedule_id, args={"sleep": 4}, lock_ttl=30)
    lock = f"schedule:{schedule_id}"
    await lease_holder(pool, lock)
    doomed.send_signal(signal.SIGKILL)
    doomed.wait(timeout=10)

    # A fresh worker (in this process) picks the retry up once Temporal's heartbeat timeout
    # declares the killed attempt dead; the retry takes the lease over at once.
    async with in_process_worker(client, pool, task_queue):
        outcome = await asyncio.wait_for(handle.result(), timeout=60)
    assert outcome.outcome == RAN
    assert outcome.attempt == 2
    assert await effects(pool, logical_key(schedule_id, FIRE)) == 1


async def test_sigterm_lets_the_running_job_finish_and_exits_zero(
    client: Client,
    pool: asyncpg.Pool,
    task_queue: str,
    schedule_id: str,
    cli_env: dict[str, str],
    spawn_worker: list[subprocess.Popen[bytes]],
) -> None:
    proc = start_worker_process(cli_env, graceful=30)
    spawn_worker.append(proc)
    handle = await start_run(client, task_queue, schedule_id, args={"sleep": 3})
    lock = f"schedule:{schedule_id}"
    await lease_holder(pool, lock)
    proc.send_signal(signal.SIGTERM)
    code = await asyncio.to_thread(proc.wait, 40)
    output = proc.stdout.read().decode() if proc.stdout else ""
    assert code == 0, output
    events = [json.loads(line) for line in output.splitlines() if line.startswith("{")]
    names = [e["event"] for e in events]
    assert (
        names.index("worker.draining")
        < names.index("run.committed")
        < names.index("worker.stopped")
    )
    # Every run event names its run: schedule and logical key bound, JSON off a terminal.
    run_events = [e for e in events if e["event"].startswith("run.")]
    assert {e["event"] for e in run_events} >= {"run.started", "run.committed"}
    for event in run_events:
        assert event["schedule_id"] == schedule_id
        assert event["logical_key"] == logical_key(schedule_id, FIRE)
        assert event["attempt"] == 1
        assert event["workflow_id"] == handle.id
    # The drained job committed before the process exited.
    key = logical_key(schedule_id, FIRE)
    rows = await fetch(pool, "SELECT attempt FROM cronwarden.outbox WHERE logical_key = $1", key)
    assert [r["attempt"] for r in rows] == [1]
    assert await effects(pool, key) == 1
    # Its workflow completes on whichever worker polls next, without running the job again.
    async with in_process_worker(client, pool, task_queue):
        outcome = await asyncio.wait_for(handle.result(), timeout=30)
    assert (outcome.outcome, outcome.attempt) == (RAN, 1)
    assert await effects(pool, key) == 1


async def test_python_worker_py_is_the_worker_command(cli_env: dict[str, str]) -> None:
    env = {**cli_env, "CRONWARDEN_DATABASE_URL": "postgresql://u:pw@127.0.0.1:1/db"}
    result = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "worker.py"],
        env=env,
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 1
    assert "cannot reach Postgres at 127.0.0.1:1/db" in result.stderr
