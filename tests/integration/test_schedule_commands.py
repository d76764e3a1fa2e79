"""`cronwarden schedules …` as operators and scripts use it, against real Temporal and Postgres:
apply's diff and --prune, the duplicate and orphan guards, list, describe, pause, unpause,
trigger and delete."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import asyncpg
import pytest
import pytest_asyncio
from temporalio import workflow
from temporalio.api.common.v1 import Payload
from temporalio.client import (
    Client,
    ScheduleActionExecutionStartWorkflow,
    ScheduleHandle,
)
from temporalio.service import RPCError, RPCStatusCode
from temporalio.worker import UnsandboxedWorkflowRunner, Worker

from cronwarden.activities.jobs import REGISTRY, JobRegistry
from cronwarden.schedules import operations
from cronwarden.schedules.apply import apply_definitions, describe_or_none, send_update
from cronwarden.schedules.describe import run_outcome
from cronwarden.schedules.inventory import action_memo, schedule_ids
from cronwarden.schedules.mapping import (
    DEFINITION_MEMO,
    DIGEST_MEMO,
    MANAGED_MEMO,
    definition_digest,
    to_temporal,
)
from cronwarden.schedules.model import ScheduleDefinition
from cronwarden.store import heartbeats
from tests.support.cli import cli
from tests.support.database import fetch
from tests.support.schedules import (
    FAR_CRON,
    foreign_schedule,
    new_id,
    write_schedules_file,
    yearly_definition,
)
from tests.support.servers import in_process_worker
from tests.support.waiting import wait_for

pytestmark = pytest.mark.integration


def entry(schedule_id: str, *, job: str = "probe", trigger: str = f"cron: '{FAR_CRON}'") -> str:
    return f"  - id: {schedule_id}\n    job: {job}\n    {trigger}\n    args: {{sleep: 0}}\n"


@pytest_asyncio.fixture(loop_scope="session")
async def cleanup(client: Client) -> AsyncIterator[list[str]]:
    """Ids to delete after the test, whatever it did to them."""
    ids: list[str] = []
    yield ids
    for sid in ids:
        if await describe_or_none(client, sid) is not None:
            await client.get_schedule_handle(sid).delete()


ApplyOne = Callable[[ScheduleDefinition], Awaitable[ScheduleHandle]]


@pytest_asyncio.fixture(loop_scope="session")
async def apply_one(client: Client, pool: asyncpg.Pool, task_queue: str) -> AsyncIterator[ApplyOne]:
    """Applies a definition as `schedules apply` would; the schedule is deleted afterwards."""
    applied: list[str] = []

    async def apply(defn: ScheduleDefinition) -> ScheduleHandle:
        await apply_definitions(client, pool, [defn], task_queue=task_queue)
        applied.append(defn.id)
        return client.get_schedule_handle(defn.id)

    yield apply
    for sid in applied:
        if await describe_or_none(client, sid) is not None:
            await client.get_schedule_handle(sid).delete()


@pytest_asyncio.fixture(loop_scope="session")
async def managed(apply_one: ApplyOne, schedule_id: str) -> str:
    """A schedule applied by cronwarden that never fires on its own."""
    await apply_one(yearly_definition(schedule_id))
    return schedule_id


async def committed(pool: asyncpg.Pool, logical_key: str) -> list[asyncpg.Record]:
    return await fetch(pool, "SELECT * FROM cronwarden.outbox WHERE logical_key = $1", logical_key)


async def listed(client: Client, *ids: str) -> bool:
    # Temporal's schedule list is eventually consistent: wait until it shows what we created.
    return set(ids) <= set(await schedule_ids(client))


async def test_apply_twice_is_a_noop_with_an_unchanged_diff(
    tmp_path: Path, cli_env: dict[str, str], client: Client, cleanup: list[str]
) -> None:
    sid = new_id("twice")
    cleanup.append(sid)
    path = write_schedules_file(tmp_path, "schedules:\n" + entry(sid))
    first = await cli(cli_env, "schedules", "apply", "--json", str(path))
    assert first.code == 0, first
    (created,) = json.loads(first.stdout)["changes"]
    assert created["action"] == "created"
    # The documented time format of every JSON shape.
    assert datetime.strptime(created["next_fire"], "%Y-%m-%dT%H:%M:%SZ")
    before = (await client.get_schedule_handle(sid).describe()).info.last_updated_at

    second = await cli(cli_env, "schedules", "apply", "--json", str(path))
    assert second.code == 0, second
    (change,) = json.loads(second.stdout)["changes"]
    assert change["schedule_id"] == sid
    assert change["action"] == "unchanged"
    assert change["changed_fields"] == []
    assert (await client.get_schedule_handle(sid).describe()).info.last_updated_at == before


async def test_prune_removes_only_managed_schedules(
    tmp_path: Path,
    cli_env: dict[str, str],
    client: Client,
    pool: asyncpg.Pool,
    task_queue: str,
    cleanup: list[str],
) -> None:
    keep, drop, foreign = new_id("keep"), new_id("drop"), new_id("foreign")
    cleanup.extend([keep, drop, foreign])
    await foreign_schedule(client, foreign, task_queue)
    both = write_schedules_file(
        tmp_path, "schedules:\n" + entry(keep) + entry(drop, trigger="every: 300d")
    )
    assert (await cli(cli_env, "schedules", "apply", str(both))).code == 0
    await wait_for(lambda: listed(client, keep, drop, foreign), timeout=20, what="listed")

    only_keep = write_schedules_file(tmp_path, "schedules:\n" + entry(keep))
    dry = await cli(cli_env, "schedules", "apply", "--prune", "--dry-run", str(only_keep))
    assert dry.code == 0, dry
    assert f"{drop}: would be deleted" in dry.stdout
    assert await describe_or_none(client, drop) is not None

    result = await cli(cli_env, "schedules", "apply", "--prune", str(only_keep))
    assert result.code == 0, result
    assert f"{keep}: unchanged" in result.stdout
    assert f"{drop}: deleted" in result.stdout
    assert foreign not in result.stdout
    assert await describe_or_none(client, drop) is None
    assert await describe_or_none(client, keep) is not None
    assert await describe_or_none(client, foreign) is not None
    async with pool.acquire() as conn:
        assert await heartbeats.get(conn, drop) is None
        assert await heartbeats.get(conn, keep) is not None


async def test_duplicate_schedules_in_one_file_are_refused_with_both_ids(
    tmp_path: Path, cli_env: dict[str, str], client: Client
) -> None:
    a, b = new_id("dup-a"), new_id("dup-b")
    path = write_schedules_file(tmp_path, "schedules:\n" + entry(a) + entry(b))
    result = await cli(cli_env, "schedules", "apply", str(path))
    assert result.code == 2, result
    assert f"'{a}' and '{b}' duplicate each other" in result.stderr
    assert "Traceback" not in result.stderr
    assert await describe_or_none(client, a) is None


async def test_a_new_schedule_duplicating_an_existing_one_is_refused_unless_allowed(
    tmp_path: Path, cli_env: dict[str, str], client: Client, cleanup: list[str]
) -> None:
    old, new = new_id("old"), new_id("new")
    cleanup.extend([old, new])
    # Unique args: other tests' schedules on this server must not count as duplicates.
    args = f"args: {{sleep: 0, fail_attempts: 0, write: true}}  # {uuid.uuid4().hex}"
    body = "    job: probe\n    every: 300d\n    " + args + "\n"
    assert (
        await cli(
            cli_env,
            "schedules",
            "apply",
            str(write_schedules_file(tmp_path, f"schedules:\n  - id: {old}\n" + body)),
        )
    ).code == 0
    await wait_for(lambda: listed(client, old), timeout=20, what="listed")

    both = write_schedules_file(tmp_path, f"schedules:\n  - id: {new}\n" + body)
    refused = await cli(cli_env, "schedules", "apply", str(both))
    assert refused.code == 2, refused
    assert f"'{new}' duplicates the existing schedule(s) '{old}'" in refused.stderr
    assert await describe_or_none(client, new) is None

    allowed = write_schedules_file(
        tmp_path, f"schedules:\n  - id: {new}\n    allow_duplicate: true\n" + body
    )
    accepted = await cli(cli_env, "schedules", "apply", str(allowed))
    assert accepted.code == 0, accepted
    assert f"{new}: created" in accepted.stdout


async def test_an_update_that_makes_a_schedule_duplicate_an_existing_one_is_refused(
    tmp_path: Path, cli_env: dict[str, str], client: Client, cleanup: list[str]
) -> None:
    old, other = new_id("old"), new_id("other")
    cleanup.extend([old, other])
    # Unique args: other tests' schedules on this server must not count as duplicates.
    mark = uuid.uuid4().int % 10**9
    body = "    job: probe\n    every: 300d\n    args: {{sleep: 0.000{tag}}}\n"
    first = write_schedules_file(
        tmp_path,
        f"schedules:\n  - id: {old}\n"
        + body.format(tag=f"{mark}1")
        + f"  - id: {other}\n"
        + body.format(tag=f"{mark}2"),
    )
    assert (await cli(cli_env, "schedules", "apply", str(first))).code == 0
    await wait_for(lambda: listed(client, old, other), timeout=20, what="listed")

    # `other` changed to run exactly what `old` runs (the file no longer lists `old`).
    same = write_schedules_file(
        tmp_path, f"schedules:\n  - id: {other}\n" + body.format(tag=f"{mark}1")
    )
    refused = await cli(cli_env, "schedules", "apply", str(same))
    assert refused.code == 2, refused
    assert f"'{other}' duplicates the existing schedule(s) '{old}'" in refused.stderr
    desc = await client.get_schedule_handle(other).describe()
    stored = (await action_memo(client, desc))[DEFINITION_MEMO]["args"]["sleep"]
    assert stored == float(f"0.000{mark}2")


async def test_list_marks_unmanaged_schedules_and_its_json_has_the_documented_keys(
    client: Client, pool: asyncpg.Pool, cli_env: dict[str, str], task_queue: str
) -> None:
    ours, foreign = new_id("ours"), new_id("theirs")
    await apply_definitions(client, pool, [yearly_definition(ours)], task_queue=task_queue)
    await foreign_schedule(client, foreign, task_queue)
    try:
        await wait_for(lambda: listed(client, ours, foreign), timeout=20, what="listed")
        result = await cli(cli_env, "schedules", "list", "--json")
        assert result.code == 0, result
        rows = {r["schedule_id"]: r for r in json.loads(result.stdout)["schedules"]}
        keys = {"schedule_id", "managed", "job", "spec", "overlap", "paused", "note", "next_fire"}
        assert set(rows[ours]) == keys
        assert rows[ours]["managed"] is True and rows[ours]["job"] == "probe"
        assert rows[ours]["spec"] == f"cron {FAR_CRON}"
        assert rows[foreign]["managed"] is False and rows[foreign]["job"] is None

        text = await cli(cli_env, "schedules", "list")
        assert text.code == 0
        assert "(unmanaged)" in next(line for line in text.stdout.splitlines() if foreign in line)
    finally:
        await client.get_schedule_handle(ours).delete()
        await client.get_schedule_handle(foreign).delete()


async def test_a_memo_this_process_cannot_decode_is_unmanaged_and_never_a_traceback(
    tmp_path: Path,
    cli_env: dict[str, str],
    client: Client,
    task_queue: str,
    cleanup: list[str],
) -> None:
    # Another team's codec (or ours, read by a CLI without CRONWARDEN_PAYLOAD_CODEC).
    sealed = Payload(metadata={"encoding": b"binary/encrypted"}, data=b"\x00sealed")
    foreign, named, ours = new_id("sealed"), new_id("sealed-ours"), new_id("ours")
    cleanup.extend([foreign, named, ours])
    await foreign_schedule(client, foreign, task_queue, memo={"their-team": sealed})
    await foreign_schedule(client, named, task_queue, memo={MANAGED_MEMO: sealed})
    await wait_for(lambda: listed(client, foreign, named), timeout=20, what="listed")

    listing = await cli(cli_env, "schedules", "list", "--json")
    assert listing.code == 0, listing
    rows = {r["schedule_id"]: r for r in json.loads(listing.stdout)["schedules"]}
    assert rows[foreign]["managed"] is False and rows[named]["managed"] is False
    status = await cli(cli_env, "status", "--json")
    assert status.code == 0, status
    described = await cli(cli_env, "schedules", "describe", foreign, "--json")
    assert described.code == 0, described

    created = await cli(
        cli_env,
        "schedules",
        "apply",
        str(write_schedules_file(tmp_path, "schedules:\n" + entry(ours))),
    )
    assert created.code == 0, created
    assert f"{ours}: created" in created.stdout

    refused = await cli(
        cli_env,
        "schedules",
        "apply",
        str(write_schedules_file(tmp_path, "schedules:\n" + entry(named))),
    )
    assert refused.code == 1, refused
    assert "CRONWARDEN_PAYLOAD_CODEC" in refused.stderr
    paused = await cli(cli_env, "schedules", "pause", named)
    assert paused.code == 1 and "CRONWARDEN_PAYLOAD_CODEC" in paused.stderr
    for result in (listing, status, described, created, refused, paused):
        assert "Traceback" not in result.stderr


@workflow.defn(name="SomeoneElses")
class SomeoneElsesWorkflow:
    """A foreign team's workflow: its result is no RunOutcome."""

    @workflow.run
    async def run(self) -> str:
        return "their own result"


async def test_describe_of_a_foreign_schedule_that_has_run_shows_its_runs_without_outcome(
    client: Client, cli_env: dict[str, str], task_queue: str, cleanup: list[str]
) -> None:
    sid = new_id("foreign-ran")
    cleanup.append(sid)
    handle = await foreign_schedule(client, sid, task_queue)
    async with Worker(
        client,
        task_queue=task_queue,
        workflows=[SomeoneElsesWorkflow],
        workflow_runner=UnsandboxedWorkflowRunner(),
    ):
        await handle.trigger()

        async def finished() -> bool:
            info = (await handle.describe()).info
            return bool(info.recent_actions) and not info.running_actions

        await wait_for(finished, timeout=30, what="the foreign run to finish")
    result = await cli(cli_env, "schedules", "describe", sid, "--json")
    assert result.code == 0, result
    (run,) = json.loads(result.stdout)["recent_runs"]
    assert run["status"] == "completed"
    assert run["outcome"] is None and run["committed"] is None
    text = await cli(cli_env, "schedules", "describe", sid)
    assert text.code == 0, text
    assert "completed" in text.stdout


async def test_describe_shows_spec_policies_next_fires_recent_runs_and_counters(
    pool: asyncpg.Pool,
    cli_env: dict[str, str],
    worker: Worker,
    apply_one: ApplyOne,
    schedule_id: str,
) -> None:
    await apply_one(yearly_definition(schedule_id, cron=None, every="2s", catchup_window="1m"))
    await wait_for(
        lambda: fetch(pool, "SELECT 1 FROM cronwarden.outbox WHERE schedule_id = $1", schedule_id),
        timeout=30,
        what="a committed run",
    )
    result = await cli(cli_env, "schedules", "describe", schedule_id, "--json")
    assert result.code == 0, result
    data = json.loads(result.stdout)
    assert data["spec"] == "every 2s"
    assert data["overlap"] == "skip"
    assert data["catchup_window"] == "1m"
    assert data["pause_on_failure"] is True
    assert data["paused"] is False
    assert len(data["next_fire_times"]) == 5
    assert {"skipped_overlap", "missed_catchup"} <= set(data)
    done = [r for r in data["recent_runs"] if r["committed"]]
    assert done and done[0]["status"] == "completed" and done[0]["outcome"] == "ran"
    assert done[0]["logical_key"].startswith(f"{schedule_id}@")

    text = await cli(cli_env, "schedules", "describe", schedule_id)
    assert text.code == 0
    assert "every 2s" in text.stdout and "completed (ran), committed" in text.stdout


async def expected_a_day_ago(pool: asyncpg.Pool, schedule_id: str) -> None:
    async with pool.acquire() as conn:
        await conn.execute(
            "UPDATE cronwarden.heartbeats SET next_expected_at = now() - interval '1 day' "
            "WHERE schedule_id = $1",
            schedule_id,
        )


async def unpaused_beat(
    client: Client, pool: asyncpg.Pool, cli_env: dict[str, str], schedule_id: str
) -> dict[str, Any]:
    """`schedules unpause`, then the heartbeat row, checked to expect the next fire."""
    resumed = await cli(cli_env, "schedules", "unpause", schedule_id)
    assert resumed.code == 0, resumed
    desc = await client.get_schedule_handle(schedule_id).describe()
    assert desc.schedule.state.paused is False
    async with pool.acquire() as conn:
        beat = await heartbeats.get(conn, schedule_id)
    assert beat is not None
    assert beat["next_expected_at"] == desc.info.next_action_times[0]
    return beat


async def test_pause_is_an_operator_pause_and_unpause_resets_the_next_expected_fire(
    client: Client, pool: asyncpg.Pool, cli_env: dict[str, str], managed: str
) -> None:
    handle = client.get_schedule_handle(managed)
    paused = await cli(cli_env, "schedules", "pause", managed, "--reason", "disk swap")
    assert paused.code == 0, paused
    # The command prints its result; its log events wait for --log-level info.
    assert managed in paused.stdout and paused.stderr == "", paused
    desc = await handle.describe()
    assert desc.schedule.state.paused is True
    assert desc.schedule.state.note == "paused by operator: disk swap"
    async with pool.acquire() as conn:
        beat = await heartbeats.get(conn, managed)
        assert beat is not None
        assert beat["paused"] is True and beat["paused_reason"] == "disk swap"
    # As if the schedule had been paused across a fire time.
    await expected_a_day_ago(pool, managed)

    beat = await unpaused_beat(client, pool, cli_env, managed)
    assert beat["paused"] is False and beat["paused_reason"] is None


async def test_a_recorded_pause_that_temporal_no_longer_holds_is_judged_like_any_schedule(
    client: Client, pool: asyncpg.Pool, cli_env: dict[str, str], managed: str
) -> None:
    assert (await cli(cli_env, "schedules", "pause", managed, "--reason", "disk swap")).code == 0
    # Unpaused in Temporal's UI: the heartbeat row still says paused.
    await client.get_schedule_handle(managed).unpause(note="from the UI")
    await expected_a_day_ago(pool, managed)
    status = await cli(cli_env, "status", "--json")
    assert status.code == 0, status
    row = next(r for r in json.loads(status.stdout)["schedules"] if r["schedule_id"] == managed)
    assert row["paused"] is False
    assert row["paused_by"] == "operator (not paused in Temporal)"
    assert row["pause_note"] == "disk swap"
    # Judged as the monitor judges it once it lifts that pause: from Temporal's next fire (the
    # fires that passed while it was paused were not missed), not from the stale deadline.
    desc = await client.get_schedule_handle(managed).describe()
    assert row["next_expected_at"] == desc.info.next_action_times[0].strftime("%Y-%m-%dT%H:%M:%SZ")
    assert row["health"] == "ok"


async def test_unpause_of_a_schedule_without_a_heartbeat_row_starts_tracking_it(
    client: Client, pool: asyncpg.Pool, cli_env: dict[str, str], managed: str
) -> None:
    handle = client.get_schedule_handle(managed)
    await handle.pause(note="paused by operator")
    async with pool.acquire() as conn:
        await heartbeats.delete(conn, managed)
    beat = await unpaused_beat(client, pool, cli_env, managed)
    assert beat["paused"] is False
    assert beat["grace"] == yearly_definition(managed).heartbeat_grace


async def test_trigger_produces_a_run_whose_outbox_row_exists(
    client: Client, pool: asyncpg.Pool, cli_env: dict[str, str], worker: Worker, managed: str
) -> None:
    result = await cli(cli_env, "schedules", "trigger", managed, "--json")
    assert result.code == 0, result
    data = json.loads(result.stdout)
    assert data["logical_key"].startswith(f"{managed}@")
    assert data["workflow_id"] == f"{managed}-{data['fire_time']}"
    assert "off the schedule's grid" in data["note"]
    rows = await wait_for(
        lambda: committed(pool, data["logical_key"]),
        timeout=30,
        what="the triggered run's outbox row",
    )
    assert rows[0]["workflow_id"] == data["workflow_id"]

    # The workflow completes a moment after its commit; until then `skip` would drop a trigger.
    async def idle() -> bool:
        return not (await client.get_schedule_handle(managed).describe()).info.running_actions

    await wait_for(idle, timeout=30, what="the first run to finish")
    # A second trigger right away must not collide with the first one's workflow id.
    again = await cli(cli_env, "schedules", "trigger", managed, "--json")
    assert again.code == 0, again
    assert json.loads(again.stdout)["logical_key"] != data["logical_key"]


async def test_a_run_temporal_no_longer_knows_is_described_as_expired(client: Client) -> None:
    # What the namespace's retention leaves behind: a schedule's recent action naming a run
    # that Temporal answers NOT_FOUND for. (The dev server keeps deleted runs for a while, so
    # the run is named, not deleted.)
    status, outcome = await run_outcome(client, new_id("gone"), str(uuid.uuid4()), managed=True)
    assert (status, outcome) == ("expired", None)


async def test_a_trigger_behind_a_running_run_of_a_buffer_one_schedule_is_reported_buffered(
    tmp_path: Path,
    client: Client,
    pool: asyncpg.Pool,
    worker: Worker,
    apply_one: ApplyOne,
    schedule_id: str,
) -> None:
    gate = tmp_path / "gate"
    handle = await apply_one(
        yearly_definition(schedule_id, job="gated", overlap="buffer_one", args={"gate": str(gate)})
    )
    first = await operations.trigger(client, schedule_id)
    assert first.workflow_id is not None

    async def running() -> bool:
        return bool((await handle.describe()).info.running_actions)

    await wait_for(running, timeout=10, what="the first run to be running")
    second = await operations.trigger(client, schedule_id, wait_seconds=2)
    assert second.workflow_id is None and second.logical_key is None
    assert second.note.startswith("buffered: it starts when the running run")
    gate.touch()

    async def both_committed() -> bool:
        rows = await fetch(
            pool, "SELECT 1 FROM cronwarden.outbox WHERE schedule_id = $1", schedule_id
        )
        return len(rows) == 2

    await wait_for(both_committed, timeout=30, what="the buffered run to commit after the first")


async def test_two_triggers_in_one_second_start_two_runs(
    client: Client, apply_one: ApplyOne, schedule_id: str
) -> None:
    # allow_all (a read-only job): neither run waits for the other, so only the workflow id
    # could make Temporal drop the second start.
    await apply_one(yearly_definition(schedule_id, job="noop-digest", overlap="allow_all", args={}))
    # Start at the top of a second so that both triggers would fall inside it. The alignment
    # only makes the collision likely; the assertions hold wherever the triggers land.
    await asyncio.sleep(1.02 - datetime.now(UTC).microsecond / 1_000_000)
    first = await operations.trigger(client, schedule_id)
    second = await operations.trigger(client, schedule_id)
    assert first.workflow_id and second.workflow_id
    assert first.workflow_id != second.workflow_id
    assert first.logical_key != second.logical_key
    runs = (await client.get_schedule_handle(schedule_id).describe()).info.recent_actions
    assert len(runs) == 2


async def test_a_trigger_that_skip_overlap_drops_is_reported_and_exits_1(
    tmp_path: Path,
    pool: asyncpg.Pool,
    cli_env: dict[str, str],
    worker: Worker,
    apply_one: ApplyOne,
    schedule_id: str,
) -> None:
    # The first run holds until the gate opens, after the second trigger has been judged.
    gate = tmp_path / "gate"
    handle = await apply_one(yearly_definition(schedule_id, job="gated", args={"gate": str(gate)}))
    first = await cli(cli_env, "schedules", "trigger", schedule_id, "--json")
    assert first.code == 0, first
    key = json.loads(first.stdout)["logical_key"]

    async def running() -> bool:
        return bool((await handle.describe()).info.running_actions)

    await wait_for(running, timeout=10, what="the first run to be running")
    second = await cli(cli_env, "schedules", "trigger", schedule_id)
    assert second.code == 1, second
    assert "skipped the triggered run" in second.stderr
    assert "overlap is skip" in second.stderr
    gate.touch()
    await wait_for(lambda: committed(pool, key), timeout=30, what="the first run's commit")


async def test_delete_removes_the_schedule_and_its_heartbeat_and_keeps_the_outbox(
    client: Client, pool: asyncpg.Pool, cli_env: dict[str, str], worker: Worker, managed: str
) -> None:
    triggered = await cli(cli_env, "schedules", "trigger", managed, "--json")
    key = json.loads(triggered.stdout)["logical_key"]
    await wait_for(lambda: committed(pool, key), timeout=30, what="a committed run")
    # Off a terminal and without --yes: refused, nothing deleted.
    refused = await cli(cli_env, "schedules", "delete", managed)
    assert refused.code == 2, refused
    assert "--yes" in refused.stderr
    assert await describe_or_none(client, managed) is not None

    deleted = await cli(cli_env, "schedules", "delete", managed, "--yes")
    assert deleted.code == 0, deleted
    assert await describe_or_none(client, managed) is None
    async with pool.acquire() as conn:
        assert await heartbeats.get(conn, managed) is None
    assert await committed(pool, key)


async def test_delete_of_a_schedule_gone_from_temporal_removes_its_leftover_heartbeat_row(
    client: Client, pool: asyncpg.Pool, cli_env: dict[str, str], managed: str
) -> None:
    # Deleted outside cronwarden: the heartbeat row would page for ever.
    await client.get_schedule_handle(managed).delete()
    result = await cli(cli_env, "schedules", "delete", managed, "--yes")
    assert result.code == 0, result
    assert "not in Temporal; its leftover heartbeat row is deleted" in result.stdout
    async with pool.acquire() as conn:
        assert await heartbeats.get(conn, managed) is None
    again = await cli(cli_env, "schedules", "delete", managed, "--yes")
    assert again.code == 1 and f"no schedule '{managed}'" in again.stderr


async def test_delete_checks_the_schedule_before_asking_for_confirmation(
    client: Client, cli_env: dict[str, str], task_queue: str, cleanup: list[str]
) -> None:
    foreign = new_id("foreign")
    cleanup.append(foreign)
    await foreign_schedule(client, foreign, task_queue)
    # Without --yes and off a terminal: the id is refused before any confirmation is asked for.
    unknown = await cli(cli_env, "schedules", "delete", "no-such-schedule")
    assert unknown.code == 1 and "no schedule 'no-such-schedule'" in unknown.stderr
    theirs = await cli(cli_env, "schedules", "delete", foreign)
    assert theirs.code == 1 and "not created by cronwarden" in theirs.stderr
    assert "--yes" not in unknown.stderr + theirs.stderr


async def test_commands_on_an_unknown_id_exit_1_naming_the_known_ids(
    client: Client, cli_env: dict[str, str], managed: str
) -> None:
    await wait_for(lambda: listed(client, managed), timeout=20, what="listed")
    window = ("--start", "-1h", "--end", "now")
    # One wording in every command that takes an id, audit and backfill included.
    for command in (
        *(("schedules", c, "no-such-schedule") for c in ("describe", "pause", "unpause")),
        ("schedules", "trigger", "no-such-schedule"),
        ("schedules", "delete", "no-such-schedule", "--yes"),
        ("audit", "no-such-schedule"),
        ("backfill", "plan", "no-such-schedule", *window),
        ("backfill", "run", "no-such-schedule", *window),
    ):
        result = await cli(cli_env, *command)
        assert result.code == 1, (command, result)
        assert result.stderr.startswith("error: no schedule 'no-such-schedule' (known: "), command
        assert managed in result.stderr
        assert "Traceback" not in result.stderr


async def test_operations_leave_a_schedule_cronwarden_did_not_create_alone(
    client: Client, cli_env: dict[str, str], task_queue: str
) -> None:
    sid = new_id("foreign")
    handle = await foreign_schedule(client, sid, task_queue)
    try:
        for command in (
            ["pause", sid],
            ["unpause", sid],
            ["trigger", sid],
            ["delete", sid, "--yes"],
        ):
            result = await cli(cli_env, "schedules", *command)
            assert result.code == 1, (command, result)
            assert "not created by cronwarden" in result.stderr
        desc = await handle.describe()
        assert desc.schedule.state.paused is False
        assert desc.info.num_actions == 0
    finally:
        await handle.delete()


async def test_a_run_whose_job_is_gone_pauses_the_schedule_and_keeps_paging(
    client: Client, pool: asyncpg.Pool, cli_env: dict[str, str], task_queue: str, managed: str
) -> None:
    # A run started before per-job task queues (the orphan path); today's runs wait for a
    # worker with the job instead (tests/integration/test_job_queues.py).
    handle = client.get_schedule_handle(managed)
    async with in_process_worker(client, pool, task_queue, without_probe(), before_job_queues=True):
        await handle.trigger()

        async def paused() -> bool:
            return (await handle.describe()).schedule.state.paused

        await wait_for(paused, timeout=30, what="the schedule paused by the worker")
        desc = await handle.describe()
        (run,) = desc.info.recent_actions
        assert isinstance(run.action, ScheduleActionExecutionStartWorkflow)
        run_handle = client.get_workflow_handle(run.action.workflow_id)

        async def run_status() -> str | None:
            wf = await run_handle.describe()
            name = wf.status.name if wf.status else None
            return name if name != "RUNNING" else None

        # The pause comes from the activity's last attempt; the run fails just after, on this
        # worker's next workflow task: it must still be polling until then.
        assert await wait_for(run_status, timeout=30, what="the run to end") == "FAILED"
    assert desc.schedule.state.note is not None
    assert desc.schedule.state.note.startswith("paused by cronwarden: job 'probe'")
    assert "is not registered on worker" in desc.schedule.state.note
    async with pool.acquire() as conn:
        beat = await heartbeats.get(conn, managed)
    assert beat is not None
    # Not an operator's pause: the monitor must keep paging.
    assert beat["paused"] is False
    assert "unknown job 'probe'" in (beat["last_error"] or "")

    status = await cli(cli_env, "status", "--json")
    assert status.code == 0, status
    row = next(r for r in json.loads(status.stdout)["schedules"] if r["schedule_id"] == managed)
    assert row["paused_by"] == "failure"
    assert row["orphaned"] is True


def without_probe() -> JobRegistry:
    """The registry of a worker deployed without the `probe` job."""
    registry = JobRegistry()
    registry.register(REGISTRY.get("noop-digest"))
    return registry


async def test_a_retry_on_a_worker_that_has_the_job_commits_and_leaves_the_schedule_running(
    client: Client, pool: asyncpg.Pool, task_queue: str, apply_one: ApplyOne, schedule_id: str
) -> None:
    # A rolling deploy of a release before per-job task queues: the old worker (without the
    # job) takes the first attempt; the retry lands on the new worker.
    handle = await apply_one(yearly_definition(schedule_id, max_attempts=10))
    async with AsyncExitStack() as workers:
        old = await workers.enter_async_context(
            in_process_worker(client, pool, task_queue, without_probe(), before_job_queues=True)
        )
        await handle.trigger()

        async def failed_once() -> str | None:
            for running in (await handle.describe()).info.running_actions:
                assert isinstance(running, ScheduleActionExecutionStartWorkflow)
                wf = await client.get_workflow_handle(running.workflow_id).describe()
                pending = wf.raw_description.pending_activities
                if pending and pending[0].attempt >= 2:
                    return str(running.workflow_id)
            return None

        workflow_id = await wait_for(failed_once, timeout=30, what="a failed first attempt")
        # Another process in real life: one client may not run two workers on one queue.
        other = await Client.connect(client.service_client.config.target_host)
        await workers.enter_async_context(in_process_worker(other, pool, task_queue))
        await old.shutdown()
        await wait_for(
            lambda: fetch(
                pool, "SELECT 1 FROM cronwarden.outbox WHERE workflow_id = $1", workflow_id
            ),
            timeout=60,
            what="the retry's commit",
        )
    rows = await fetch(pool, "SELECT 1 FROM cronwarden.outbox WHERE schedule_id = $1", schedule_id)
    assert len(rows) == 1
    desc = await handle.describe()
    assert desc.schedule.state.paused is False
    assert desc.schedule.state.note is None or "cronwarden: job" not in desc.schedule.state.note


async def test_an_update_from_a_stale_read_cannot_undo_a_pause_and_apply_keeps_it(
    client: Client, pool: asyncpg.Pool, task_queue: str, managed: str
) -> None:
    handle = client.get_schedule_handle(managed)
    stale = await handle.describe()
    await handle.pause(note="operator: hold")
    changed = yearly_definition(managed, timeout="7m")
    # What a read-modify-write without a conflict token would send: the state read before the
    # pause. Temporal must drop it.
    replacement = to_temporal(changed, task_queue=task_queue)
    replacement.state = stale.schedule.state
    try:
        await send_update(client, stale, replacement)
    except RPCError as exc:
        assert exc.status == RPCStatusCode.FAILED_PRECONDITION, exc
    # Patches and updates are applied in order: once this note shows, the stale update has
    # been dealt with.
    await handle.pause(note="operator: still holding")

    async def noted() -> bool:
        return (await handle.describe()).schedule.state.note == "operator: still holding"

    await wait_for(noted, timeout=20, what="the second pause note")
    after = await handle.describe()
    assert after.schedule.state.paused is True
    assert (await action_memo(client, after))[DIGEST_MEMO] == definition_digest(
        yearly_definition(managed), task_queue=task_queue
    )

    (change,) = await apply_definitions(client, pool, [changed], task_queue=task_queue)
    assert change.action == "updated" and change.changed_fields == ["timeout"]
    final = await handle.describe()
    assert final.schedule.state.paused is True
    assert (await action_memo(client, final))[DIGEST_MEMO] == definition_digest(
        changed, task_queue=task_queue
    )


def yearly_entry(schedule_id: str, cron: str, *extra: str) -> str:
    """An entry of its own yearly cron (no two entries of a test, nor another test's schedules,
    are duplicates), with `extra` field lines."""
    lines = [f"id: {schedule_id}", "job: probe", f"cron: '{cron}'", *extra]
    return "  - " + "\n    ".join(lines) + "\n"


PAST_END = "end_at: '2020-01-01T00:00:00Z'"
FINISHED_NOTE = "its end_at (2020-01-01T00:00:00Z) has passed, so it fires no more"


async def test_a_finished_entry_is_reported_finished_and_the_rest_of_the_file_applies(
    tmp_path: Path, cli_env: dict[str, str], client: Client, cleanup: list[str]
) -> None:
    normal, ended, gone = new_id("normal"), new_id("ended"), new_id("gone")
    cleanup.extend([normal, ended, gone])
    running = yearly_entry(ended, "43 3 1 1 *", "end_at: '2031-01-01T00:00:00Z'")
    first = await cli(
        cli_env, "schedules", "apply", str(write_schedules_file(tmp_path, "schedules:\n" + running))
    )
    assert first.code == 0, first

    # `ended` is ended by moving its end_at into the past; `gone` ended before it was ever
    # applied (the file of a release, applied again by a pod started after its end).
    path = write_schedules_file(
        tmp_path,
        "schedules:\n"
        + yearly_entry(normal, "41 3 1 1 *")
        + yearly_entry(ended, "43 3 1 1 *", PAST_END)
        + yearly_entry(gone, "47 3 1 1 *", "start_at: '2019-01-01T00:00:00Z'", PAST_END),
    )
    applied = await cli(cli_env, "schedules", "apply", "--json", str(path))
    assert applied.code == 0, applied
    changes = {c["schedule_id"]: c for c in json.loads(applied.stdout)["changes"]}
    assert (changes[normal]["action"], changes[normal]["finished"]) == ("created", None)
    assert changes[ended]["action"] == "updated"
    assert (changes[ended]["changed_fields"], changes[ended]["finished"]) == (
        ["end_at"],
        FINISHED_NOTE,
    )
    assert (changes[gone]["action"], changes[gone]["finished"]) == ("finished", FINISHED_NOTE)
    # The edit reached Temporal, so the schedule does stop; the one that had ended is not
    # brought back for Temporal to delete again.
    described = await client.get_schedule_handle(ended).describe()
    assert described.schedule.spec.end_at == datetime(2020, 1, 1, tzinfo=UTC)
    assert described.info.next_action_times == []
    assert await describe_or_none(client, gone) is None
    assert await describe_or_none(client, normal) is not None

    again = await cli(cli_env, "schedules", "apply", str(path))
    assert again.code == 0, again
    assert f"{normal}: unchanged, next fire " in again.stdout
    assert f"{ended}: unchanged; finished: {FINISHED_NOTE}" in again.stdout
    assert f"{gone}: finished, not created ({FINISHED_NOTE})" in again.stdout
    assert "nothing to change" in again.stdout
    assert await describe_or_none(client, gone) is None


async def test_a_cron_whose_years_are_over_is_finished_and_never_blocks_its_file(
    tmp_path: Path, cli_env: dict[str, str], client: Client, cleanup: list[str]
) -> None:
    # A year-bounded cron ends like an end_at: once its years are over, the file it is in must
    # still apply (the pods of a release apply it at every start).
    normal, bygone = new_id("normal"), new_id("bygone")
    cleanup.extend([normal, bygone])
    path = write_schedules_file(
        tmp_path,
        "schedules:\n"
        + yearly_entry(normal, "41 3 1 1 *")
        + yearly_entry(bygone, "43 3 1 1 * 2020"),
    )
    applied = await cli(cli_env, "schedules", "apply", "--json", str(path))
    assert applied.code == 0, applied
    changes = {c["schedule_id"]: c for c in json.loads(applied.stdout)["changes"]}
    assert changes[normal]["action"] == "created"
    assert changes[bygone]["action"] == "finished"
    assert (
        "it fires no more: '43 3 1 1 * 2020' names only years before" in changes[bygone]["finished"]
    )
    assert await describe_or_none(client, bygone) is None
    assert await describe_or_none(client, normal) is not None


async def test_an_entry_that_could_never_fire_still_refuses_the_file_with_nothing_applied(
    tmp_path: Path, cli_env: dict[str, str], client: Client, cleanup: list[str]
) -> None:
    normal, ended, never = new_id("normal"), new_id("ended"), new_id("never")
    cleanup.extend([normal, ended, never])
    path = write_schedules_file(
        tmp_path,
        "schedules:\n"
        + yearly_entry(normal, "41 3 1 1 *")
        + yearly_entry(ended, "43 3 1 1 *", PAST_END)
        # Past its end_at too, but it could fire on no day of its life.
        + yearly_entry(never, "0 0 30 2 *", PAST_END),
    )
    result = await cli(cli_env, "schedules", "apply", str(path))
    assert result.code == 2, result
    assert f"{path}: 1 problem(s), nothing applied" in result.stderr
    assert (
        f"schedule '{never}' (entry 3): this schedule never fires: '0 0 30 2 *' asks for day 30 "
        "of February" in result.stderr
    )
    assert ended not in result.stderr
    assert "Traceback" not in result.stderr + result.stdout
    for sid in (normal, ended, never):
        assert await describe_or_none(client, sid) is None


async def test_an_alias_bomb_is_refused_naming_the_file_with_nothing_applied(
    tmp_path: Path, cli_env: dict[str, str], client: Client, cleanup: list[str]
) -> None:
    normal, bomb = new_id("normal"), new_id("bomb")
    cleanup.extend([normal, bomb])
    # Nine levels of ten aliases each: a billion strings once expanded.
    anchors = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    anchors += [f"a{n}: &a{n} [{', '.join([f'*a{n - 1}'] * 10)}]" for n in range(1, 9)]
    args = "args:\n" + "\n".join(f"      {line}" for line in anchors)
    path = write_schedules_file(
        tmp_path,
        "schedules:\n"
        + yearly_entry(normal, "41 3 1 1 *")
        + yearly_entry(bomb, "43 3 1 1 *", args),
    )
    result = await cli(cli_env, "schedules", "apply", str(path))
    assert result.code == 2, result
    assert f"{path}: 1 problem(s), nothing applied" in result.stderr
    assert "the file's YAML aliases (*name) would add more than 100,000 nodes" in result.stderr
    assert "Traceback" not in result.stderr + result.stdout
    assert await describe_or_none(client, normal) is None
