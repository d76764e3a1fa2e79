"""Who changed what, on real Temporal and Postgres: every command that changes a schedule
records one row with its actor (the flag, CRONWARDEN_ACTOR, else user@host) and reason; a
command that fails records nothing; `audit log` reads them back (by id, since a time, as JSON),
`audit ID` still audits the fires, and the status page lists a schedule's last changes."""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import asyncpg
import pytest
import pytest_asyncio
from temporalio.client import Client, ScheduleActionExecutionStartWorkflow
from temporalio.service import RPCError
from temporalio.worker import Worker

from cronwarden.actor import default_actor
from cronwarden.embedded import free_port
from cronwarden.monitor.http import monitor_app, serve_monitor
from cronwarden.monitor.metrics import Metrics
from cronwarden.monitor.page import PageAccess, StatusPage
from cronwarden.schedules.apply import apply_definitions, describe_or_none
from cronwarden.store import change_log
from tests.support.cli import cli, cli_json, iso
from tests.support.http_probe import http_get_text
from tests.support.schedules import FAR_CRON, definition, new_id, write_schedules_file
from tests.support.waiting import wait_for

pytestmark = pytest.mark.integration


async def rows(pool: asyncpg.Pool, schedule_id: str | None = None) -> list[dict[str, Any]]:
    """Every change-log row (of one schedule), oldest first."""
    found = await pool.fetch(
        "SELECT actor, action, schedule_id, reason, details::text AS details"
        " FROM cronwarden.change_log WHERE $1::text IS NULL OR schedule_id = $1 ORDER BY id",
        schedule_id,
    )
    return [{**dict(r), "details": json.loads(r["details"])} for r in found]


# The schedules the module's tests create, deleted when it ends (whatever each test did to them).
MADE: list[str] = []


def made(prefix: str) -> str:
    sid = new_id(prefix)
    MADE.append(sid)
    return sid


@pytest_asyncio.fixture(scope="module", loop_scope="session", autouse=True)
async def _delete_made(client: Client) -> AsyncIterator[None]:
    yield
    for sid in MADE:
        with contextlib.suppress(RPCError):  # deleted by the test itself
            await client.get_schedule_handle(sid).delete()


def schedule_file(tmp_path: Path, sid: str, *, cron: str = FAR_CRON) -> Path:
    return write_schedules_file(
        tmp_path,
        f"schedules:\n  - id: {sid}\n    job: probe\n    cron: '{cron}'\n    args: {{sleep: 0}}\n",
    )


async def test_each_command_records_one_row_with_its_actor_and_reason(
    tmp_path: Path,
    client: Client,
    pool: asyncpg.Pool,
    cli_env: dict[str, str],
    worker: Worker,
) -> None:
    sid = made("changed")
    path = schedule_file(tmp_path, sid)
    # The flag.
    applied = await cli(
        cli_env, "schedules", "apply", str(path), "--actor", "alice", "--reason", "first rollout"
    )
    assert applied.code == 0, applied
    # Applied again unchanged: nothing changed, nothing recorded.
    assert (await cli(cli_env, "schedules", "apply", str(path), "--actor", "alice")).code == 0
    # Updated: the row names the fields that changed.
    edited = schedule_file(tmp_path, sid, cron="0 4 1 1 *")
    assert (await cli(cli_env, "schedules", "apply", str(edited), "--actor", "alice")).code == 0
    # The variable.
    ci = cli_env | {"CRONWARDEN_ACTOR": "ci-deploy"}
    paused = await cli(ci, "schedules", "pause", sid, "--reason", "disk swap")
    assert paused.code == 0, paused
    # Neither: the OS user and host the command ran as (the flag wins over the variable).
    assert (await cli(cli_env, "schedules", "unpause", sid)).code == 0
    triggered = await cli(
        ci, "schedules", "trigger", sid, "--json", "--actor", "bob", "--reason", "rerun"
    )
    assert triggered.code == 0, triggered
    key = json.loads(triggered.stdout)["logical_key"]
    deleted = await cli(cli_env, "schedules", "delete", sid, "--yes", "--reason", "retired")
    assert deleted.code == 0, deleted

    found = await rows(pool, sid)
    me = default_actor()
    assert [(r["action"], r["actor"], r["reason"]) for r in found] == [
        ("apply", "alice", "first rollout"),
        ("apply", "alice", None),
        ("pause", "ci-deploy", "disk swap"),
        ("unpause", me, None),
        ("trigger", "bob", "rerun"),
        ("delete", me, "retired"),
    ]
    assert found[0]["details"] == {"change": "created", "changed_fields": [], "file": str(path)}
    assert found[1]["details"]["change"] == "updated"
    assert "cron" in found[1]["details"]["changed_fields"]
    assert found[4]["details"]["logical_key"] == key
    assert found[5]["details"] == {"in_temporal": True}
    assert await rows(pool) == found  # no row of any other schedule, nor a file row

    # Read back, newest first, as JSON.
    listed = await cli_json(cli_env, "audit", "log", sid)
    assert [c["action"] for c in listed["changes"]] == [r["action"] for r in reversed(found)]
    first = listed["changes"][-1]
    assert set(first) == {"id", "at", "actor", "action", "schedule_id", "reason", "details"}
    assert first["schedule_id"] == sid and first["at"].endswith("Z")


async def test_a_command_that_fails_or_is_refused_records_nothing(
    tmp_path: Path, client: Client, pool: asyncpg.Pool, cli_env: dict[str, str]
) -> None:
    sid = made("refused")
    # Refused before anything changes: an empty, an over-long or a multi-line actor or reason.
    path = schedule_file(tmp_path, sid)
    for bad in (["--actor", ""], ["--actor", "x" * 201], ["--actor", "a\nb"], ["--reason", "a\tb"]):
        refused = await cli(cli_env, "schedules", "apply", str(path), *bad)
        assert refused.code == 2, (bad, refused)
        assert refused.stderr.count("error:") == 1, refused.stderr
    assert await describe_or_none(client, sid) is None
    empty_env = await cli(cli_env | {"CRONWARDEN_ACTOR": " "}, "schedules", "apply", str(path))
    assert empty_env.code == 2 and "CRONWARDEN_ACTOR is empty" in empty_env.stderr, empty_env
    assert await describe_or_none(client, sid) is None

    assert (await cli(cli_env, "schedules", "apply", str(path))).code == 0
    before = await rows(pool)
    assert len(before) == 1
    refused = await cli(cli_env, "schedules", "pause", sid, "--actor", "")
    assert refused.code == 2, refused
    assert not (await client.get_schedule_handle(sid).describe()).schedule.state.paused
    # Commands that fail: no such schedule.
    ghost = new_id("ghost")
    for command in (
        ["schedules", "pause", ghost],
        ["schedules", "unpause", ghost],
        ["schedules", "trigger", ghost],
        ["schedules", "delete", ghost, "--yes"],
    ):
        failed = await cli(cli_env, *command, "--actor", "alice")
        assert failed.code != 0, (command, failed)
    assert await rows(pool) == before


async def test_a_trigger_without_postgres_runs_and_says_it_is_not_recorded(
    tmp_path: Path, client: Client, cli_env: dict[str, str], worker: Worker
) -> None:
    sid = made("nopg")
    assert (await cli(cli_env, "schedules", "apply", str(schedule_file(tmp_path, sid)))).code == 0
    away = cli_env | {"CRONWARDEN_DATABASE_URL": f"postgresql://nobody@127.0.0.1:{free_port()}/x"}
    triggered = await cli(away, "schedules", "trigger", sid, "--json")
    assert triggered.code == 0, triggered
    assert json.loads(triggered.stdout)["logical_key"].startswith(f"{sid}@")
    assert "not recorded in the change log" in triggered.stderr, triggered


async def test_a_trigger_with_args_records_their_digest(
    tmp_path: Path, pool: asyncpg.Pool, cli_env: dict[str, str], worker: Worker
) -> None:
    sid = made("withargs")
    assert (await cli(cli_env, "schedules", "apply", str(schedule_file(tmp_path, sid)))).code == 0
    triggered = await cli_json(
        cli_env, "schedules", "trigger", sid, "--args", '{"sleep": 0}', "--reason", "one-off"
    )
    [row] = [r for r in await rows(pool, sid) if r["action"] == "trigger"]
    assert row["reason"] == "one-off"
    assert row["details"]["logical_key"] == triggered["logical_key"]
    assert row["details"]["args_digest"] == triggered["args_digest"]


async def test_a_backfill_that_replays_records_its_window_and_counts(
    client: Client, pool: asyncpg.Pool, cli_env: dict[str, str], task_queue: str, worker: Worker
) -> None:
    sid = new_id("filled")
    await apply_definitions(client, pool, [definition(sid, every="1s")], task_queue=task_queue)
    handle = client.get_schedule_handle(sid)
    try:
        # Paused in Temporal alone (no operator pause): its fires from now on are missing.
        await handle.pause(note="test")
        description = await handle.describe()
        for action in description.info.running_actions:
            if isinstance(action, ScheduleActionExecutionStartWorkflow):
                await client.get_workflow_handle(action.workflow_id).terminate()
        start = description.info.created_at.replace(microsecond=0)
        end = start + timedelta(seconds=4)

        async def passed() -> bool:
            return datetime.now(UTC) > end + timedelta(seconds=1)

        await wait_for(passed, timeout=30, what="the window to pass")
        window = ["--start", iso(start), "--end", iso(end)]
        dry = await cli(cli_env, "backfill", "run", sid, *window, "--include-paused", "--dry-run")
        assert dry.code == 0, dry
        assert await rows(pool) == []  # a dry run changes nothing
        ran = await cli_json(
            cli_env,
            "backfill",
            "run",
            sid,
            *window,
            "--include-paused",
            "--yes",
            "--actor",
            "oncall",
            "--reason",
            "INC-42",
        )
        assert ran["summary"]["replayed"] >= 3
        # Again: every key is done, no run starts, no row.
        again = await cli_json(cli_env, "backfill", "run", sid, *window, "--include-paused")
        assert again["summary"]["replayed"] == 0
    finally:
        await handle.delete()
    [row] = await rows(pool)
    assert (row["action"], row["actor"], row["reason"]) == ("backfill", "oncall", "INC-42")
    assert row["details"]["counts"] == ran["summary"]
    assert row["details"]["window"] == ran["window"]


async def test_audit_log_filters_by_schedule_and_since_and_prints_text_and_json(
    pool: asyncpg.Pool, cli_env: dict[str, str]
) -> None:
    a, b = new_id("a"), new_id("b")
    now = await pool.fetchval("SELECT now()")
    for at, sid, actor in (
        (now - timedelta(days=3), a, "old"),
        (now - timedelta(hours=1), a, "recent"),
        (now - timedelta(minutes=5), b, "other"),
        (now - timedelta(minutes=1), None, "filer"),
    ):
        await pool.execute(
            "INSERT INTO cronwarden.change_log (at, actor, action, schedule_id, reason, details)"
            " VALUES ($1, $2, 'pause', $3, 'why', '{\"n\": 1}')",
            at,
            actor,
            sid,
        )

    async def actors(*args: str) -> list[str]:
        return [c["actor"] for c in (await cli_json(cli_env, "audit", "log", *args))["changes"]]

    assert await actors() == ["filer", "other", "recent", "old"]
    assert await actors(a) == ["recent", "old"]
    assert await actors(a, "--since", "2d") == ["recent"]
    assert await actors("--since", iso(now - timedelta(minutes=10))) == ["filer", "other"]
    assert await actors("--limit", "1") == ["filer"]
    assert await actors(new_id("none")) == []

    text = await cli(cli_env, "audit", "log", a)
    assert text.code == 0, text
    lines = text.stdout.splitlines()
    assert len(lines) == 2 and all(a in line and "reason: why" in line for line in lines)
    assert "by recent" in lines[0] and "n=1" in lines[0]
    everything = await cli(cli_env, "audit", "log")
    assert "(file)" in everything.stdout

    for bad in (["--since", "yesterday-ish"], ["--since", "3x"], ["--limit", "0"]):
        refused = await cli(cli_env, "audit", "log", *bad)
        assert refused.code == 2, (bad, refused)
        assert refused.stdout == ""


async def test_audit_of_a_schedule_id_still_audits_its_fires(
    tmp_path: Path, cli_env: dict[str, str]
) -> None:
    sid = made("audited")
    assert (await cli(cli_env, "schedules", "apply", str(schedule_file(tmp_path, sid)))).code == 0
    as_before = await cli_json(cli_env, "audit", sid, "--since", "1h")
    spelled_out = await cli_json(cli_env, "audit", "fires", sid, "--since", "1h")
    options_first = await cli_json(cli_env, "audit", "--since", "1h", sid)
    for audited in (as_before, spelled_out, options_first):
        assert audited["schedule_id"] == sid and audited["missing"] == 0
    text = await cli(cli_env, "audit", sid)
    assert text.code == 0 and f"{sid}: window" in text.stdout, text


async def test_the_status_page_lists_a_schedules_last_changes_as_text(
    client: Client, pool: asyncpg.Pool, database: str, schedule_id: str
) -> None:
    await pool.execute(
        "INSERT INTO cronwarden.heartbeats (schedule_id, next_expected_at)"
        " VALUES ($1, now() + interval '1 hour')",
        schedule_id,
    )

    async def temporal() -> Client:
        return client

    # The monitor's own app and page, on a port of the test's.
    page = StatusPage(database, temporal, access=PageAccess("local"), links=None)
    port = free_port()
    path = f"/schedules/{schedule_id}"
    try:
        async with serve_monitor(
            monitor_app(Metrics(), healthy=lambda: True, page=page), host="127.0.0.1", port=port
        ):
            status, empty = await http_get_text(port, path)
            assert status == 200 and 'id="changes"' in empty and "No change recorded" in empty
            async with pool.acquire() as conn:
                who = change_log.Who(actor="<b>mallory</b>", reason="<script>alert(1)</script>")
                for n in range(12):
                    entry = change_log.Entry("pause", schedule_id, {"n": n, "x": "<i>"})
                    await change_log.record(conn, who, [entry])
                # Another schedule's change is not this page's.
                await change_log.record(conn, who, [change_log.Entry("delete", f"{schedule_id}-x")])
            page.forget_answers()  # the page serves one read for a few seconds
            status, html = await http_get_text(port, path)
    finally:
        await page.close()
    assert status == 200
    assert html.count('data-action="pause"') == 10
    assert 'data-action="delete"' not in html
    assert "<script>alert(1)</script>" not in html and "<b>mallory</b>" not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html and "&lt;b&gt;mallory&lt;/b&gt;" in html
    assert "<i>" not in html
    # Newest first: the last recorded (n=11) before the oldest shown (n=2).
    assert html.index("<code>n</code> 11") < html.index("<code>n</code> 2<")
