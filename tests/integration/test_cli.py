"""The `cronwarden` command as scripts see it: exit codes, one-sentence errors, and what
`schedules apply` does (and does not do) to Temporal and Postgres."""

from __future__ import annotations

import json
import re
import uuid
from datetime import timedelta
from pathlib import Path

import asyncpg
import pytest
from temporalio.client import (
    Client,
    Schedule,
    ScheduleActionStartWorkflow,
    ScheduleIntervalSpec,
    ScheduleSpec,
)

from cronwarden.embedded import EmbeddedPostgres
from cronwarden.schedules.apply import describe_or_none
from cronwarden.schedules.preview import PREVIEW_PREFIX
from tests.support.cli import cli
from tests.support.database import fetch
from tests.support.schedules import write_schedules_file
from tests.support.waiting import wait_for

pytestmark = pytest.mark.integration


GOOD = """
  - id: {good}
    job: probe
    every: 10s
"""

# One bad entry each, next to a good one: the whole file must be refused, the good one included.
BAD_ENTRIES = {
    "bad cron": ("cron", '    job: probe\n    cron: "61 * * * *"\n'),
    "bad every": ("every", "    job: probe\n    every: 10x\n"),
    "cron and every": (
        "exactly one of `cron` and `every`",
        '    job: probe\n    cron: "* * * * *"\n    every: 1m\n',
    ),
    "neither cron nor every": ("exactly one of `cron` and `every`", "    job: probe\n"),
    "unknown job": ("unknown job 'no-such-job'", "    job: no-such-job\n    every: 1m\n"),
    "allow_all on a mutating job": (
        "allow_all",
        "    job: probe\n    every: 1m\n    overlap: allow_all\n",
    ),
    "catchup under 10s": (
        "catchup_window",
        "    job: probe\n    every: 1m\n    catchup_window: 5s\n",
    ),
    "hours step that does not tile": (
        "does not tile 24 hours",
        '    job: probe\n    cron: "0 */5 * * *"\n',
    ),
    "minutes step that does not tile": (
        "does not tile 60 minutes",
        '    job: probe\n    cron: "*/7 * * * *"\n',
    ),
    "bad duration": ("timeout", "    job: probe\n    every: 1m\n    timeout: 15 minutes\n"),
    "unknown field": ("unknown field 'retries'", "    job: probe\n    every: 1m\n    retries: 3\n"),
    "a date that does not exist": (
        "never fires: '0 0 30 2 *' asks for day 30 of February, a date that does not exist",
        '    job: probe\n    cron: "0 0 30 2 *"\n',
    ),
    # Years all before its start: it never could fire. (Years gone by alone only finish it.)
    "a year range before its start_at": (
        "never fires: '0 0 1 1 * 2001-2020' names only years before",
        '    job: probe\n    cron: "0 0 1 1 * 2001-2020"\n    start_at: 2021-01-01T00:00:00Z\n',
    ),
    "end_at before start_at": (
        "never fires: its end_at (2030-01-01T00:00:00Z) is not after its start_at "
        "(2031-01-01T00:00:00Z)",
        "    job: probe\n    every: 1m\n    start_at: 2031-01-01T00:00:00Z\n"
        "    end_at: '2030-01-01T00:00:00Z'\n",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_ENTRIES))
async def test_a_file_with_one_bad_entry_applies_nothing_and_exits_2(
    case: str, tmp_path: Path, cli_env: dict[str, str], client: Client
) -> None:
    expected, body = BAD_ENTRIES[case]
    good, bad = f"ok-{uuid.uuid4().hex[:8]}", f"bad-{uuid.uuid4().hex[:8]}"
    path = write_schedules_file(
        tmp_path, "schedules:" + GOOD.format(good=good) + f"  - id: {bad}\n" + body
    )
    result = await cli(cli_env, "schedules", "apply", str(path))
    assert result.code == 2, result
    assert f"schedule '{bad}'" in result.stderr
    assert expected in result.stderr
    assert "nothing applied" in result.stderr
    assert "Traceback" not in result.stderr + result.stdout
    assert good not in result.stderr
    assert await describe_or_none(client, good) is None


async def test_duplicate_ids_are_refused(
    tmp_path: Path, cli_env: dict[str, str], client: Client
) -> None:
    sid = f"dup-{uuid.uuid4().hex[:8]}"
    path = write_schedules_file(
        tmp_path, "schedules:" + GOOD.format(good=sid) + GOOD.format(good=sid)
    )
    result = await cli(cli_env, "schedules", "apply", str(path))
    assert result.code == 2
    assert sid in result.stderr and "entries 1 and 2" in result.stderr
    assert await describe_or_none(client, sid) is None


async def test_apply_creates_then_changes_nothing_then_updates_only_what_changed(
    tmp_path: Path, cli_env: dict[str, str], client: Client, pool: asyncpg.Pool
) -> None:
    sid = f"apply-{uuid.uuid4().hex[:8]}"
    body = f"schedules:\n  - id: {sid}\n    job: probe\n    cron: '0 3 * * *'\n    timeout: 5m\n"
    path = write_schedules_file(tmp_path, body)
    handle = client.get_schedule_handle(sid)
    try:
        dry = await cli(cli_env, "schedules", "apply", "--dry-run", str(path))
        assert dry.code == 0 and f"{sid}: would be created" in dry.stdout
        assert await describe_or_none(client, sid) is None

        first = await cli(cli_env, "schedules", "apply", str(path))
        assert first.code == 0, first
        assert f"{sid}: created" in first.stdout
        desc = await handle.describe()
        beat = await fetch(pool, "SELECT * FROM cronwarden.heartbeats WHERE schedule_id = $1", sid)
        assert beat[0]["next_expected_at"] == desc.info.next_action_times[0]
        assert desc.info.next_action_times[0].hour == 3  # UTC, as written

        second = await cli(cli_env, "schedules", "apply", str(path))
        assert second.code == 0 and f"{sid}: unchanged" in second.stdout
        assert "nothing to change" in second.stdout
        assert (await handle.describe()).info.last_updated_at == desc.info.last_updated_at

        await handle.pause(note="operator: investigating")
        path.write_text(body.replace("timeout: 5m", "timeout: 7m"))
        third = await cli(cli_env, "schedules", "apply", str(path))
        assert third.code == 0 and f"{sid}: updated (timeout)" in third.stdout
        after = await handle.describe()
        # Re-applying a file must not undo an operator's pause.
        assert after.schedule.state.paused is True
    finally:
        await handle.delete()


async def test_a_dry_run_shows_temporals_next_three_fires_of_each_new_or_changed_schedule(
    tmp_path: Path, cli_env: dict[str, str], client: Client
) -> None:
    sid = f"preview-{uuid.uuid4().hex[:8]}"
    body = (
        f"schedules:\n  - id: {sid}\n    job: probe\n    cron: ['0 9 * * *', '0 0 0 1 1 * *']\n"
        "    start_at: 2030-01-01T00:00:00Z\n    exclude: ['2030-01-02']\n"
    )
    path = write_schedules_file(tmp_path, body)
    handle = client.get_schedule_handle(sid)
    try:
        dry = await cli(cli_env, "schedules", "apply", "--dry-run", str(path))
        assert dry.code == 0, dry
        # Both expressions, from start_at on, without the excluded day.
        assert (
            f"{sid}: would be created, next fires 2030-01-01T00:00:00Z, 2030-01-01T09:00:00Z, "
            "2030-01-03T09:00:00Z"
        ) in dry.stdout
        assert await describe_or_none(client, sid) is None

        assert (await cli(cli_env, "schedules", "apply", str(path))).code == 0
        described = await cli(cli_env, "schedules", "describe", sid)
        assert (
            "cron 0 9 * * *; cron 0 0 0 1 1 * *; from 2030-01-01T00:00:00Z; except 2030-01-02"
        ) in described.stdout, described
        path.write_text(body.replace("'2030-01-02'", "'2030-01-01'"))
        changed = await cli(cli_env, "schedules", "apply", "--dry-run", "--json", str(path))
        assert changed.code == 0, changed
        [change] = json.loads(changed.stdout)["changes"]
        assert change["action"] == "updated" and change["changed_fields"] == ["exclude"]
        assert change["next_fires"] == [
            "2030-01-02T09:00:00Z",
            "2030-01-03T09:00:00Z",
            "2030-01-04T09:00:00Z",
        ]
        # The dry run changed nothing, and left no preview schedule behind.
        assert (await handle.describe()).schedule.spec.skip[0].day_of_month[0].start == 2

        async def no_preview_left() -> bool:
            ids = [s.id async for s in await client.list_schedules()]
            return not any(i.startswith(PREVIEW_PREFIX) for i in ids)

        await wait_for(no_preview_left, timeout=15, what="the preview schedules to be gone")
    finally:
        await handle.delete()


async def test_apply_leaves_a_schedule_it_did_not_create_alone(
    tmp_path: Path, cli_env: dict[str, str], client: Client, task_queue: str
) -> None:
    sid = f"foreign-{uuid.uuid4().hex[:8]}"
    handle = await client.create_schedule(
        sid,
        Schedule(
            action=ScheduleActionStartWorkflow("SomeoneElses", id="x", task_queue=task_queue),
            spec=ScheduleSpec(intervals=[ScheduleIntervalSpec(every=timedelta(hours=1))]),
        ),
    )
    try:
        path = write_schedules_file(tmp_path, "schedules:" + GOOD.format(good=sid))
        result = await cli(cli_env, "schedules", "apply", str(path))
        assert result.code == 1
        assert "not created by cronwarden" in result.stderr
        desc = await handle.describe()
        assert isinstance(desc.schedule.action, ScheduleActionStartWorkflow)
        assert desc.schedule.action.workflow == "SomeoneElses"
    finally:
        await handle.delete()


async def test_unreachable_temporal_is_one_sentence_naming_the_address(
    tmp_path: Path, cli_env: dict[str, str]
) -> None:
    path = write_schedules_file(tmp_path, "schedules:" + GOOD.format(good="x-1"))
    env = {**cli_env, "CRONWARDEN_TEMPORAL_ADDRESS": "127.0.0.1:1"}
    result = await cli(env, "schedules", "apply", str(path))
    assert result.code == 1
    assert result.stderr.strip().startswith("error: cannot reach Temporal at 127.0.0.1:1")
    assert "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


async def test_unreachable_postgres_is_one_sentence_without_the_password(
    cli_env: dict[str, str],
) -> None:
    env = {**cli_env, "CRONWARDEN_DATABASE_URL": "postgresql://app:s3cret@127.0.0.1:1/ledger"}
    for command in (["migrate"], ["worker"]):
        result = await cli(env, *command)
        assert result.code == 1, result
        assert "cannot reach Postgres at 127.0.0.1:1/ledger" in result.stderr
        assert "s3cret" not in result.stderr + result.stdout
        assert "Traceback" not in result.stderr


async def test_usage_errors_exit_2(cli_env: dict[str, str], tmp_path: Path) -> None:
    assert (await cli(cli_env, "schedules", "apply")).code == 2
    assert (await cli(cli_env, "no-such-command")).code == 2
    missing = await cli(cli_env, "schedules", "apply", str(tmp_path / "missing.yaml"))
    assert missing.code == 2 and "missing.yaml" in missing.stderr


async def test_a_request_temporal_refuses_is_one_sentence_not_a_traceback(
    tmp_path: Path, cli_env: dict[str, str]
) -> None:
    path = write_schedules_file(tmp_path, "schedules:" + GOOD.format(good="x-2"))
    env = {**cli_env, "CRONWARDEN_NAMESPACE": "no-such-namespace"}
    result = await cli(env, "schedules", "apply", str(path))
    assert result.code == 1, result
    assert result.stderr.startswith("error: ")
    assert "no-such-namespace" in result.stderr
    assert "Traceback" not in result.stderr


async def test_a_job_module_that_fails_to_import_is_one_sentence_and_exit_2(
    tmp_path: Path, cli_env: dict[str, str]
) -> None:
    path = write_schedules_file(tmp_path, "schedules:" + GOOD.format(good="x-3"))
    env = {**cli_env, "CRONWARDEN_JOBS": "tests.support.broken_jobs"}
    result = await cli(env, "schedules", "apply", str(path))
    assert result.code == 2, result
    assert "cannot import job module 'tests.support.broken_jobs'" in result.stderr
    assert "broken on purpose" in result.stderr
    assert "Traceback" not in result.stderr


async def test_apply_before_migrate_says_to_migrate(
    tmp_path: Path, cli_env: dict[str, str], postgres_server: EmbeddedPostgres
) -> None:
    name = f"bare_{uuid.uuid4().hex[:10]}"
    postgres_server.create_database(name)
    sid = f"nomig-{uuid.uuid4().hex[:8]}"
    path = write_schedules_file(tmp_path, "schedules:" + GOOD.format(good=sid))
    env = {**cli_env, "CRONWARDEN_DATABASE_URL": postgres_server.dsn(name)}
    result = await cli(env, "schedules", "apply", str(path))
    assert result.code == 1, result
    assert "cronwarden migrate" in result.stderr
    assert "Traceback" not in result.stderr


async def test_a_worker_without_jobs_refuses_to_start(cli_env: dict[str, str]) -> None:
    env = {k: v for k, v in cli_env.items() if k != "CRONWARDEN_JOBS"}
    result = await cli(env, "worker")
    assert result.code == 2, result
    assert "CRONWARDEN_JOBS is not set" in result.stderr


async def test_monitor_once_prints_one_line_of_what_its_pass_checked_and_found(
    cli_env: dict[str, str], pool: asyncpg.Pool
) -> None:
    async with pool.acquire() as conn:
        await conn.execute(
            "INSERT INTO cronwarden.heartbeats (schedule_id, next_expected_at, grace) "
            "VALUES ('late-one', now() - interval '1 hour', interval '1 minute'), "
            "('on-time', now() + interval '1 hour', interval '1 minute')"
        )
    result = await cli(cli_env, "monitor", "--once")
    assert result.code == 0, result
    assert result.stdout.strip() == (
        "checked 2 schedule(s): 1 overdue, 1 incident(s) opened, 0 resolved, "
        "0 page(s) delivered; 1 incident(s) open"
    ), result


async def test_duration_flags_take_units_and_a_bare_number_is_seconds(
    cli_env: dict[str, str],
) -> None:
    for args in (
        ["monitor", "--once", "--interval", "5s"],
        ["monitor", "--once", "--interval", "2"],
        ["migrate", "--check", "--wait", "1m"],
        ["migrate", "--check", "--wait", "0s"],
        ["migrate", "--check", "--wait", "30"],
    ):
        result = await cli(cli_env, *args)
        assert result.code == 0, (args, result)
    # Past the flag, to the schedule lookup: the bare number was read as seconds.
    window = ("--start", "-1h", "--end", "now")
    bare = await cli(cli_env, "backfill", "run", "no-such-schedule", *window, "--lock-wait", "60")
    assert bare.code == 1 and "no schedule 'no-such-schedule'" in bare.stderr, bare
    for args, flag in (
        (["monitor", "--once", "--interval", "5x"], "--interval"),
        (["monitor", "--once", "--interval", "50ms"], "--interval"),
        (["migrate", "--check", "--wait", "-1s"], "--wait"),
        (["backfill", "run", "no-such-schedule", *window, "--lock-wait", "soon"], "--lock-wait"),
    ):
        result = await cli(cli_env, *args)
        assert result.code == 2, (args, result)
        assert flag in result.stderr and "is not a duration" in result.stderr, result
        assert "Traceback" not in result.stderr


async def test_an_unreachable_default_database_points_at_the_dev_settings(
    cli_env: dict[str, str],
) -> None:
    # A second shell beside `cronwarden dev` that never loaded .cronwarden/env.
    env = {k: v for k, v in cli_env.items() if k != "CRONWARDEN_DATABASE_URL"}
    for command in (["migrate"], ["status"]):
        result = await cli(env, *command)
        assert result.code == 1, result
        assert "cannot reach Postgres at 127.0.0.1:5432/cronwarden" in result.stderr
        assert "set -a; . .cronwarden/env; set +a" in result.stderr, result
    # A DSN the user chose gets no such hint: it is not the dev stack they meant.
    chosen = await cli(
        cli_env | {"CRONWARDEN_DATABASE_URL": "postgresql://x@127.0.0.1:1/y"}, "migrate"
    )
    assert chosen.code == 1 and ".cronwarden/env" not in chosen.stderr, chosen


async def test_errors_print_times_in_whole_seconds(cli_env: dict[str, str]) -> None:
    result = await cli(cli_env, "backfill", "plan", "any", "--start", "now", "--end", "now")
    assert result.code == 2, result
    assert re.search(r"its end \(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ\)", result.stderr), result
