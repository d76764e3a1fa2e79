"""`backfill plan`: the fire times a schedule should have run in a window and has no outbox
record for.

Expected times are Temporal's own evaluation of the schedule's spec (ListScheduleMatchingTimes):
cronwarden never evaluates a cron itself. The plan is a stream: one page of matching times (at
most 1000) becomes one set-based outbox query, and only the missing times are kept, as 8-byte
integers. A year of minutely fires is planned without ever holding a Python object per key.
"""

from __future__ import annotations

import asyncio
import contextlib
from array import array
from bisect import bisect_left
from collections.abc import AsyncGenerator, Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
from google.protobuf.timestamp_pb2 import Timestamp
from temporalio.api.workflowservice.v1 import ListScheduleMatchingTimesRequest
from temporalio.client import Client, ScheduleActionStartWorkflow, ScheduleDescription

from cronwarden.activities.contract import format_fire_time
from cronwarden.backfill.spec_history import Applied, segments
from cronwarden.backfill.window import Window
from cronwarden.schedules.apply import NotManaged, describe_or_none, is_managed
from cronwarden.schedules.inventory import no_such_schedule
from cronwarden.schedules.preview import scratch_schedule
from cronwarden.store import definitions, outbox
from cronwarden.workflows.scheduled_run import WORKFLOW_NAME, ScheduledRunInput


@dataclass(frozen=True)
class ManagedSchedule:
    """What backfill and audit need from a described cronwarden schedule."""

    schedule_id: str
    description: ScheduleDescription
    run_input: ScheduledRunInput
    """The input the schedule's action starts its runs with (what replays start with too)."""
    task_queue: str
    execution_timeout: timedelta | None

    @property
    def created_at(self) -> datetime:
        return self.description.info.created_at


async def load_managed(client: Client, schedule_id: str) -> ManagedSchedule:
    """Describe the schedule; refuse one that cronwarden did not create (its runs are not ours
    to replay, and its outbox rows, if any, would mean nothing)."""
    desc = await describe_or_none(client, schedule_id)
    if desc is None:
        raise await no_such_schedule(client, schedule_id)
    action = desc.schedule.action
    if (
        not await is_managed(desc)
        or not isinstance(action, ScheduleActionStartWorkflow)
        or action.workflow != WORKFLOW_NAME
        or len(action.args) != 1
    ):
        raise NotManaged(
            f"schedule '{schedule_id}' was not created by cronwarden: backfill and audit only "
            "work on schedules that `cronwarden schedules apply` manages"
        )
    # Described schedules carry raw payloads: decode through the client's data converter, so a
    # payload codec (encryption) configured on the client is applied the way the worker does.
    [run_input] = await client.data_converter.decode(list(action.args), [ScheduledRunInput])
    assert isinstance(run_input, ScheduledRunInput)
    return ManagedSchedule(
        schedule_id=schedule_id,
        description=desc,
        run_input=run_input,
        task_queue=action.task_queue,
        execution_timeout=action.execution_timeout,
    )


async def matching_times(
    client: Client, schedule_id: str, window: Window
) -> AsyncGenerator[list[int], None]:
    """Temporal's matching times in the window, as pages of epoch seconds, ascending, each
    time once.

    The server answers times in (start_time, end_time]: start exclusive, end inclusive, at most
    1000 per call (service/worker/scheduler handleListMatchingTimesQuery). Asking from one
    second before the window's start therefore includes a fire at exactly `start` (fire times
    are whole seconds), and the next page asks from the last time returned, which it excludes.
    We stop on an empty page rather than on a short one, so a server that caps pages lower than
    1000 cannot end the stream early.

    Defensive against servers that do not keep that contract (older ones could answer the same
    time again and again): a time not later than the one before is dropped, so a page is
    counted after de-duplication, and a page whose last time does not move past where it was
    asked from ends the stream instead of asking the same question for ever.
    """
    if window.empty:
        return
    after = _timestamp(window.start - timedelta(seconds=1))
    end = _timestamp(window.end)
    start_s, end_s = int(window.start.timestamp()), int(window.end.timestamp())
    previous = start_s - 1
    while True:
        response = await client.workflow_service.list_schedule_matching_times(
            ListScheduleMatchingTimesRequest(
                namespace=client.namespace, schedule_id=schedule_id, start_time=after, end_time=end
            )
        )
        times = response.start_time
        if not times:
            return
        # Fire times carry no fraction without jitter, and cronwarden sets none; the key
        # truncates to the second exactly like this.
        page = [t.seconds for t in times]
        # A page as the contract says (ascending, each once, inside the window) is taken whole;
        # these checks run in C, where a loop per time was most of the client's CPU on a year.
        if not (
            previous < page[0]
            and page[-1] <= end_s
            and sorted(page) == page
            and len(set(page)) == len(page)
        ):
            page = _forward_only(page, previous, end_s)
        if page:
            previous = page[-1]
            yield page
        last = times[-1]
        if (last.seconds, last.nanos) <= (after.seconds, after.nanos) or last.seconds >= end_s:
            return
        after = last


def _forward_only(seconds: list[int], previous: int, end_s: int) -> list[int]:
    """The times later than every time before them, up to `end_s`: what a server that answers
    out of order or repeats itself leaves of a page."""
    page = []
    for s in seconds:
        if previous < s <= end_s:
            page.append(s)
            previous = s
    return page


class FireTimes:
    """Fire times held as epoch seconds, ascending, 8 bytes each: a year of minutely fires is
    4 MiB, where a list of datetimes would be over 20. Iterated and tested as aware datetimes."""

    def __init__(self, seconds: Iterable[int] = ()) -> None:
        self.seconds = seconds if isinstance(seconds, array) else array("q", seconds)

    def __len__(self) -> int:
        return len(self.seconds)

    def __iter__(self) -> Iterator[datetime]:
        return (datetime.fromtimestamp(s, UTC) for s in self.seconds)

    def __contains__(self, value: object) -> bool:
        if not isinstance(value, datetime) or value.tzinfo is None or value.microsecond:
            return False
        s = int(value.timestamp())
        i = bisect_left(self.seconds, s)
        return i < len(self.seconds) and self.seconds[i] == s

    def keys(self, schedule_id: str) -> Iterator[str]:
        return keys_of(schedule_id, self.seconds)


@dataclass
class Plan:
    schedule_id: str
    window: Window
    """The window actually planned: clamped to the schedule's creation time."""
    expected: int
    done: int
    missing: array[int]
    """Fire times without an outbox record, epoch seconds, ascending."""

    def counts_json(self) -> dict[str, Any]:
        return {
            "schedule_id": self.schedule_id,
            "window": self.window.as_json(),
            "expected": self.expected,
            "done": self.done,
            "missing": len(self.missing),
        }

    def missing_times(self) -> Iterator[datetime]:
        """One at a time: a replay of a whole year holds no datetime per key."""
        return (datetime.fromtimestamp(s, UTC) for s in self.missing)

    def missing_keys(self) -> list[str]:
        return list(self.iter_missing_keys())

    def iter_missing_keys(self) -> Iterator[str]:
        """The missing keys one at a time, for output written as it goes."""
        return keys_of(self.schedule_id, self.missing)


def keys_of(
    schedule_id: str, seconds: Iterable[int], *, prefix: str | None = None
) -> Iterator[str]:
    """`logical_key(schedule_id, t)` (or `{prefix}{time}`) for each fire time, in epoch seconds.

    The same text as `logical_key`, built without a datetime and a strftime per key: the date
    part is formatted once per day (times come ascending, so once per run of a day's keys) and
    the clock part from integer arithmetic. A year's 525,600 keys take a fraction of the time.
    """
    head = f"{schedule_id}@" if prefix is None else prefix
    day = None
    date = ""
    for s in seconds:
        days, rest = divmod(s, _DAY)
        if days != day:
            day = days
            # Midnight's key text without its clock: whatever width the year is written in.
            date = format_fire_time(datetime.fromtimestamp(days * _DAY, UTC))[: -len(_MIDNIGHT)]
        hours, rest = divmod(rest, 3600)
        minutes, secs = divmod(rest, 60)
        yield f"{head}{date}{hours:02d}:{minutes:02d}:{secs:02d}Z"


_DAY = 86_400
_MIDNIGHT = "00:00:00Z"


async def plan(
    client: Client, pool: asyncpg.Pool, schedule: ManagedSchedule, window: Window
) -> Plan:
    """The plan for the window, clamped to the schedule's creation: no fire was due before."""
    return await plan_window(
        client, pool, schedule.schedule_id, window.clamped_to(schedule.created_at)
    )


async def plan_window(client: Client, pool: asyncpg.Pool, schedule_id: str, window: Window) -> Plan:
    """Expected minus done over exactly `window`: one matching-times page, one query."""
    async with pool.acquire() as conn:
        return await plan_on(client, conn, schedule_id, window)


async def plan_on(client: Client, conn: Any, schedule_id: str, window: Window) -> Plan:
    """`plan_window` on one connection: inside a REPEATABLE READ transaction every page (and
    whatever the caller reads after) sees one snapshot of the outbox.

    Each part of the window is judged by the definition in force then (schedules/spec_history):
    the live schedule answers for its own definition, a paused scratch copy for an older one.
    """
    result = Plan(schedule_id, window, expected=0, done=0, missing=array("q"))
    async for page in expected_pages(client, conn, schedule_id, window):
        missing = await outbox.missing_fire_times(conn, schedule_id, page)
        result.expected += len(page)
        result.done += len(page) - len(missing)
        result.missing.extend(missing)
    return result


async def expected_pages(
    client: Client, conn: Any, schedule_id: str, window: Window
) -> AsyncGenerator[list[int], None]:
    """The nominal fire times (epoch seconds, ascending, in pages) the schedule should have
    produced in `window`, each part judged by the definition in force then.

    The live schedule answers for its own definition unless that definition has jitter: Temporal
    answers jittered times, which name no logical key (a replay of one would apply the job a
    second time under another key), so a scratch copy without jitter answers instead.
    """
    history = [Applied(*row) for row in await definitions.history(conn, schedule_id)]
    live = history[-1] if history else None
    for segment in segments(history, window):
        applied = segment.applied
        if applied is None or (applied is live and applied.rebuilt().jitter is None):
            async for page in _prefetched(matching_times(client, schedule_id, segment.window)):
                yield page
            continue
        async with scratch_schedule(
            client, applied.rebuilt(), task_queue=applied.task_queue
        ) as scratch_id:
            async for page in _prefetched(matching_times(client, scratch_id, segment.window)):
                yield page


async def _prefetched(pages: AsyncGenerator[list[int], None]) -> AsyncGenerator[list[int], None]:
    """`pages`, with the next one fetched from Temporal while the caller works on the current
    one (the plan subtracts it in Postgres): the two round trips overlap, and at most two pages
    are held at once."""
    upcoming = asyncio.ensure_future(anext(pages, None))
    try:
        while (page := await upcoming) is not None:
            upcoming = asyncio.ensure_future(anext(pages, None))
            yield page
    finally:
        if not upcoming.done():
            upcoming.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await upcoming
        await pages.aclose()


def _timestamp(value: datetime) -> Timestamp:
    ts = Timestamp()
    ts.FromDatetime(value.astimezone(UTC))
    return ts
