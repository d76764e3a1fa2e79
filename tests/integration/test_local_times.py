"""Every view of a zoned schedule gives its local time beside UTC, against real Temporal and
Postgres: `schedules apply --dry-run`, `list`, `describe`, `status` (with the zone database and
the horizon warning), `backfill plan` and `audit`, the status page and the pages sent to the
sinks. A UTC schedule's output keeps its shape: no local field, no parentheses."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import asyncpg
import pytest
import pytest_asyncio
from temporalio.client import Client, ScheduleActionExecutionStartWorkflow

from cronwarden.monitor.grids import GridCache
from cronwarden.monitor.page import render
from cronwarden.monitor.status_view import PageLimits, read_one, read_page, read_ranking
from cronwarden.schedules import mapping
from cronwarden.schedules.apply import apply_definitions, describe_or_none
from cronwarden.schedules.inventory import schedule_ids
from cronwarden.schedules.status import status_report, zone_lines
from cronwarden.schedules.zones import ZONE_DB_VERSION
from tests.support.cli import cli, cli_json, iso
from tests.support.monitor import events, expected_ago, monitoring, passes, stage
from tests.support.monitor import receiver as receiver
from tests.support.receiver import Receiver
from tests.support.schedules import definition, new_id, write_schedules_file
from tests.support.waiting import clock_past, wait_for

pytestmark = pytest.mark.integration


ZONE = "America/New_York"
NEW_YORK = ZoneInfo(ZONE)


def local_reading(utc: str) -> str:
    """What a view must show beside `utc` for a New York schedule, worked out here."""
    local = datetime.fromisoformat(utc).astimezone(NEW_YORK)
    return f"{local.isoformat(timespec='seconds')} {local.tzname()}"


def assert_wall_0230(utc: str, local: str | None) -> None:
    """`local` is `utc` on New York's wall clock, and the daily 02:30 fires at 02:30 there (03:00
    on the spring-forward day, when 02:30 does not exist)."""
    assert local == local_reading(utc)
    assert local[11:16] in ("02:30", "03:00"), local


def zone_keys(value: Any) -> list[str]:
    """Every key anywhere in a JSON document that only a zoned schedule may carry."""
    found: list[str] = []
    if isinstance(value, dict):
        for key, item in value.items():
            if key.endswith("_local") or key in ("timezone", "zone_db", "horizon_warning"):
                found.append(key)
            found += zone_keys(item)
    elif isinstance(value, list):
        for item in value:
            found += zone_keys(item)
    return found


@pytest_asyncio.fixture(loop_scope="session")
async def cleanup(client: Client) -> AsyncIterator[list[str]]:
    ids: list[str] = []
    yield ids
    for sid in ids:
        desc = await describe_or_none(client, sid)
        if desc is None:
            continue
        # A fire waiting for a worker is ended with its schedule: nothing is left to run later.
        for action in desc.info.running_actions:
            if isinstance(action, ScheduleActionExecutionStartWorkflow):
                await client.get_workflow_handle(action.workflow_id).terminate("test over")
        await client.get_schedule_handle(sid).delete()


def two_schedules_file(tmp_path: Path, zoned: str, plain: str) -> Path:
    entries = "".join(
        f"  - id: {sid}\n    job: probe\n    cron: '30 2 * * *'\n{zone}    args: {{sleep: 0}}\n"
        for sid, zone in ((zoned, f"    timezone: {ZONE}\n"), (plain, ""))
    )
    return write_schedules_file(tmp_path, "schedules:\n" + entries)


async def test_the_cli_views_show_local_time_beside_utc_and_leave_utc_schedules_as_they_were(
    tmp_path: Path, cli_env: dict[str, str], client: Client, cleanup: list[str]
) -> None:
    zoned, plain = new_id("ny"), new_id("utc")
    cleanup += [zoned, plain]
    path = two_schedules_file(tmp_path, zoned, plain)

    dry = await cli(cli_env, "schedules", "apply", "--dry-run", "--json", str(path))
    assert dry.code == 0, dry.stderr
    changes = {c["schedule_id"]: c for c in json.loads(dry.stdout)["changes"]}
    ny = changes[zoned]
    assert ny["timezone"] == ZONE
    assert ny["next_fires"] and len(ny["next_fires_local"]) == len(ny["next_fires"])
    assert_wall_0230(ny["next_fire"], ny["next_fire_local"])
    for utc, local in zip(ny["next_fires"], ny["next_fires_local"], strict=True):
        assert_wall_0230(utc, local)
    assert zone_keys(changes[plain]) == []
    text = await cli(cli_env, "schedules", "apply", "--dry-run", str(path))
    assert f"({local_reading(ny['next_fires'][0])})" in text.stdout, text.stdout
    [plain_line] = [line for line in text.stdout.splitlines() if line.startswith(plain)]
    assert "(" not in plain_line.partition("next fires")[2], plain_line

    applied = await cli(cli_env, "schedules", "apply", str(path))
    assert applied.code == 0, applied.stderr

    async def both_listed() -> bool:
        return {zoned, plain} <= set(await schedule_ids(client))

    await wait_for(both_listed, timeout=30, what="both schedules in Temporal's list")
    listed, described, described_plain, status, status_text, describe_text = await asyncio.gather(
        cli_json(cli_env, "schedules", "list"),
        cli_json(cli_env, "schedules", "describe", zoned),
        cli_json(cli_env, "schedules", "describe", plain),
        cli_json(cli_env, "status"),
        cli(cli_env, "status"),
        cli(cli_env, "schedules", "describe", zoned),
    )

    rows = {r["schedule_id"]: r for r in listed["schedules"]}
    assert rows[zoned]["timezone"] == ZONE
    assert f"timezone {ZONE}" in rows[zoned]["spec"]
    assert_wall_0230(rows[zoned]["next_fire"], rows[zoned]["next_fire_local"])
    assert set(rows[plain]) == {
        "schedule_id",
        "managed",
        "job",
        "spec",
        "overlap",
        "paused",
        "note",
        "next_fire",
    }

    assert described["timezone"] == ZONE
    for utc, local in zip(
        described["next_fire_times"], described["next_fire_times_local"], strict=True
    ):
        assert_wall_0230(utc, local)
    beat = described["heartbeat"]
    assert beat["next_expected_at_local"] == local_reading(beat["next_expected_at"])
    assert beat["last_success_at_local"] is None  # never ran: the UTC field is null too
    assert zone_keys(described_plain) == []
    assert f"({local_reading(described['next_fire_times'][0])})" in describe_text.stdout
    assert f"timezone {ZONE}" in describe_text.stdout

    by_id = {r["schedule_id"]: r for r in status["schedules"]}
    assert status["zone_db"] == ZONE_DB_VERSION
    ny_row = by_id[zoned]
    assert ny_row["timezone"] == ZONE
    assert ny_row["next_expected_at_local"] == local_reading(ny_row["next_expected_at"])
    assert ny_row["horizon_warning"] is None  # compiled years ahead of now
    assert zone_keys(by_id[plain]) == []
    assert f"zone database: tzdata {ZONE_DB_VERSION}" in status_text.stdout


async def test_status_warns_of_a_zoned_schedule_whose_compiled_horizon_nears(
    client: Client,
    pool: asyncpg.Pool,
    task_queue: str,
    cleanup: list[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    stale, fresh, plain = new_id("stale"), new_id("fresh"), new_id("utc")
    cleanup += [stale, fresh, plain]
    zoned = {"every": None, "cron": "30 2 * * *", "timezone": ZONE}
    await apply_definitions(
        client, pool, [definition(fresh, **zoned), definition(plain)], task_queue=task_queue
    )
    # Applied two years ago: its entries end at the turn of this year (or ended already).
    now = datetime.now(UTC)
    monkeypatch.setattr(mapping, "clock", lambda: now - timedelta(days=2 * 366))
    stale_defn = definition(stale, **{**zoned, "cron": "45 2 * * *"})
    await apply_definitions(client, pool, [stale_defn], task_queue=task_queue)

    report = await status_report(client, pool, now=now)
    rows = {r.schedule_id: r for r in report.rows}
    warning = rows[stale].horizon_warning
    assert warning is not None and "re-apply the schedule file to compile further" in warning
    assert f"warning: {stale}: {warning}" in zone_lines(report)
    assert rows[fresh].horizon_warning is None
    assert report.as_json()["zone_db"] == ZONE_DB_VERSION
    assert zone_keys(rows[plain].as_json()) == []


async def test_backfill_plan_and_audit_show_each_keys_local_time(
    client: Client,
    pool: asyncpg.Pool,
    task_queue: str,
    cli_env: dict[str, str],
    cleanup: list[str],
) -> None:
    sid = new_id("ny-every-second")
    cleanup.append(sid)
    defn = definition(
        sid, every=None, cron="* * * * * * *", timezone=ZONE, catchup_window="10s", overlap="skip"
    )
    await apply_definitions(client, pool, [defn], task_queue=task_queue)
    handle = client.get_schedule_handle(sid)
    created_at = (await handle.describe()).info.created_at
    # No worker: the first fire waits for one, every later one is skipped or never committed.
    await wait_for(lambda: clock_past(created_at + timedelta(seconds=4)), timeout=20, what="fires")
    await handle.pause(note="test: freeze the window")
    end = datetime.now(UTC)
    window = ("--start", iso(created_at), "--end", iso(end))

    planned, audited = await asyncio.gather(
        cli_json(cli_env, "backfill", "plan", sid, *window),
        cli(cli_env, "audit", sid, "--since", "5m"),
    )
    assert planned["timezone"] == ZONE
    keys, locals_ = planned["missing_keys"], planned["missing_keys_local"]
    assert keys and len(locals_) == len(keys)
    for key, local in zip(keys, locals_, strict=True):
        assert local == local_reading(key.partition("@")[2])
    assert planned["causes"]
    for group in planned["causes"]:
        assert group["first_local"] == local_reading(group["first"].partition("@")[2])
        assert group["last_local"] == local_reading(group["last"].partition("@")[2])
    assert audited.code == 0, audited.stderr
    missing_lines = [line for line in audited.stdout.splitlines() if "  missing " in line]
    assert missing_lines
    for line in missing_lines:
        key = line.split()[1]
        assert line.strip() == f"missing {key} ({local_reading(key.partition('@')[2])})"


async def test_the_status_page_shows_local_time_beside_utc_from_postgres_alone(
    client: Client, pool: asyncpg.Pool, task_queue: str, cleanup: list[str]
) -> None:
    zoned, plain = new_id("ny"), new_id("utc")
    cleanup += [zoned, plain]
    await apply_definitions(
        client,
        pool,
        [
            definition(zoned, every=None, cron="30 2 * * *", timezone=ZONE),
            definition(plain, every=None, cron="30 2 * * *"),
        ],
        task_queue=task_queue,
    )
    await pool.execute(
        "UPDATE cronwarden.heartbeats SET last_success_at = now() - interval '1 hour'"
        " WHERE schedule_id = ANY($1::text[])",
        [zoned, plain],
    )
    # An empty grid cache: nothing here may ask Temporal (a page load reads Postgres only).
    grids = GridCache()
    ranking = await read_ranking(pool, grids)
    limits = PageLimits(page_size=1000)
    overview = render(
        "overview.html",
        links=None,
        root="./",
        view=await read_page(pool, grids, ranking, page=1, limits=limits),
    ).decode()
    pages = {}
    for sid in (zoned, plain):
        view = await read_one(pool, grids, ranking, sid, limits=limits)
        assert view is not None
        [s] = view.schedules
        pages[sid] = (s, render("schedule.html", links=None, view=view, s=s, root="../").decode())

    s, html = pages[zoned]
    assert s.timezone == ZONE
    assert s.next_expected_at is not None and s.last_success_at is not None
    for instant in (s.next_expected_at, s.last_success_at):
        local = local_reading(instant.astimezone(UTC).isoformat())
        assert f"({local})" in html
        assert local in overview
    assert f"Wall times in {ZONE}" in html
    p, plain_html = pages[plain]
    assert p.timezone is None
    assert 'class="local"' not in plain_html and "Wall times in" not in plain_html
    row = overview.partition(f'data-schedule="{plain}"')[2].partition("</tr>")[0]
    assert row and 'class="local"' not in row


async def test_an_overdue_page_names_the_expected_fire_in_local_time_too(
    client: Client,
    pool: asyncpg.Pool,
    database: str,
    task_queue: str,
    receiver: Receiver,
    cleanup: list[str],
) -> None:
    zoned, plain = new_id("ny"), new_id("utc")
    cleanup.append(zoned)
    await apply_definitions(
        client,
        pool,
        [definition(zoned, every=None, cron="30 2 * * *", timezone=ZONE)],
        task_queue=task_queue,
    )
    await expected_ago(pool, zoned, "1 hour")
    await stage(pool, plain)
    async with monitoring(database, receiver) as monitor:
        await passes(monitor)

        async def both_paged() -> bool:
            return bool(events(receiver, schedule_id=zoned) and events(receiver, schedule_id=plain))

        await wait_for(both_paged, timeout=30, what="both overdue pages")
    [page] = events(receiver, schedule_id=zoned)
    details = page["details"]
    local = local_reading(details["next_expected_at"])
    assert details["timezone"] == ZONE and details["next_expected_local"] == local
    assert f"expected at {details['next_expected_at']} ({local})" in page["summary"]
    [utc_page] = events(receiver, schedule_id=plain)
    assert zone_keys(utc_page) == []
    assert f"expected at {utc_page['details']['next_expected_at']} (grace" in utc_page["summary"]
