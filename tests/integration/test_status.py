"""`cronwarden status` against real Temporal and Postgres: pause attribution, health, the
documented `--json` keys, display zones and one-sentence failures."""

from __future__ import annotations

import asyncio
import contextlib
import json
import uuid
from collections.abc import AsyncIterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
import pytest
import pytest_asyncio
from temporalio.client import Client

from bench.rpc_calls import counting_rpcs
from cronwarden.embedded import EmbeddedTemporal
from cronwarden.schedules import schedule_list
from cronwarden.schedules import status as status_module
from cronwarden.schedules.apply import apply_definitions
from cronwarden.schedules.inventory import ListedView, listed_views, schedule_ids
from cronwarden.schedules.status import build_rows, read_views
from cronwarden.store import definitions, heartbeats
from tests.support.cli import cli
from tests.support.database import fetch
from tests.support.schedules import foreign_schedule, new_id, yearly_definition
from tests.support.waiting import wait_for

pytestmark = pytest.mark.integration

ROW_KEYS = {
    "schedule_id",
    "managed",
    "in_temporal",
    "job",
    "spec",
    "overlap",
    "paused",
    "paused_by",
    "pause_note",
    "orphaned",
    "last_success",
    "next_expected_at",
    "health",
    "last_error",
    "skipped_overlap",
    "missed_catchup",
    "skipped_lease",
    "last_lease_skip",
    "incident",
    "last_replay",
    "last_replay_error",
    "missing",
}


@pytest_asyncio.fixture(loop_scope="session")
async def two(client: Client, pool: asyncpg.Pool, task_queue: str) -> AsyncIterator[list[str]]:
    """Two quiet managed schedules (they never fire on their own during a test)."""
    ids = [new_id("st-a"), new_id("st-b")]
    await apply_definitions(
        client,
        pool,
        [yearly_definition(ids[0]), yearly_definition(ids[1], args={"sleep": 0.5})],
        task_queue=task_queue,
    )
    try:
        yield ids
    finally:
        for sid in ids:
            await client.get_schedule_handle(sid).delete()


async def status_rows(env: dict[str, str], *args: str) -> dict[str, dict[str, Any]]:
    result = await cli(env, "status", "--json", *args)
    assert result.code == 0, result
    data = json.loads(result.stdout)
    assert set(data) == {"generated_at", "system_incident", "schedules", "dead_letters"}
    return {row["schedule_id"]: row for row in data["schedules"]}


async def test_operator_pause_and_failure_pause_show_differently(
    client: Client, cli_env: dict[str, str], two: list[str]
) -> None:
    by_operator, by_failure = two
    paused = await cli(cli_env, "schedules", "pause", by_operator, "--reason", "vendor outage")
    assert paused.code == 0, paused
    # What pause_on_failure does: a pause in Temporal that `schedules pause` did not record.
    await client.get_schedule_handle(by_failure).pause(note="Workflow failed: boom")

    rows = await status_rows(cli_env)
    assert rows[by_operator]["paused_by"] == "operator"
    assert rows[by_operator]["health"] == "paused"
    assert rows[by_operator]["pause_note"] == "paused by operator: vendor outage"
    assert rows[by_failure]["paused_by"] == "failure"
    # The monitor still pages for a failure pause, so status still judges its health.
    assert rows[by_failure]["health"] == "ok"
    assert rows[by_failure]["pause_note"] == "Workflow failed: boom"

    table = await cli(cli_env, "status")
    assert table.code == 0, table
    lines = table.stdout.splitlines()
    operator_line = next(line for line in lines if by_operator in line)
    failure_line = next(line for line in lines if by_failure in line)
    assert "operator: vendor outage" in operator_line
    assert "failure: Workflow failed: boom" in failure_line


async def test_status_json_parses_and_has_the_documented_keys(
    client: Client, pool: asyncpg.Pool, cli_env: dict[str, str], task_queue: str, two: list[str]
) -> None:
    late, overdue = two
    foreign = new_id("st-foreign")
    await foreign_schedule(client, foreign, task_queue)
    async with pool.acquire() as conn:
        # One fire a minute overdue (grace 15m: late), one past its grace (overdue), and a
        # successful run recorded on the first.
        await conn.execute(
            "UPDATE cronwarden.heartbeats SET next_expected_at = now() - interval '1 minute', "
            "last_logical_key = $2, last_success_at = now() - interval '10 minutes' "
            "WHERE schedule_id = $1",
            late,
            f"{late}@2026-01-01T03:00:00Z",
        )
        await conn.execute(
            "UPDATE cronwarden.heartbeats SET next_expected_at = now() - interval '1 hour', "
            "last_error = 'JobFailed: boom' WHERE schedule_id = $1",
            overdue,
        )
        # A `backfill run` replay of the first that failed: shown apart, never as last_error.
        await conn.execute(
            "UPDATE cronwarden.heartbeats SET last_replay_error = 'JobFailed: replayed', "
            "last_replay_error_key = $2, last_replay_error_at = now() WHERE schedule_id = $1",
            late,
            f"{late}@2025-01-01T03:00:00Z",
        )
    try:

        async def all_listed() -> dict[str, dict[str, Any]]:
            rows = await status_rows(cli_env)
            return rows if foreign in rows else {}

        rows = await wait_for(all_listed, timeout=20, what="the foreign schedule in status")
    finally:
        await client.get_schedule_handle(foreign).delete()
    for sid in (late, overdue, foreign):
        assert set(rows[sid]) == ROW_KEYS
    assert set(rows[late]["last_success"]) == {"logical_key", "at", "age_seconds"}
    assert rows[late]["health"] == "late"
    assert rows[late]["last_success"]["logical_key"] == f"{late}@2026-01-01T03:00:00Z"
    assert 600 <= rows[late]["last_success"]["age_seconds"] < 3600
    assert rows[late]["spec"] == "cron 0 3 1 1 *"
    assert rows[late]["overlap"] == "skip"
    assert rows[overdue]["health"] == "overdue"
    assert rows[overdue]["last_error"] == "JobFailed: boom"
    assert rows[overdue]["last_success"]["logical_key"] is None
    assert rows[late]["last_error"] is None
    failed = rows[late]["last_replay_error"]
    assert (failed["logical_key"], failed["error"]) == (
        f"{late}@2025-01-01T03:00:00Z",
        "JobFailed: replayed",
    )
    assert failed["at"].endswith("Z")
    assert rows[overdue]["last_replay_error"] is None
    table = await cli(cli_env, "status")
    assert table.code == 0, table
    listed = table.stdout.split("replays that failed", 1)[1]
    assert f"{late} {late}@2025-01-01T03:00:00Z: JobFailed: replayed" in listed
    assert rows[foreign]["managed"] is False
    assert rows[foreign]["health"] == "untracked"
    for row in (rows[late], rows[overdue]):
        assert row["skipped_overlap"] == 0 and row["missed_catchup"] == 0
        assert row["next_expected_at"].endswith("Z")


async def test_status_shows_the_open_incident_the_monitor_opened(
    pool: asyncpg.Pool, cli_env: dict[str, str], two: list[str]
) -> None:
    quiet, overdue = two
    async with pool.acquire() as conn:
        await conn.execute(
            "UPDATE cronwarden.heartbeats SET next_expected_at = now() - interval '1 hour' "
            "WHERE schedule_id = $1",
            overdue,
        )
    watched = await cli(cli_env, "monitor", "--once")
    assert watched.code == 0, watched
    [incident] = await fetch(
        pool, "SELECT * FROM cronwarden.incidents WHERE schedule_id = $1", overdue
    )

    rows = await status_rows(cli_env)
    assert rows[quiet]["incident"] is None
    assert rows[overdue]["incident"] == {
        "id": incident["id"],
        "kind": "never-ran",
        "summary": incident["summary"],
        "opened_at": incident["opened_at"].strftime("%Y-%m-%dT%H:%M:%SZ"),
        "system_incident_id": None,
    }
    table = await cli(cli_env, "status")
    assert table.code == 0, table
    [line] = [ln for ln in table.stdout.splitlines() if ln.lstrip("│ ").startswith(overdue)]
    assert f"#{incident['id']} never-ran" in line


async def test_a_heartbeat_whose_schedule_was_deleted_elsewhere_is_shown_not_hidden(
    client: Client, cli_env: dict[str, str], two: list[str]
) -> None:
    sid = two[0]
    # Deleted behind cronwarden's back (Temporal UI): its heartbeat row would page for ever.
    await client.get_schedule_handle(sid).delete()
    rows = await status_rows(cli_env)
    assert rows[sid]["in_temporal"] is False
    assert rows[sid]["spec"] == "(not in Temporal)"
    two.remove(sid)


async def test_tz_changes_only_the_display(cli_env: dict[str, str], two: list[str]) -> None:
    utc = await cli(cli_env, "status")
    tokyo = await cli(cli_env, "status", "--tz", "Asia/Tokyo")
    assert utc.code == 0 and tokyo.code == 0, (utc, tokyo)
    assert "next expected (UTC)" in utc.stdout
    assert "next expected (Asia/Tokyo)" in tokyo.stdout
    assert " JST" in next(line for line in tokyo.stdout.splitlines() if two[0] in line)
    # The logical key names the UTC fire time whatever the display zone.
    json_tokyo = await status_rows(cli_env, "--tz", "Asia/Tokyo")
    assert json_tokyo[two[0]]["next_expected_at"].endswith("Z")

    bad = await cli(cli_env, "status", "--tz", "Mars/Olympus")
    assert bad.code == 2
    assert "'Mars/Olympus' is not an IANA time zone name" in bad.stderr


async def test_status_with_temporal_unreachable_is_one_sentence(cli_env: dict[str, str]) -> None:
    env = {**cli_env, "CRONWARDEN_TEMPORAL_ADDRESS": "127.0.0.1:1"}
    result = await cli(env, "status")
    assert result.code == 1
    assert result.stderr.strip().startswith("error: cannot reach Temporal at 127.0.0.1:1")
    assert len(result.stderr.strip().splitlines()) == 1


async def test_status_with_postgres_unreachable_is_one_sentence(cli_env: dict[str, str]) -> None:
    env = {
        **cli_env,
        "CRONWARDEN_DATABASE_URL": f"postgresql://u:pw-{uuid.uuid4().hex}@127.0.0.1:1/x",
    }
    result = await cli(env, "status")
    assert result.code == 1
    assert "cannot reach Postgres at 127.0.0.1:1/x" in result.stderr
    assert "pw-" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


async def test_colour_only_on_a_terminal_and_never_in_json(
    cli_env: dict[str, str], two: list[str]
) -> None:
    plain = await cli(cli_env, "status")
    assert plain.code == 0 and "\x1b[" not in plain.stdout
    # FORCE_COLOR makes rich treat the output as a colour terminal.
    env = {**cli_env, "FORCE_COLOR": "1", "COLUMNS": "300"}
    coloured = await cli(env, "status")
    assert coloured.code == 0 and "\x1b[" in coloured.stdout
    as_json = await cli(env, "status", "--json")
    assert as_json.code == 0 and "\x1b[" not in as_json.stdout
    json.loads(as_json.stdout)


async def test_status_describes_only_the_schedules_the_list_cannot_settle(
    temporal_server: EmbeddedTemporal, pool: asyncpg.Pool, two: list[str]
) -> None:
    """Ten thousand schedules must not mean ten thousand describes: the rows come from
    Temporal's schedule list and the recorded definitions; only an overdue schedule (is a run
    still going? what did Temporal skip?) is described."""
    quiet, overdue = two
    counted = await Client.connect(temporal_server.address)
    await wait_for(
        lambda: _listed(counted, set(two)), timeout=30, what="both schedules in Temporal's list"
    )
    beats, recorded = await _deadline_in(pool, overdue, -timedelta(hours=2))

    with counting_rpcs(counted) as calls:
        views = await read_views(counted, beats, recorded, now=datetime.now(UTC))

    assert calls["describe_schedule"] == 1, calls
    rows = {r.schedule_id: r for r in build_rows(views, beats, now=datetime.now(UTC))}
    assert rows[overdue].health == "overdue"
    assert rows[overdue].skipped_overlap == 0
    assert rows[quiet].health == "ok"
    assert rows[quiet].job == "probe" and rows[quiet].spec.startswith("cron ")
    assert rows[quiet].skipped_overlap is None  # not read: it was not described


async def _deadline_in(
    pool: asyncpg.Pool, schedule_id: str, offset: timedelta
) -> tuple[dict[str, dict[str, Any]], dict[str, dict[str, Any]]]:
    """Set the row's deadline `offset` from now (grace 1 minute); every heartbeat row and
    recorded definition, as `status` reads them."""
    async with pool.acquire() as conn:
        await conn.execute(
            "UPDATE cronwarden.heartbeats SET next_expected_at = now() + $2::interval,"
            " grace = interval '1 minute' WHERE schedule_id = $1",
            schedule_id,
            offset,
        )
        return await heartbeats.all_rows(conn), await definitions.latest_all(conn)


async def _listed(client: Client, ids: set[str]) -> bool:
    return ids <= set(await schedule_ids(client))


async def test_status_describes_a_paused_schedule_the_list_still_shows_running(
    client: Client, pool: asyncpg.Pool, two: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Temporal's list lags behind a pause: a schedule paused in its heartbeat row is described,
    so status shows the pause Temporal holds, not the list's stale state."""
    paused, _ = two
    await client.get_schedule_handle(paused).pause(note="paused by operator: vendor outage")
    async with pool.acquire() as conn:
        await heartbeats.pause(conn, schedule_id=paused, reason="vendor outage")
        beats = await heartbeats.all_rows(conn)
        recorded = await definitions.latest_all(conn)
    real_listed_views = listed_views

    async def lagging(client: Client, defs: dict[str, dict[str, Any]]) -> list[Any]:
        views = await real_listed_views(client, defs)
        return [
            replace(v, paused=False, note=None)
            if isinstance(v, ListedView) and v.schedule_id == paused
            else v
            for v in views
        ]

    monkeypatch.setattr(status_module, "listed_views", lagging)  # where status looks it up
    await wait_for(lambda: _listed(client, set(two)), timeout=30, what="both schedules listed")

    found = await status_module.status_rows(client, beats, recorded, now=_now())
    rows = {r.schedule_id: r for r in found}

    assert rows[paused].paused
    assert rows[paused].paused_by == "operator"
    assert rows[paused].health == "paused"


async def test_status_judges_what_to_describe_and_each_health_at_one_time(
    client: Client, pool: asyncpg.Pool, two: list[str]
) -> None:
    """A schedule that turns late between the choice of what to describe and the rows would
    show late without the describe that finds its run going: both use the one `now`."""
    due, _ = two
    beats, recorded = await _deadline_in(pool, due, timedelta(minutes=1))
    await wait_for(lambda: _listed(client, set(two)), timeout=30, what="both schedules listed")
    now = _now()

    found = await status_module.status_rows(client, beats, recorded, now=now)
    rows = {r.schedule_id: r for r in found}

    assert rows[due].now == now
    assert rows[due].health == "ok"


def _now() -> datetime:
    return datetime.now(UTC)


async def test_listed_views_read_page_by_page_match_the_sdks_list(
    client: Client, pool: asyncpg.Pool, two: list[str], task_queue: str
) -> None:
    """The list read ahead page by page, from its protobufs, shows what the SDK's own list
    shows: every schedule once, its pause, note and next fires, managed or not."""
    foreign = new_id("st-foreign")
    await foreign_schedule(client, foreign, task_queue)
    try:
        await client.get_schedule_handle(two[0]).pause(note="paused by operator: paging")
        async with pool.acquire() as conn:
            recorded = await definitions.latest_all(conn)

        async def settled() -> bool:
            by_id = {d.id: d async for d in await client.list_schedules()}
            mine = {*two, foreign}
            if not mine <= set(by_id):
                return False
            schedule = by_id[two[0]].schedule
            return schedule is not None and schedule.state.paused

        await wait_for(settled, timeout=30, what="the schedules and the pause listed")
        sdk = {d.id: d async for d in await client.list_schedules()}
        views = await listed_views(client, recorded, page_size=1)  # one entry a page

        ids = [v.schedule_id for v in views]
        # Other tests' schedules come and go between the two reads: ours must be there, once
        # each and in order, and every schedule both reads show must agree.
        assert ids == sorted(set(ids))
        mine = {*two, foreign}
        assert mine <= set(ids)
        for v in views:
            if v.schedule_id not in sdk:
                continue
            listed = sdk[v.schedule_id]
            assert listed.schedule is not None and listed.info is not None
            assert v.paused == listed.schedule.state.paused
            assert v.note == listed.schedule.state.note
            assert v.next_fire_times == list(listed.info.next_action_times)
        by_id = {v.schedule_id: v for v in views}
        assert by_id[two[0]].managed and by_id[two[0]].paused
        assert by_id[two[0]].job == recorded[two[0]]["job"]
        assert not by_id[foreign].managed
        assert by_id[foreign].spec == "every 300d"
    finally:
        await client.get_schedule_handle(foreign).delete()


async def test_a_reader_that_stops_early_leaves_no_page_request_behind(
    client: Client, two: list[str]
) -> None:
    await wait_for(lambda: _listed(client, set(two)), timeout=30, what="both schedules listed")
    before = {t for t in asyncio.all_tasks() if not t.done()}
    async with contextlib.aclosing(schedule_list.list_pages(client, page_size=1)) as pages:
        async for page in pages:
            assert len(page) == 1
            break  # the next page was already requested
    left = {t for t in asyncio.all_tasks() if not t.done()} - before - {asyncio.current_task()}
    assert not left
