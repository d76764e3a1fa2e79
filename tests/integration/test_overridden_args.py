"""Runs with other args than the schedule's, on real servers: `schedules trigger ID --args` and
`backfill run --args-file F`. The `records-args` job writes the args it was given to
`test_args`, so each row is what a run really applied; the outbox holds their digest."""

from __future__ import annotations

import asyncio
import json
import re
import signal
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import asyncpg
import pytest
from temporalio.client import Client, ScheduleHandle
from temporalio.service import RPCError
from temporalio.worker import Worker

from cronwarden.activities.contract import ALREADY_DONE, logical_key
from cronwarden.schedules.apply import apply_definitions
from cronwarden.schedules.model import ScheduleDefinition, args_digest
from cronwarden.schedules.run_ids import replay_workflow_id, scheduled_fire_time
from tests.support.cli import cli, iso
from tests.support.database import fetch
from tests.support.jobs import ARGS_DDL
from tests.support.outage import apply_paused
from tests.support.schedules import definition, yearly_definition
from tests.support.waiting import clock_past, wait_for
from tests.support.workers import start_worker_process

pytestmark = pytest.mark.integration

# What the guard notes on a key done with other args than the run's.
CONFLICT_NOTE = "this key committed with different args; it is reported, not run again"


async def _args_rows(pool: asyncpg.Pool, schedule_id: str) -> dict[str, list[dict[str, Any]]]:
    """Per logical key of the schedule, the args each application of it wrote."""
    rows = await fetch(
        pool,
        "SELECT logical_key, args FROM test_args WHERE logical_key LIKE $1 ORDER BY 1",
        f"{schedule_id}@%",
    )
    found: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        found.setdefault(r["logical_key"], []).append(json.loads(r["args"]))
    return found


async def _outbox_digest(pool: asyncpg.Pool, key: str) -> str | None:
    rows = await fetch(
        pool, "SELECT args_digest FROM cronwarden.outbox WHERE logical_key = $1", key
    )
    return rows[0]["args_digest"] if rows else None


async def _workflow_ids(client: Client, prefix: str) -> list[str]:
    return [e.id async for e in client.list_workflows(f"WorkflowId STARTS_WITH '{prefix}'")]


async def _applied(
    client: Client, pool: asyncpg.Pool, task_queue: str, defn: ScheduleDefinition
) -> ScheduleHandle:
    """`defn` applied, with the table its job writes to."""
    async with pool.acquire() as conn:
        await conn.execute(ARGS_DDL)
    await apply_definitions(client, pool, [defn], task_queue=task_queue)
    return client.get_schedule_handle(defn.id)


def _yearly(schedule_id: str, **args: Any) -> ScheduleDefinition:
    """A `records-args` schedule that fires only when triggered."""
    return yearly_definition(schedule_id, job="records-args", args={"label": "schedule", **args})


async def test_a_trigger_with_args_runs_the_job_with_them_and_the_outbox_holds_their_digest(
    client: Client,
    pool: asyncpg.Pool,
    task_queue: str,
    schedule_id: str,
    worker: Worker,
    cli_env: dict[str, str],
) -> None:
    defn = _yearly(schedule_id)
    handle = await _applied(client, pool, task_queue, defn)
    try:
        given = {"count": 3, "label": "given"}
        result = await cli(
            cli_env, "schedules", "trigger", schedule_id, "--args", json.dumps(given), "--json"
        )
        assert result.code == 0, result
        data = json.loads(result.stdout)
        key = data["logical_key"]
        fire_time = datetime.fromisoformat(data["fire_time"])
        # Named as Temporal names a trigger's run: the key and the id name the same second.
        assert key == logical_key(schedule_id, fire_time)
        assert scheduled_fire_time(schedule_id, data["workflow_id"]) == fire_time
        assert data["args_digest"] == args_digest(given) != defn.args_digest()
        await wait_for(lambda: _outbox_digest(pool, key), timeout=30, what="the run's commit")
        assert await _outbox_digest(pool, key) == args_digest(given)
        assert await _args_rows(pool, schedule_id) == {key: [given | {"gate": None}]}
    finally:
        await handle.delete()


async def test_bad_args_are_refused_with_exit_2_and_nothing_started(
    client: Client,
    pool: asyncpg.Pool,
    task_queue: str,
    schedule_id: str,
    worker: Worker,
    cli_env: dict[str, str],
) -> None:
    defn = _yearly(schedule_id)
    handle = await _applied(client, pool, task_queue, defn)
    try:
        refusals = {
            "not json": "--args is not JSON",
            "[1, 2]": "must be a JSON object",
            '"label"': "must be a JSON object",
            '{"count": 2}': "args for job 'records-args' are invalid: label: Field required",
            '{"label": "x", "cuont": 1}': "cuont: not an argument of this job (did you mean",
        }
        for text, reason in refusals.items():
            refused = await cli(cli_env, "schedules", "trigger", schedule_id, "--args", text)
            assert refused.code == 2, (text, refused)
            assert reason in refused.stderr and "nothing started" in refused.stderr, refused
            assert "Traceback" not in refused.stderr
        # A host whose CRONWARDEN_JOBS does not register the schedule's job cannot check them.
        elsewhere = cli_env | {"CRONWARDEN_JOBS": "tests.support.leaky_jobs"}
        unknown = await cli(
            elsewhere, "schedules", "trigger", schedule_id, "--args", '{"label": "x"}'
        )
        assert unknown.code == 2, unknown
        assert "unknown job 'records-args'" in unknown.stderr
        # Then a good one: once Temporal lists it, it is the only run of the schedule, so none
        # of the refused commands started one before it.
        good = await cli(
            cli_env, "schedules", "trigger", schedule_id, "--args", '{"label": "ok"}', "--json"
        )
        assert good.code == 0, good
        started = json.loads(good.stdout)["workflow_id"]
        listed = await wait_for(
            lambda: _workflow_ids(client, schedule_id), timeout=30, what="the good run listed"
        )
        assert listed == [started]
        key = json.loads(good.stdout)["logical_key"]
        await wait_for(lambda: _outbox_digest(pool, key), timeout=30, what="the good run's commit")
        assert await _args_rows(pool, schedule_id) == {
            key: [{"label": "ok", "count": 0, "gate": None}]
        }
    finally:
        await handle.delete()


async def test_a_trigger_with_args_while_a_run_holds_a_skip_schedules_lease_is_skipped(
    tmp_path: Path,
    client: Client,
    pool: asyncpg.Pool,
    task_queue: str,
    schedule_id: str,
    worker: Worker,
    cli_env: dict[str, str],
) -> None:
    gate = tmp_path / "gate"
    defn = _yearly(schedule_id, gate=str(gate))
    handle = await _applied(client, pool, task_queue, defn)
    try:
        first = await cli(cli_env, "schedules", "trigger", schedule_id, "--json")
        assert first.code == 0, first
        first_key = json.loads(first.stdout)["logical_key"]

        async def leased() -> bool:
            rows = await fetch(
                pool,
                "SELECT 1 FROM cronwarden.locks WHERE name = $1 AND logical_key = $2 "
                "AND holder IS NOT NULL",
                defn.lock_name,
                first_key,
            )
            return bool(rows)

        await wait_for(leased, timeout=30, what="the first run to hold the lease")
        second = await cli(
            cli_env, "schedules", "trigger", schedule_id, "--args", '{"label": "late"}'
        )
        assert second.code == 1, second
        assert "skipped at the schedule's lease" in second.stderr, second
        assert f"held by {first_key}" in second.stderr and "overlap is skip" in second.stderr
        gate.touch()
        await wait_for(lambda: _outbox_digest(pool, first_key), timeout=30, what="the first commit")
        # Only the run that held the lease applied anything.
        assert await _args_rows(pool, schedule_id) == {
            first_key: [{"label": "schedule", "count": 0, "gate": str(gate)}]
        }
    finally:
        await handle.delete()


async def test_backfill_with_an_args_file_replays_the_missing_keys_with_its_args(
    tmp_path: Path,
    client: Client,
    pool: asyncpg.Pool,
    task_queue: str,
    schedule_id: str,
    worker: Worker,
    cli_env: dict[str, str],
) -> None:
    async with pool.acquire() as conn:
        await conn.execute(ARGS_DDL)
    defn = definition(schedule_id, job="records-args", args={"label": "schedule"})
    handle, created_at = await apply_paused(client, pool, task_queue, defn)
    try:
        await wait_for(
            lambda: clock_past(created_at + timedelta(seconds=5)), timeout=30, what="missed fires"
        )
        given = {"label": "file", "count": 7}
        args_file = tmp_path / "args.json"
        args_file.write_text(json.dumps(given))
        window = ["--start", iso(created_at - timedelta(minutes=1)), "--end", "now"]
        # Bad files first: refused before anything is planned, nothing started.
        (tmp_path / "list.json").write_text("[]")
        (tmp_path / "latin1.json").write_bytes(b'{"label": "caf\xe9"}')
        (tmp_path / "big.json").write_text(json.dumps({"label": "x" * 300_000}))
        (tmp_path / "bad.json").write_text('{"label": 5}')
        bad = {
            "missing.json": "does not exist",
            "list.json": "must be a JSON object",
            "latin1.json": "is not UTF-8",
            "big.json": "is larger than 256 KiB",
            "bad.json": "args for job 'records-args' are invalid: label",
        }
        for name, reason in bad.items():
            refused = await cli(
                cli_env,
                "backfill",
                "run",
                schedule_id,
                *window,
                "--include-paused",
                "--args-file",
                str(tmp_path / name),
            )
            assert refused.code == 2, (name, refused)
            assert reason in refused.stderr and "nothing started" in refused.stderr, refused
        result = await cli(
            cli_env,
            "backfill",
            "run",
            schedule_id,
            *window,
            "--include-paused",
            "--args-file",
            str(args_file),
            "--json",
        )
        assert result.code == 0, result
        report = json.loads(result.stdout)
        replayed = report["summary"]["replayed"]
        assert replayed >= 2 and report["summary"][ALREADY_DONE] == 0, report
        assert report["args_conflicts"] == [] and report["skipped"] == []
        (ran,) = report["definitions"]
        assert ran["args_from"] == f"args file {args_file}"
        assert ran["args_digest"] == args_digest(given) and ran["keys"] == replayed
        rows = await _args_rows(pool, schedule_id)
        assert len(rows) == replayed
        assert all(applied == [given | {"gate": None}] for applied in rows.values())
        for key in rows:
            assert await _outbox_digest(pool, key) == args_digest(given)
        # The first replays' workflows are the only runs: the refused commands started none.
        assert len(await _workflow_ids(client, f"{schedule_id}~replay-")) == replayed
    finally:
        await handle.delete()


async def test_a_key_done_with_other_args_is_reported_as_a_conflict_and_not_run_again(
    tmp_path: Path,
    client: Client,
    pool: asyncpg.Pool,
    task_queue: str,
    schedule_id: str,
    worker: Worker,
    cli_env: dict[str, str],
) -> None:
    # A live fire still running has no outbox record, so the plan lists its key; its replay
    # waits for the lease behind it, and finds the key done with the schedule's args.
    gate = tmp_path / "gate"
    schedule_args = {"label": "schedule", "gate": str(gate)}
    defn = definition(schedule_id, job="records-args", every="2s", args=schedule_args)
    handle = await _applied(client, pool, task_queue, defn)
    try:
        created_at = (await handle.describe()).info.created_at

        async def running() -> str | None:
            actions = (await handle.describe()).info.running_actions
            return actions[0].workflow_id if actions else None  # type: ignore[attr-defined]

        live_id = await wait_for(running, timeout=30, what="a live fire running")
        assert live_id is not None
        held = scheduled_fire_time(schedule_id, live_id)
        assert held is not None
        held_key = logical_key(schedule_id, held)
        args_file = tmp_path / "args.json"
        args_file.write_text('{"label": "file"}')
        backfill = asyncio.create_task(
            cli(
                cli_env,
                "backfill",
                "run",
                schedule_id,
                "--start",
                iso(created_at - timedelta(minutes=1)),
                "--end",
                "now",
                "--args-file",
                str(args_file),
                "--json",
                timeout=120,
            )
        )

        async def replay_started() -> bool:
            try:
                await client.get_workflow_handle(replay_workflow_id(schedule_id, held)).describe()
            except RPCError:
                return backfill.done()
            return True

        await wait_for(replay_started, timeout=60, what="the held key's replay to start")
        assert not backfill.done(), backfill.result()
        gate.touch()
        result = await backfill
        assert result.code == 1, result
        report = json.loads(result.stdout)
        assert {
            "logical_key": held_key,
            "workflow_id": replay_workflow_id(schedule_id, held),
            "detail": CONFLICT_NOTE,
        } in report["args_conflicts"], report
        assert report["summary"][ALREADY_DONE] >= len(report["args_conflicts"]) >= 1
        # The key ran once, with the schedule's args, and the outbox keeps their digest.
        rows = await _args_rows(pool, schedule_id)
        assert rows[held_key] == [schedule_args | {"count": 0}]
        assert await _outbox_digest(pool, held_key) == defn.args_digest()
    finally:
        await handle.delete()


async def test_a_worker_logs_the_args_a_triggered_run_used_with_its_key(
    client: Client,
    pool: asyncpg.Pool,
    task_queue: str,
    schedule_id: str,
    cli_env: dict[str, str],
) -> None:
    proc = start_worker_process(cli_env, graceful=10)
    # Read all along, so the pipe never fills; the whole output once the worker has stopped.
    output = asyncio.create_task(asyncio.to_thread(proc.communicate))
    handle = await _applied(client, pool, task_queue, _yearly(schedule_id))
    try:
        given = {"label": "logged", "count": 2}
        result = await cli(
            cli_env, "schedules", "trigger", schedule_id, "--args", json.dumps(given)
        )
        assert result.code == 0, result
        found = re.search(r"logical key (\S+), args digest (\w+)", result.stdout)
        assert found is not None, result.stdout
        key = found[1]
        assert found[2] == args_digest(given)
        await wait_for(lambda: _outbox_digest(pool, key), timeout=30, what="the run's commit")
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            stdout, _ = await asyncio.wait_for(output, timeout=40)
        finally:
            if proc.poll() is None:
                proc.kill()
        await handle.delete()
    events = [json.loads(line) for line in stdout.decode().splitlines() if line.startswith("{")]
    started = [e for e in events if e["event"] == "run.started" and e["logical_key"] == key]
    assert [(e["args"], e["args_digest"]) for e in started] == [(given, args_digest(given))]
