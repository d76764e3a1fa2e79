"""The matching-times stream across Temporal's 1000-per-call pages, against a real schedule:
every fire of a window longer than two pages is counted once, both ends included."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
import pytest
import pytest_asyncio
from temporalio.client import Client

from cronwarden.activities.contract import logical_key
from cronwarden.backfill.plan import load_managed, matching_times, plan, plan_window
from cronwarden.backfill.window import Window
from cronwarden.schedules.apply import apply_definitions
from cronwarden.store import outbox
from tests.support.schedules import definition

pytestmark = pytest.mark.integration

# 2601 fires of `every: 1s`: three pages (1000, 1000, 601), two page boundaries.
SPAN_SECONDS = 2600


@pytest_asyncio.fixture(loop_scope="session")
async def every_second(
    client: Client, pool: asyncpg.Pool, task_queue: str, schedule_id: str
) -> AsyncIterator[Window]:
    """A paused `every: 1s` schedule, and a window of 2601 whole seconds that ends before the
    schedule was created. Temporal evaluates the spec over any range, so the stream can be
    asked about the past without waiting 43 minutes; `plan` would clamp it away."""
    await apply_definitions(
        client, pool, [definition(schedule_id, every="1s")], task_queue=task_queue
    )
    handle = client.get_schedule_handle(schedule_id)
    try:
        await handle.pause(note="test")
        created_at = (await handle.describe()).info.created_at
        end = created_at.replace(microsecond=0) - timedelta(minutes=5)
        yield Window(end - timedelta(seconds=SPAN_SECONDS), end)
    finally:
        await handle.delete()


def every_second_of(window: Window) -> list[int]:
    """The fires of `every: 1s` in the window, computed without Temporal."""
    return list(range(int(window.start.timestamp()), int(window.end.timestamp()) + 1))


async def test_the_matching_times_stream_counts_every_fire_of_several_pages_once(
    client: Client, schedule_id: str, every_second: Window
) -> None:
    window = every_second
    pages = [page async for page in matching_times(client, schedule_id, window)]
    times = [t for page in pages for t in page]
    expected = every_second_of(window)
    assert len(expected) == SPAN_SECONDS + 1 > 2000
    assert len(times) == len(expected)
    assert len(set(times)) == len(times)
    # Fires exactly at the window's start and end are included; the page boundaries (the 1000th
    # and 2000th fire, where the next call starts) are neither lost nor repeated.
    assert times == expected
    assert times[0] == int(window.start.timestamp())
    assert times[-1] == int(window.end.timestamp())
    assert [len(page) for page in pages] == [1000, 1000, 601]


async def test_a_plan_over_several_pages_counts_done_and_missing_across_the_boundaries(
    client: Client, pool: asyncpg.Pool, schedule_id: str, every_second: Window
) -> None:
    window = every_second
    expected = every_second_of(window)
    # Commits on both sides of each page boundary and at both ends of the window.
    done = [expected[i] for i in (0, 999, 1000, 1999, 2000, len(expected) - 1)]
    async with pool.acquire() as conn:
        await _commit(conn, schedule_id, done)

    result = await plan_window(client, pool, schedule_id, window)

    assert result.expected == len(expected)
    assert result.done == len(done)
    assert list(result.missing) == [t for t in expected if t not in set(done)]


async def test_a_plan_clamps_the_window_to_the_schedule_creation(
    client: Client, pool: asyncpg.Pool, schedule_id: str, every_second: Window
) -> None:
    # The same window through `plan`: all of it lies before the schedule existed.
    schedule = await load_managed(client, schedule_id)
    result = await plan(client, pool, schedule, every_second)
    assert result.window.empty
    assert (result.expected, result.done, len(result.missing)) == (0, 0, 0)
    assert result.window.start > schedule.created_at


async def test_a_page_minus_the_outbox_leaves_out_records_at_other_times_of_its_span(
    pool: asyncpg.Pool, schedule_id: str
) -> None:
    page = [1_800_000_000 + 60 * i for i in range(5)]
    # Two fires of the page committed; a manual trigger between two fires and a commit just
    # after the page's span are records of the schedule that the page does not expect.
    committed = [page[1], page[3], page[2] + 30, page[-1] + 60]
    async with pool.acquire() as conn:
        await _commit(conn, schedule_id, committed)
        assert await outbox.missing_fire_times(conn, schedule_id, page) == [
            page[0],
            page[2],
            page[4],
        ]
        assert await outbox.missing_fire_times(conn, schedule_id, page[1:2]) == []
        assert await outbox.missing_fire_times(conn, f"{schedule_id}-other", page) == page
        assert await outbox.missing_fire_times(conn, schedule_id, []) == []


async def _commit(conn: Any, schedule_id: str, fire_times: list[int]) -> None:
    """Outbox records of the schedule at these fire times (epoch seconds)."""
    for seconds in fire_times:
        fire_time = datetime.fromtimestamp(seconds, UTC)
        await conn.execute(
            "INSERT INTO cronwarden.outbox (logical_key, schedule_id, fire_time, attempt, "
            "fencing_token, worker, args_digest) VALUES ($1, $2, $3, 1, 1, 'test', 'x')",
            logical_key(schedule_id, fire_time),
            schedule_id,
            fire_time,
        )
