"""Worker processes killed and stopped for real (subprocesses of `cronwarden worker`)."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import asyncpg
import pytest
from temporalio.client import Client, WorkflowHandle

from cronwarden.activities.contract import RAN, RunOutcome, logical_key
from cronwarden.embedded import free_port
from tests.support.database import fetch
from tests.support.http_probe import Answer, http_get
from tests.support.paths import REPO_ROOT
from tests.support.runs import FIRE, committed_attempts, effects, lease_holder, start_run
from tests.support.servers import in_process_worker
from tests.support.waiting import wait_for
from tests.support.workers import start_worker_process

pytestmark = pytest.mark.integration


@pytest.fixture
def spawn_worker(cli_env: dict[str, str]) -> Iterator[list[subprocess.Popen[bytes]]]:
    procs: list[subprocess.Popen[bytes]] = []
    yield procs
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)


async def exited_zero(proc: subprocess.Popen[bytes]) -> str:
    """Wait for a stopping worker; its output, once it exited 0."""
    code = await asyncio.to_thread(proc.wait, 40)
    output = proc.stdout.read().decode() if proc.stdout else ""
    assert code == 0, output
    return output


async def output_until(proc: subprocess.Popen[bytes], event: str, *, timeout: float) -> str:
    """The worker's output up to and including its first log line of `event`."""

    def read() -> str:
        assert proc.stdout is not None
        lines = []
        for raw in iter(proc.stdout.readline, b""):
            line = raw.decode()
            lines.append(line)
            if line.startswith("{") and json.loads(line).get("event") == event:
                return "".join(lines)
        raise AssertionError(f"the worker exited without logging {event}: {''.join(lines)}")

    return await asyncio.wait_for(asyncio.to_thread(read), timeout)


async def finish_elsewhere(
    client: Client, pool: asyncpg.Pool, task_queue: str, handle: WorkflowHandle[Any, RunOutcome]
) -> RunOutcome:
    """Let an in-process worker complete the run's workflow."""
    async with in_process_worker(client, pool, task_queue):
        return await asyncio.wait_for(handle.result(), timeout=60)


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
    tmp_path: Path,
) -> None:
    proc = start_worker_process(cli_env, graceful=30)
    spawn_worker.append(proc)
    gate = tmp_path / "gate"
    handle = await start_run(client, task_queue, schedule_id, job="gated", args={"gate": str(gate)})
    lock = f"schedule:{schedule_id}"
    await lease_holder(pool, lock)
    proc.send_signal(signal.SIGTERM)
    # The job is held at its gate until the worker says it drains: the job is running then.
    drained = await output_until(proc, "worker.draining", timeout=30)
    assert await effects(pool, logical_key(schedule_id, FIRE)) == 0
    gate.touch()
    output = drained + await exited_zero(proc)
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
    assert await committed_attempts(pool, key) == [1]
    assert await effects(pool, key) == 1
    # Its workflow completes on whichever worker polls next, without running the job again.
    outcome = await finish_elsewhere(client, pool, task_queue, handle)
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


async def test_sigterm_turns_readiness_off_before_the_job_finishes_then_exits_zero(
    client: Client,
    pool: asyncpg.Pool,
    task_queue: str,
    schedule_id: str,
    cli_env: dict[str, str],
    spawn_worker: list[subprocess.Popen[bytes]],
    tmp_path: Path,
) -> None:
    port = free_port()
    proc = start_worker_process(cli_env, graceful=30, health_port=port)
    spawn_worker.append(proc)

    async def readiness() -> Answer:
        return await http_get(port, "/readyz")

    async def ready() -> bool:
        return (await readiness()).status == 200

    await wait_for(ready, timeout=30, what="the worker's /readyz to answer 200")
    gate = tmp_path / "gate"
    handle = await start_run(client, task_queue, schedule_id, job="gated", args={"gate": str(gate)})
    await lease_holder(pool, f"schedule:{schedule_id}")
    key = logical_key(schedule_id, FIRE)

    proc.send_signal(signal.SIGTERM)

    async def not_ready() -> Answer | None:
        answer = await readiness()
        return answer if answer.status == 503 else None

    answer = await wait_for(not_ready, timeout=10, what="/readyz to turn 503", interval=0.05)
    assert answer is not None
    assert answer.body == {"ready": False, "checks": {"worker": "draining"}}
    # The job is still held at its gate: readiness went off first, and the process still lives.
    assert await effects(pool, key) == 0
    assert (await http_get(port, "/healthz")).status == 200

    gate.touch()
    await exited_zero(proc)
    assert await committed_attempts(pool, key) == [1]
    assert await effects(pool, key) == 1
    outcome = await finish_elsewhere(client, pool, task_queue, handle)
    assert (outcome.outcome, outcome.attempt) == (RAN, 1)
    assert await effects(pool, key) == 1


async def test_a_run_cut_off_at_the_graceful_timeout_is_retried_elsewhere_and_applies_once(
    client: Client,
    pool: asyncpg.Pool,
    task_queue: str,
    schedule_id: str,
    cli_env: dict[str, str],
    spawn_worker: list[subprocess.Popen[bytes]],
    tmp_path: Path,
) -> None:
    proc = start_worker_process(cli_env, graceful=1)
    spawn_worker.append(proc)
    gate = tmp_path / "gate"
    handle = await start_run(
        client, task_queue, schedule_id, job="gated", args={"gate": str(gate)}, lock_ttl=30
    )
    lock = f"schedule:{schedule_id}"
    await lease_holder(pool, lock)
    proc.send_signal(signal.SIGTERM)
    assert "run.cancelled" in await exited_zero(proc)
    key = logical_key(schedule_id, FIRE)
    assert await effects(pool, key) == 0
    # The cut-off run freed its lease on the way out, so the retry need not wait out the TTL.
    rows = await fetch(pool, "SELECT holder FROM cronwarden.locks WHERE name = $1", lock)
    assert [r["holder"] for r in rows] == [None]

    gate.touch()
    outcome = await finish_elsewhere(client, pool, task_queue, handle)
    # Handed back, not retried: the run goes on as a new activity at its first attempt.
    assert (outcome.outcome, outcome.attempt) == (RAN, 1)
    assert await effects(pool, key) == 1


USER_JOBS = """
from activities import ORIGIN as ACTIVITIES
from workflows import ORIGIN as WORKFLOWS

from cronwarden import JobContext, job


@job("user-project-probe")
async def probe(ctx: JobContext) -> dict[str, list[str]]:
    return {"origins": [ACTIVITIES, WORKFLOWS]}
"""


async def test_a_user_project_with_its_own_activities_and_workflows_packages_runs_its_jobs(
    client: Client,
    pool: asyncpg.Pool,
    task_queue: str,
    schedule_id: str,
    cli_env: dict[str, str],
    spawn_worker: list[subprocess.Popen[bytes]],
    tmp_path: Path,
) -> None:
    # Temporal projects very often name their packages `activities` and `workflows`: the worker
    # imports cronwarden's own under `cronwarden.`, so the project's are the ones its jobs see.
    project = tmp_path / "project"
    for package in ("activities", "workflows"):
        (project / package).mkdir(parents=True)
        (project / package / "__init__.py").write_text(f'ORIGIN = "the project\'s {package}"\n')
    (project / "userjobs.py").write_text(USER_JOBS)
    env = {k: v for k, v in cli_env.items() if k != "PYTHONPATH"}
    proc = start_worker_process({**env, "CRONWARDEN_JOBS": "userjobs"}, cwd=project)
    spawn_worker.append(proc)
    handle = await start_run(client, task_queue, schedule_id, job="user-project-probe")
    outcome = await asyncio.wait_for(handle.result(), timeout=60)
    assert (outcome.outcome, outcome.result) == (
        RAN,
        {"origins": ["the project's activities", "the project's workflows"]},
    )
    key = logical_key(schedule_id, FIRE)
    assert await committed_attempts(pool, key) == [1]
