"""Backfill and audit against real schedules: an outage leaves fires without an outbox record,
`backfill plan` lists exactly those, `backfill run` replays them once, and nothing replays twice."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import tempfile
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import asyncpg
import pytest
import pytest_asyncio
from temporalio.client import (
    Client,
    Schedule,
    ScheduleActionExecutionStartWorkflow,
    ScheduleActionStartWorkflow,
    ScheduleHandle,
    ScheduleIntervalSpec,
    ScheduleSpec,
    WorkflowExecutionStatus,
    WorkflowHandle,
)
from temporalio.service import RPCError, RPCStatusCode
from temporalio.worker import Worker

from cronwarden.activities.contract import (
    ALREADY_DONE,
    OVERLAP_LOCKED,
    format_fire_time,
    logical_key,
)
from cronwarden.backfill import audit as audit_module
from cronwarden.backfill.audit import audit
from cronwarden.backfill.plan import ManagedSchedule, load_managed, plan
from cronwarden.backfill.replay import REPLAYED, _start_or_attach, replay_all, replay_one
from cronwarden.backfill.window import Window
from cronwarden.cli.backfill import CONFIRM_ABOVE
from cronwarden.embedded import EmbeddedPostgres, EmbeddedTemporal, free_port
from cronwarden.schedules.apply import apply_definitions
from cronwarden.schedules.mapping import MANAGED_MEMO, to_temporal
from cronwarden.schedules.run_ids import REPLAY_INFIX, replay_workflow_id
from cronwarden.store import locks
from cronwarden.store.pool import create_pool
from tests.support.cli import cli, cli_json, cronwarden_argv, iso
from tests.support.database import fetch
from tests.support.faults.worker_process import SKEWED_CLOCK
from tests.support.paths import REPO_ROOT
from tests.support.runs import effects, queued_at
from tests.support.schedules import definition, every_two_seconds
from tests.support.servers import in_process_worker
from tests.support.waiting import clock_past, wait_for

pytestmark = pytest.mark.integration


async def committed(pool: asyncpg.Pool, schedule_id: str) -> dict[datetime, str]:
    rows = await fetch(
        pool,
        "SELECT fire_time, logical_key FROM cronwarden.outbox WHERE schedule_id = $1",
        schedule_id,
    )
    return {r["fire_time"]: r["logical_key"] for r in rows}


async def effects_per_key(pool: asyncpg.Pool, schedule_id: str) -> dict[str, int]:
    rows = await fetch(
        pool,
        "SELECT logical_key, count(*) AS n FROM test_effects WHERE logical_key LIKE $1 GROUP BY 1",
        f"{schedule_id}@%",
    )
    return {r["logical_key"]: r["n"] for r in rows}


async def test_an_outage_is_planned_exactly_replayed_once_and_then_plans_empty(
    client: Client,
    pool: asyncpg.Pool,
    task_queue: str,
    schedule_id: str,
    cli_env: dict[str, str],
) -> None:
    defn = definition(schedule_id, every="2s", catchup_window="10s", overlap="skip")
    await apply_definitions(client, pool, [defn], task_queue=task_queue)
    handle = client.get_schedule_handle(schedule_id)
    try:
        created_at = (await handle.describe()).info.created_at
        # The outage: no worker at all for longer than the catchup window. The first fire's run
        # waits for a worker; every fire after it is dropped by Temporal (skip overlap).
        await wait_for(
            lambda: clock_past(created_at + timedelta(seconds=14)), timeout=20, what="outage"
        )
        async with in_process_worker(client, pool, task_queue):
            recovered_at = datetime.now(UTC)
            await wait_for(
                lambda: _committed_after(pool, schedule_id, recovered_at),
                timeout=30,
                what="fires after the outage",
            )
            await handle.pause(note="test: freeze the window")
            end = max(await committed(pool, schedule_id))
            await _check_outage_is_replayed(
                client, pool, handle, cli_env, schedule_id, created_at, end
            )
    finally:
        await handle.delete()


async def test_fires_dropped_beyond_the_catchup_window_are_planned_and_replayed_once(
    tmp_path: Path,
    pool: asyncpg.Pool,
    task_queue: str,
    schedule_id: str,
    cli_env: dict[str, str],
) -> None:
    # The whole of Temporal goes down (a private server, restarted on its own database): when
    # it comes back, fires older than the 10 s catchup window are dropped and only counted.
    server = EmbeddedTemporal(
        port=free_port(), ui_port=None, db_file=tmp_path / "t.db", log_file=tmp_path / "t.log"
    )
    await asyncio.to_thread(server.start)
    try:
        client = await Client.connect(server.address)
        defn = definition(schedule_id, every="2s", catchup_window="10s", overlap="skip")
        async with in_process_worker(client, pool, task_queue):
            await apply_definitions(client, pool, [defn], task_queue=task_queue)
            await wait_for(
                lambda: _committed_after(pool, schedule_id, None), timeout=30, what="2 fires"
            )
        await asyncio.to_thread(server.stop)
        down_at = datetime.now(UTC)
        await wait_for(
            lambda: clock_past(down_at + timedelta(seconds=16)), timeout=25, what="the outage"
        )
        await asyncio.to_thread(server.start)
        client = await Client.connect(server.address)
        handle = client.get_schedule_handle(schedule_id)
        async with in_process_worker(client, pool, task_queue):
            up_at = datetime.now(UTC)
            await wait_for(
                lambda: _committed_after(pool, schedule_id, up_at), timeout=30, what="recovery"
            )
            await handle.pause(note="test: freeze the window")
            description = await handle.describe()
            end = max(await committed(pool, schedule_id))
            env = cli_env | {"CRONWARDEN_TEMPORAL_ADDRESS": server.address}
            await _check_outage_is_replayed(
                client, pool, handle, env, schedule_id, description.info.created_at, end
            )
        assert description.info.num_actions_missed_catchup_window >= 3
    finally:
        await asyncio.to_thread(server.stop)


async def _committed_after(pool: asyncpg.Pool, schedule_id: str, moment: datetime | None) -> bool:
    """At least two fires committed (after `moment`, when given)."""
    times = await committed(pool, schedule_id)
    return sum(moment is None or t > moment for t in times) >= 2


async def _check_outage_is_replayed(
    client: Client,
    pool: asyncpg.Pool,
    handle: ScheduleHandle,
    env: dict[str, str],
    schedule_id: str,
    created_at: datetime,
    end: datetime,
) -> None:
    window = ["--start", iso(created_at - timedelta(minutes=1)), "--end", iso(end)]
    done_before = await committed(pool, schedule_id)
    expected = every_two_seconds(created_at, end)
    missing = sorted(expected - set(done_before))
    assert len(missing) >= 4, "the outage should have dropped several fires"

    before = await cli_json(env, "backfill", "plan", schedule_id, *window)
    assert before["expected"] == len(expected)
    assert before["done"] == len(expected) - len(missing)
    assert before["missing_keys"] == [logical_key(schedule_id, t) for t in missing]
    # The window asked for starts before the schedule existed: it is clamped to its creation.
    assert before["window"]["start"] == iso(created_at + timedelta(seconds=1))

    audited = await cli_json(env, "audit", schedule_id, "--since", iso(created_at))
    assert audited["missing_keys"][: len(missing)] == before["missing_keys"]
    # Temporal counted every fire it dropped (its counters are the schedule's lifetime totals).
    counters = audited["temporal"]
    assert counters["skipped_overlap_total"] + counters["missed_catchup_window_total"] >= len(
        missing
    )
    assert audited["temporal"]["paused"] is True

    # The schedule was paused to freeze the window: replaying it anyway takes the flag.
    replay = await cli_json(
        env, "backfill", "run", schedule_id, *window, "--yes", "--include-paused"
    )
    assert replay["summary"] == {
        REPLAYED: len(missing),
        ALREADY_DONE: 0,
        OVERLAP_LOCKED: 0,
        "failed": 0,
    }

    after = await cli_json(env, "backfill", "plan", schedule_id, *window)
    assert (after["expected"], after["done"], after["missing"]) == (len(expected), len(expected), 0)
    again = await cli_json(env, "backfill", "run", schedule_id, *window, "--include-paused")
    assert again["missing"] == 0
    assert again["summary"][REPLAYED] == 0

    counts = await effects_per_key(pool, schedule_id)
    for fire_time in expected:
        assert counts.get(logical_key(schedule_id, fire_time)) == 1, fire_time
    rows = await fetch(
        pool,
        "SELECT fire_time, workflow_id FROM cronwarden.outbox WHERE schedule_id = $1",
        schedule_id,
    )
    replayed_ids = {r["workflow_id"] for r in rows if r["fire_time"] in set(missing)}
    assert replayed_ids == {replay_workflow_id(schedule_id, t) for t in missing}


@dataclass(frozen=True)
class Premade:
    schedule_id: str
    task_queue: str
    database: str
    window: Window


@pytest_asyncio.fixture(scope="module", loop_scope="session", autouse=True)
async def premade(
    request: pytest.FixtureRequest,
    client: Client,
    postgres_server: EmbeddedPostgres,
    template_db: str,
) -> AsyncIterator[dict[str, Premade]]:
    """The schedule (and the private database) of every test of this module that asks for
    `missed`, applied and paused when the module starts: by the time each test runs its window
    has passed, so no test waits out its own seconds of missed fires. Keyed by node id."""
    made: dict[str, Premade] = {}
    try:
        for item in request.session.items:
            if not isinstance(item, pytest.Function) or item.module is not request.module:
                continue
            if "missed" not in item.fixturenames:
                continue
            callspec = getattr(item, "callspec", None)
            fields: dict[str, Any] = dict(callspec.params.get("missed", {}) if callspec else {})
            seconds = fields.pop("window_seconds", 7)
            schedule_id, task_queue = f"s-{uuid.uuid4().hex[:12]}", f"tq-{uuid.uuid4().hex}"
            database = f"t_{uuid.uuid4().hex[:16]}"
            postgres_server.create_database(database, template=template_db, exists_ok=False)
            dsn = postgres_server.dsn(database)
            defn = definition(schedule_id, every="1s", **fields)
            pool = await create_pool(dsn, max_size=2)
            try:
                await apply_definitions(client, pool, [defn], task_queue=task_queue)
            finally:
                await pool.close()
            handle = client.get_schedule_handle(schedule_id)
            await handle.pause(note="test")
            description = await handle.describe()
            # A fire started between the create and the pause would run once the test's worker
            # polls this queue, and commit a key of the window: none may be done.
            for action in description.info.running_actions:
                if isinstance(action, ScheduleActionExecutionStartWorkflow):
                    await client.get_workflow_handle(action.workflow_id).terminate()
            created_at = description.info.created_at
            window = Window(
                created_at.replace(microsecond=0),
                (created_at + timedelta(seconds=seconds)).replace(microsecond=0),
            )
            made[item.nodeid] = Premade(schedule_id, task_queue, dsn, window)
        yield made
    finally:
        for one in made.values():
            with contextlib.suppress(RPCError):
                await client.get_schedule_handle(one.schedule_id).delete()


@pytest.fixture
def database(
    request: pytest.FixtureRequest,
    premade: dict[str, Premade],
    postgres_server: EmbeddedPostgres,
    template_db: str,
) -> str:
    made = premade.get(request.node.nodeid)
    if made:
        return made.database
    name = f"t_{uuid.uuid4().hex[:16]}"
    postgres_server.create_database(name, template=template_db, exists_ok=False)
    return postgres_server.dsn(name)


@pytest.fixture
def schedule_id(request: pytest.FixtureRequest, premade: dict[str, Premade]) -> str:
    made = premade.get(request.node.nodeid)
    return made.schedule_id if made else f"s-{uuid.uuid4().hex[:12]}"


@pytest.fixture
def task_queue(request: pytest.FixtureRequest, premade: dict[str, Premade]) -> str:
    made = premade.get(request.node.nodeid)
    return made.task_queue if made else f"tq-{uuid.uuid4().hex}"


@pytest_asyncio.fixture(loop_scope="session")
async def missed(
    request: pytest.FixtureRequest, premade: dict[str, Premade], worker: Worker
) -> Window:
    """A schedule paused at once, with a worker running: every fire time of the window this
    returns (at least six) has no outbox record. Parametrize it (indirect) with more fields of
    the schedule's definition, and `window_seconds` for a longer window than 7 s. The schedule
    was made by `premade` when the module started."""
    window = premade[request.node.nodeid].window
    await wait_for(lambda: clock_past(window.end), timeout=60, what="the window to pass")
    return window


@pytest_asyncio.fixture(scope="module", loop_scope="session", autouse=True)
async def aged_schedule(client: Client) -> AsyncIterator[tuple[str, datetime]]:
    """A managed `every: 1s` schedule, paused from its creation when this module starts, that no
    worker polls: every fire time since then is missed. A test that needs more than a hundred
    missed keys finds them already aged by the module's other tests, instead of waiting them out.
    """
    schedule_id = f"aged-{uuid.uuid4().hex[:8]}"
    schedule = to_temporal(definition(schedule_id, every="1s"), task_queue=f"tq-{schedule_id}")
    paused = replace(schedule, state=replace(schedule.state, paused=True, note="test: aged"))
    handle = await client.create_schedule(
        schedule_id, paused, memo={MANAGED_MEMO: {"managed": True}}
    )
    try:
        yield schedule_id, (await handle.describe()).info.created_at
    finally:
        await handle.delete()


async def test_running_backfill_twice_at_once_applies_each_key_once(
    client: Client, pool: asyncpg.Pool, schedule_id: str, cli_env: dict[str, str], missed: Window
) -> None:
    window = missed
    args = ["--start", iso(window.start), "--end", iso(window.end), "--concurrency", "3"]
    args.append("--include-paused")
    first, second = await asyncio.gather(
        cli_json(cli_env, "backfill", "run", schedule_id, *args),
        cli_json(cli_env, "backfill", "run", schedule_id, *args),
    )
    schedule = await load_managed(client, schedule_id)
    keys = sorted(await committed(pool, schedule_id))
    # Replaying the same keys once more, sequentially: every one is already done.
    later = await replay_all(client, schedule, keys, concurrency=2, lock_wait=10)

    rows = await fetch(
        pool,
        "SELECT logical_key FROM cronwarden.outbox WHERE schedule_id = $1 AND workflow_id LIKE $2",
        schedule_id,
        f"{schedule_id}{REPLAY_INFIX}%",
    )
    assert len(rows) >= 6
    for report in (first, second):
        assert report["summary"]["failed"] == report["summary"][OVERLAP_LOCKED] == 0
    # Each key was run by exactly one of the two commands; the other saw it done.
    assert first["summary"][REPLAYED] + second["summary"][REPLAYED] == len(rows)
    assert later.counts[ALREADY_DONE] == len(keys)
    assert later.counts[REPLAYED] == 0
    counts = await effects_per_key(pool, schedule_id)
    assert sorted(counts.values()) == [1] * len(keys)


async def test_a_lease_held_past_lock_wait_leaves_keys_overlap_locked_and_exits_1(
    client: Client, pool: asyncpg.Pool, schedule_id: str, cli_env: dict[str, str], missed: Window
) -> None:
    args = ["--start", iso(missed.start), "--end", iso(missed.end), "--include-paused"]
    lease = f"schedule:{schedule_id}"
    async with pool.acquire() as conn:
        # Another holder (a live run of a long job, say) keeps the schedule's lease throughout.
        held = await locks.acquire(
            conn, name=lease, holder="test", ttl_seconds=300, logical_key=f"{schedule_id}@held"
        )
    assert held.token is not None

    stuck = await cli(cli_env, "backfill", "run", schedule_id, *args, "--lock-wait", "1s")
    assert stuck.code == 1, stuck.stderr
    assert "overlap-locked" in stuck.stdout and "(exit 1)" in stuck.stdout
    report = await cli(
        cli_env, "backfill", "run", schedule_id, *args, "--lock-wait", "1s", "--json"
    )
    assert report.code == 1, report.stderr
    summary = json.loads(report.stdout)
    assert summary["missing"] >= 6
    assert summary["summary"] == {
        REPLAYED: 0,
        ALREADY_DONE: 0,
        OVERLAP_LOCKED: summary["missing"],
        "failed": 0,
    }
    assert await committed(pool, schedule_id) == {}

    # With a longer --lock-wait the replays wait in the lease's queue while it is held, and
    # are replayed once the holder lets go.
    retrying = asyncio.create_task(
        cli_json(cli_env, "backfill", "run", schedule_id, *args, "--lock-wait", "60s")
    )

    try:
        await wait_for(
            lambda: queued_at(pool, lease), timeout=30, what="replays waiting for the lease"
        )
    finally:
        async with pool.acquire() as conn:
            await locks.release(conn, name=lease, token=held.token)
    retried = await retrying
    assert retried["summary"] == {
        REPLAYED: summary["missing"],
        ALREADY_DONE: 0,
        OVERLAP_LOCKED: 0,
        "failed": 0,
    }
    assert len(await committed(pool, schedule_id)) == summary["missing"]


# The gate the `gated` job waits for: the test decides when a replay finishes.
GATE = Path(tempfile.gettempdir()) / f"cronwarden-test-gate-{uuid.uuid4().hex}"


@pytest.mark.parametrize("missed", [{"job": "gated", "args": {"gate": str(GATE)}}], indirect=True)
async def test_a_replay_still_running_is_audited_as_running_and_a_second_replay_attaches_to_it(
    client: Client, pool: asyncpg.Pool, schedule_id: str, cli_env: dict[str, str], missed: Window
) -> None:
    schedule = await load_managed(client, schedule_id)
    first = next((await plan(client, pool, schedule, missed)).missing_times())
    key = logical_key(schedule_id, first)
    workflow_id = replay_workflow_id(schedule_id, first)
    inp = replace(schedule.run_input, fire_time=format_fire_time(first))
    try:
        running, attached = await _start_or_attach(client, schedule, inp, workflow_id)
        assert not attached

        async def audited_running() -> Any:
            data = await cli_json(cli_env, "audit", schedule_id, "--since", iso(missed.start))
            return data if data["in_flight"] else None

        audited = await wait_for(audited_running, timeout=30, what="audit to list the replay")
        # The same key again while its replay runs: the start is refused (same workflow id) and
        # the second replay waits for the first one's result instead of failing.
        again, attached = await _start_or_attach(client, schedule, inp, workflow_id)
        assert attached
        assert again.id == running.id
        second = asyncio.create_task(replay_one(client, schedule, first, lock_wait=10))
        await wait_for(lambda: _still_running(running), timeout=5, what="the replay to be running")
    finally:
        GATE.touch()
    try:
        outcome = await running.result()
        attached_result = await second
    finally:
        GATE.unlink()

    assert audited["in_flight_keys"] == [key]
    assert key not in audited["missing_keys"]
    assert audited["missing"] == audited["expected"] - 1
    assert outcome.outcome == "ran"
    assert attached_result.outcome == ALREADY_DONE
    assert attached_result.detail == "replayed by a concurrent run"
    assert await effects(pool, key) == 1


async def _still_running(handle: WorkflowHandle[Any, Any]) -> bool:
    return (await handle.describe()).status == WorkflowExecutionStatus.RUNNING


async def test_a_manual_trigger_off_the_spec_is_audited_as_committed_off_spec(
    client: Client, pool: asyncpg.Pool, task_queue: str, worker: Worker, schedule_id: str
) -> None:
    # Hourly: within the few seconds of this test the spec produces (almost surely) no fire, so
    # the one commit is the trigger's, at a time the spec does not produce.
    await apply_definitions(
        client, pool, [definition(schedule_id, every="1h")], task_queue=task_queue
    )
    handle = client.get_schedule_handle(schedule_id)
    try:
        created_at = (await handle.describe()).info.created_at
        # Audit's window starts the second after the creation: trigger later than that.
        await wait_for(
            lambda: clock_past(created_at + timedelta(seconds=2)), timeout=5, what="a second"
        )
        await handle.trigger()
        await wait_for(lambda: committed(pool, schedule_id), timeout=30, what="the trigger")
        schedule = await load_managed(client, schedule_id)
        end = datetime.now(UTC).replace(microsecond=0)
        result = await audit(client, pool, schedule, Window(created_at, end))
    finally:
        await handle.delete()
    assert result.committed_off_spec == 1
    assert result.committed == 0


async def test_a_fire_committing_while_the_audit_reads_is_not_counted_off_spec(
    client: Client,
    pool: asyncpg.Pool,
    schedule_id: str,
    missed: Window,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    schedule = await load_managed(client, schedule_id)
    first = next((await plan(client, pool, schedule, missed)).missing_times())
    list_running = audit_module.running_fire_times

    async def commit_meanwhile(client: Client, schedule: ManagedSchedule) -> set[datetime]:
        # A fire of the spec commits after the plan's pages were read and before the window's
        # outbox records are counted: the race a live schedule runs into on every audit.
        async with pool.acquire() as conn:
            await conn.execute(
                "INSERT INTO cronwarden.outbox (logical_key, schedule_id, fire_time, attempt, "
                "fencing_token, worker, args_digest) VALUES ($1, $2, $3, 1, 1, 'test', 'x')",
                logical_key(schedule_id, first),
                schedule_id,
                first,
            )
        return await list_running(client, schedule)

    monkeypatch.setattr(audit_module, "running_fire_times", commit_meanwhile)
    result = await audit(client, pool, schedule, missed)
    assert result.committed_off_spec == 0
    assert first in result.missing
    assert len(await committed(pool, schedule_id)) == 1


OTHER_GATE = Path(tempfile.gettempdir()) / f"cronwarden-test-gate-{uuid.uuid4().hex}"


async def test_a_run_of_a_schedule_whose_id_extends_this_one_is_not_audited_as_its_replay(
    client: Client,
    pool: asyncpg.Pool,
    task_queue: str,
    schedule_id: str,
    cli_env: dict[str, str],
    missed: Window,
) -> None:
    # Schedule `X-replay` names its scheduled runs `X-replay-<time>`: exactly the id a replay
    # of schedule X at that time would have. One of its runs is kept running.
    other = f"{schedule_id}-replay"
    defn = definition(other, every="1s", job="gated", args={"gate": str(OTHER_GATE)})
    await apply_definitions(client, pool, [defn], task_queue=task_queue)
    running = (
        f"WorkflowType = 'ScheduledRunWorkflow' AND ExecutionStatus = 'Running' "
        f"AND TemporalScheduledById = '{other}'"
    )

    async def other_running() -> list[str]:
        return [e.id async for e in client.list_workflows(running)]

    try:
        ids = await wait_for(other_running, timeout=30, what="a run of the other schedule")
        assert all(i.startswith(f"{schedule_id}-replay-") for i in ids)
        audited = await cli_json(cli_env, "audit", schedule_id, "--since", iso(missed.start))
    finally:
        await client.get_schedule_handle(other).delete()
        OTHER_GATE.touch()
    try:
        await wait_for(lambda: _none(other_running), timeout=30, what="the other runs to end")
    finally:
        OTHER_GATE.unlink()
    assert audited["in_flight"] == 0
    assert audited["missing"] == audited["expected"] >= 6


async def _none(listing: Callable[[], Awaitable[list[str]]]) -> bool:
    return not await listing()


async def test_a_replay_racing_the_live_run_of_its_key_applies_once(
    client: Client,
    pool: asyncpg.Pool,
    task_queue: str,
    worker: Worker,
    schedule_id: str,
    tmp_path: Path,
) -> None:
    # The live run waits at a gate while it holds the schedule's lease; the gate opens only
    # once the replay of the same key is queued behind it, so the race happens every time.
    gate = tmp_path / "gate"
    defn = definition(schedule_id, every="10s", job="gated", args={"gate": str(gate)})
    await apply_definitions(client, pool, [defn], task_queue=task_queue)
    handle = client.get_schedule_handle(schedule_id)
    lease = f"schedule:{schedule_id}"
    try:

        async def live_key() -> str | None:
            rows = await fetch(
                pool,
                "SELECT logical_key FROM cronwarden.locks WHERE name = $1 AND holder IS NOT NULL",
                lease,
            )
            return rows[0]["logical_key"] if rows else None

        held = await wait_for(live_key, timeout=30, what="a live run holding the lease")
        assert held is not None
        key = held
        fire_time = datetime.strptime(key.split("@")[1], "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
        schedule = await load_managed(client, schedule_id)
        replay = asyncio.create_task(replay_one(client, schedule, fire_time, lock_wait=30))
        try:
            await wait_for(
                lambda: queued_at(pool, lease), timeout=30, what="the replay waiting for the lease"
            )
        except BaseException:
            replay.cancel()
            raise
        finally:
            gate.touch()
        result = await replay
        await wait_for(lambda: _done(pool, key), timeout=30, what="the live run to commit")
    finally:
        await handle.delete()
    assert result.outcome == ALREADY_DONE
    assert await effects(pool, key) == 1


async def _done(pool: asyncpg.Pool, key: str) -> bool:
    rows = await fetch(pool, "SELECT 1 FROM cronwarden.outbox WHERE logical_key = $1", key)
    return bool(rows)


async def test_a_dry_run_starts_nothing(
    client: Client, pool: asyncpg.Pool, schedule_id: str, cli_env: dict[str, str], missed: Window
) -> None:
    window = missed
    schedule = await load_managed(client, schedule_id)
    planned = await plan(client, pool, schedule, window)
    report = await cli_json(
        cli_env,
        "backfill",
        "run",
        schedule_id,
        "--start",
        iso(window.start),
        "--end",
        iso(window.end),
        "--dry-run",
        "--include-paused",
    )
    assert report["dry_run"] is True
    assert report["missing_keys"] == planned.missing_keys()
    assert len(report["workflow_ids"]) == len(planned.missing) >= 3
    for workflow_id in report["workflow_ids"]:
        with pytest.raises(RPCError) as exc_info:
            await client.get_workflow_handle(workflow_id).describe()
        assert exc_info.value.status == RPCStatusCode.NOT_FOUND
    assert await committed(pool, schedule_id) == {}


@pytest.mark.parametrize(
    "missed", [{"args": {"fail_attempts": 99}, "max_attempts": 1}], indirect=True
)
async def test_a_run_whose_replays_fail_reports_each_and_exits_1(
    pool: asyncpg.Pool, schedule_id: str, cli_env: dict[str, str], missed: Window
) -> None:
    result = await cli(
        cli_env,
        "backfill",
        "run",
        schedule_id,
        "--start",
        iso(missed.start),
        "--end",
        iso(missed.end),
        "--include-paused",
        "--json",
    )
    assert result.code == 1, result.stderr
    report = json.loads(result.stdout)
    assert report["missing"] >= 6
    assert report["summary"]["failed"] == report["missing"]
    assert all("probe failing on purpose" in f["error"] for f in report["failed"])
    assert await committed(pool, schedule_id) == {}


@pytest.mark.parametrize(
    ("start", "end", "message"),
    [
        ("-1h", "2999-01-01T00:00:00Z", "the window ends in the future"),
        ("-1h", "-2h", "the window is empty"),
        ("now", "now", "the window is empty"),
        ("yesterday", "now", "--start 'yesterday' is not a time"),
        ("2026-01-01T00:00:00", "now", "has no time zone"),
        ("-1000000d", "now", "--start '-1000000d' is out of range"),
        ("0001-01-01T00:00:00+01:00", "now", "is out of range"),
    ],
)
async def test_a_bad_window_exits_2_naming_the_problem(
    cli_env: dict[str, str], start: str, end: str, message: str
) -> None:
    for command in ("plan", "run"):
        result = await cli(
            cli_env, "backfill", command, "any-schedule", "--start", start, "--end", end
        )
        assert result.code == 2, result
        assert result.stderr.startswith("error: ")
        assert message in result.stderr


async def test_a_since_too_long_ago_exits_2_without_a_traceback(cli_env: dict[str, str]) -> None:
    result = await cli(cli_env, "audit", "any-schedule", "--since", "100000000d")
    assert result.code == 2, result
    assert result.stderr.startswith("error: --since '100000000d' is out of range")
    assert "Traceback" not in result.stderr


async def test_an_unknown_or_foreign_schedule_is_refused(
    client: Client, cli_env: dict[str, str], schedule_id: str
) -> None:
    unknown = await cli(cli_env, "backfill", "plan", schedule_id, "--start", "-1h", "--end", "now")
    assert unknown.code == 1
    assert f"no schedule '{schedule_id}'" in unknown.stderr
    audited = await cli(cli_env, "audit", schedule_id)
    assert audited.code == 1

    foreign = await client.create_schedule(
        schedule_id,
        Schedule(
            action=ScheduleActionStartWorkflow("Other", id="x", task_queue="elsewhere"),
            spec=ScheduleSpec(intervals=[ScheduleIntervalSpec(every=timedelta(hours=1))]),
        ),
    )
    try:
        result = await cli(
            cli_env, "backfill", "run", schedule_id, "--start", "-1h", "--end", "now"
        )
    finally:
        await foreign.delete()
    assert result.code == 1
    assert "was not created by cronwarden" in result.stderr


async def test_more_than_a_hundred_keys_without_yes_and_without_a_terminal_start_nothing(
    client: Client,
    pool: asyncpg.Pool,
    cli_env: dict[str, str],
    aged_schedule: tuple[str, datetime],
) -> None:
    schedule_id, created_at = aged_schedule
    end = created_at + timedelta(seconds=CONFIRM_ABOVE + 2)
    # Usually past already: the schedule has aged while the module's other tests ran.
    await wait_for(lambda: clock_past(end), timeout=CONFIRM_ABOVE + 15, what="the aged window")
    missed = Window(created_at.replace(microsecond=0), end.replace(microsecond=0))
    schedule = await load_managed(client, schedule_id)
    planned = await plan(client, pool, schedule, missed)
    assert len(planned.missing) > CONFIRM_ABOVE
    proc = await asyncio.create_subprocess_exec(
        *cronwarden_argv(
            "backfill",
            "run",
            schedule_id,
            "--start",
            iso(missed.start),
            "--end",
            iso(missed.end),
            "--include-paused",
        ),
        env=cli_env,
        cwd=REPO_ROOT,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    _, stderr = await asyncio.wait_for(proc.communicate(), timeout=60)
    assert proc.returncode == 2, stderr
    assert "pass --yes" in stderr.decode()
    for fire_time in (
        next(planned.missing_times()),
        datetime.fromtimestamp(planned.missing[-1], UTC),
    ):
        with pytest.raises(RPCError) as exc_info:
            await client.get_workflow_handle(replay_workflow_id(schedule_id, fire_time)).describe()
        assert exc_info.value.status == RPCStatusCode.NOT_FOUND
    assert await committed(pool, schedule_id) == {}


async def test_a_window_past_the_schedules_next_fire_is_capped_by_temporal_not_the_host_clock(
    client: Client,
    pool: asyncpg.Pool,
    task_queue: str,
    worker: Worker,
    schedule_id: str,
    cli_env: dict[str, str],
) -> None:
    # The CLI's host clock runs a minute ahead: its `now` is a minute into the schedule's future,
    # and the host's own "not in the future" check lets such an end through.
    skewed = cli_env | {
        "PYTHONPATH": os.pathsep.join([str(SKEWED_CLOCK), cli_env["PYTHONPATH"]]),
        "CRONWARDEN_TEST_CLOCK_SKEW_SECONDS": "60",
    }
    await apply_definitions(
        client, pool, [definition(schedule_id, every="2s")], task_queue=task_queue
    )
    handle = client.get_schedule_handle(schedule_id)
    try:
        described = await handle.describe()
        window = ["--start", iso(described.info.created_at), "--end", "now"]
        before = min(described.info.next_action_times)
        report = await cli_json(skewed, "backfill", "run", schedule_id, *window, "--yes")
        printed = await cli(skewed, "backfill", "plan", schedule_id, *window)
        after = min((await handle.describe()).info.next_action_times)
        rows = await fetch(
            pool,
            "SELECT fire_time, workflow_id, committed_at FROM cronwarden.outbox "
            "WHERE schedule_id = $1",
            schedule_id,
        )
    finally:
        await handle.delete()

    replayed = [r["fire_time"] for r in rows if REPLAY_INFIX in r["workflow_id"]]
    # Nothing the scheduler had not reached yet was replayed, so no key committed before its
    # nominal time (Postgres' clock, on the servers' side).
    assert all(t < after for t in replayed), (replayed, after)
    assert all(r["committed_at"] >= r["fire_time"] for r in rows), rows
    cap = datetime.fromisoformat(report["cap"]["end"])
    temporal_now = datetime.fromisoformat(report["cap"]["temporal_now"])
    next_action = datetime.fromisoformat(report["cap"]["next_action_time"])
    assert report["window"]["end"] == report["cap"]["end"]
    # The schedule's next action time and Temporal's clock, read while the command ran; the
    # clock had passed the fire before `before` when the test described the schedule.
    assert before <= next_action <= after
    assert cap == min(temporal_now.replace(microsecond=0), next_action - timedelta(seconds=1))
    assert before - timedelta(seconds=2) <= cap < after
    assert all(t <= cap for t in replayed)
    assert report["summary"]["failed"] == report["summary"][OVERLAP_LOCKED] == 0
    assert printed.code == 0, printed.stderr
    # The plan, run a moment later, printed its own cap, under the window it ends.
    line = re.search(
        r"window \S+ \.\. (\S+)\n(?:.*\n)?  \(capped at (\S+): Temporal's clock reads \S+, "
        r"the schedule's next fire is (\S+); no later fire is due yet\)\n",
        printed.stdout,
    )
    assert line is not None, printed.stdout
    assert line[1] == line[2]
    assert cap <= datetime.fromisoformat(line[2]) < datetime.fromisoformat(line[3]) <= after


async def test_a_paused_schedule_is_refused_unless_include_paused_is_given(
    client: Client, pool: asyncpg.Pool, schedule_id: str, cli_env: dict[str, str], missed: Window
) -> None:
    handle = client.get_schedule_handle(schedule_id)
    await handle.pause(note="paused for a ledger migration")
    args = ["backfill", "run", schedule_id, "--start", iso(missed.start), "--end", iso(missed.end)]
    schedule = await load_managed(client, schedule_id)
    planned = await plan(client, pool, schedule, missed)
    assert len(planned.missing) >= 6

    for extra in ([], ["--json"], ["--dry-run"], ["--yes"]):
        refused = await cli(cli_env, *args, *extra)
        assert refused.code == 2, refused
        assert refused.stderr.startswith(
            f"error: schedule '{schedule_id}' is paused (\"paused for a ledger migration\"): "
            "nothing replayed"
        ), refused.stderr
        assert "--include-paused" in refused.stderr
        assert refused.stdout == ""
    for fire_time in planned.missing_times():
        with pytest.raises(RPCError) as exc_info:
            await client.get_workflow_handle(replay_workflow_id(schedule_id, fire_time)).describe()
        assert exc_info.value.status == RPCStatusCode.NOT_FOUND
    assert await committed(pool, schedule_id) == {}

    report = await cli_json(cli_env, *args, "--include-paused")
    assert report["summary"] == {
        REPLAYED: len(planned.missing),
        ALREADY_DONE: 0,
        OVERLAP_LOCKED: 0,
        "failed": 0,
    }
    assert sorted(await committed(pool, schedule_id)) == list(planned.missing_times())
    # Still paused: the flag replays past fires, it does not unpause the schedule.
    assert (await handle.describe()).schedule.state.paused
