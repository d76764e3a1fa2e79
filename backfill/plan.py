"""`backfill plan`: the fire times a schedule should have run in a window and has no outbox
record for.

Expected times are Temporal's own evaluation of the spec in force (ListScheduleMatchingTimes),
always without jitter: the nominal times the logical keys name. cronwarden never evaluates a cron
itself. The plan is a stream: one page of matching times (at most 1000) becomes one set-based
outbox query, and only the missing times are kept, as 8-byte integers. A year of minutely fires
is planned without ever holding a Python object per key.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
from array import array
from bisect import bisect_left, bisect_right
from collections.abc import AsyncGenerator, Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from itertools import chain
from typing import Any

import asyncpg
from google.protobuf.timestamp_pb2 import Timestamp
from temporalio.api.workflowservice.v1 import ListScheduleMatchingTimesRequest
from temporalio.client import (
    Client,
    ScheduleActionStartWorkflow,
    ScheduleDescription,
    ScheduleSpec,
)

from cronwarden.activities.contract import format_fire_time
from cronwarden.backfill.spec_history import ENDED, UNRECORDED, Applied, segments
from cronwarden.backfill.window import Window
from cronwarden.schedules.apply import NotManaged, describe_or_none, is_managed
from cronwarden.schedules.inventory import action_memo, no_such_schedule
from cronwarden.schedules.mapping import DEFINITION_MEMO, DIGEST_MEMO, ZONE_COMPILED
from cronwarden.schedules.model import ScheduleDefinition
from cronwarden.schedules.preview import scratch_of_spec, scratch_schedule
from cronwarden.schedules.zones import compiled_until
from cronwarden.store import definitions, outbox, pause_history
from cronwarden.store.pause_history import Pause
from cronwarden.times import utc_text, utc_text_or_none
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
        # Fire times carry no fraction without jitter, and no spec asked here has any (see
        # `_parts`); the key truncates to the second exactly like this.
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


@dataclass(frozen=True)
class Judged:
    """One part of a planned window and what its fire times were evaluated from."""

    window: Window
    applied_at: datetime | None
    """The recorded apply (definition_history row) in force; None: no row covers the part (a
    create whose history write failed, a schedule older than the history, the part before its
    first row), and the live schedule's own spec stood in."""
    jitter: timedelta | None
    """The jitter of the definition in force: how long after its nominal time a fire may start."""
    deleted: bool = False
    """The part lies between two lives of the schedule id (after a recorded delete, before the
    next create): no fire was due in it."""
    inferred: str | None = None
    """`ended` (a life's end inferred from its last evidence) or `unrecorded` (Temporal's memo
    of a definition whose row was lost): see `effective_history`."""

    @property
    def source(self) -> str:
        if self.inferred is not None:
            return self.inferred
        if self.deleted:
            return "deleted"
        return "history" if self.applied_at is not None else "live"

    def as_json(self) -> dict[str, Any]:
        return {
            **self.window.as_json(),
            "source": self.source,
            "applied_at": utc_text_or_none(self.applied_at),
            "jitter_seconds": int(self.jitter.total_seconds()) if self.jitter else 0,
        }


@dataclass
class Plan:
    schedule_id: str
    window: Window
    """The window actually planned: clamped to the schedule's creation time."""
    expected: int
    done: int
    missing: array[int]
    """Fire times without an outbox record, epoch seconds, ascending."""
    awaiting_jitter: array[int] = field(default_factory=lambda: array("q"))
    """Fire times without an outbox record whose nominal time has passed but whose jittered
    start may still come (nominal + the jitter in force is later than now): not missing yet.
    A replay of one would run the job before the schedule does."""
    judged: list[Judged] = field(default_factory=list)
    """The parts of the window, oldest first, each with what its fire times came from."""
    paused: array[int] = field(default_factory=lambda: array("q"))
    """Fire times without an outbox record that fell inside an operator pause
    (store/pause_history.py): held on purpose, not missing, and replayed only when asked."""
    pauses: list[Pause] = field(default_factory=list)
    """The operator pauses that overlap the window."""
    held_included: bool = False
    """The paused fires are among `missing` too, to be replayed (`--include-held`)."""

    def counts_json(self) -> dict[str, Any]:
        return {
            "schedule_id": self.schedule_id,
            "window": self.window.as_json(),
            "expected": self.expected,
            "done": self.done,
            "missing": len(self.missing),
            "awaiting_jitter": len(self.awaiting_jitter),
            "paused_fires": len(self.paused),
            "held_included": self.held_included,
            "pauses": [p.as_json() for p in self.pauses],
            "judged_by": [j.as_json() for j in self.judged],
        }

    def notes(self) -> list[str]:
        """Text lines for what the counts alone do not say (printed under them)."""
        return (
            judged_notes(self.judged)
            + awaiting_notes(len(self.awaiting_jitter))
            + paused_notes(len(self.paused), self.pauses, included=self.held_included)
        )

    def with_paused_as_missing(self) -> Plan:
        """The plan with its paused fires counted missing too (`backfill run --include-held`);
        they are still counted as paused, and `held_included` says they will be replayed."""
        merged = array("q", sorted(chain(self.missing, self.paused)))
        return replace(self, missing=merged, held_included=True)

    def missing_times(self) -> Iterator[datetime]:
        """One at a time: a replay of a whole year holds no datetime per key."""
        return (datetime.fromtimestamp(s, UTC) for s in self.missing)

    def missing_keys(self) -> list[str]:
        return list(self.iter_missing_keys())

    def iter_missing_keys(self) -> Iterator[str]:
        """The missing keys one at a time, for output written as it goes."""
        return keys_of(self.schedule_id, self.missing)


def judged_notes(judged: Iterable[Judged]) -> list[str]:
    """A line per part judged without a recorded definition (the operator should know that its
    times come from today's spec, which may not be the one that was in force then), and per
    part between two lives of the id."""
    lines = []
    for j in judged:
        span = f"  {utc_text(j.window.start)} .. {utc_text(j.window.end)}"
        if j.inferred == ENDED:
            lines.append(
                f"{span}: not planned: the schedule's life before ended at an unrecorded time "
                "(deleted outside cronwarden, or a delete interrupted) after its last record"
            )
        elif j.deleted:
            lines.append(f"{span}: the schedule was deleted (recorded): nothing was due")
        elif j.inferred == UNRECORDED:
            lines.append(
                f"{span}: judged by the definition Temporal holds (from its memo, written "
                f"{utc_text_or_none(j.applied_at)}): its history row was lost"
            )
        elif j.applied_at is None:
            lines.append(
                f"{span}: no recorded definition, judged by the live schedule's spec "
                "(without jitter)"
            )
    return lines


def paused_notes(count: int, pauses: Iterable[Pause], *, included: bool = False) -> list[str]:
    if not count:
        return []
    lines = [
        f"  paused: {count} fire(s) fell inside an operator pause: held on purpose, "
        + (
            "replayed as asked (--include-held)"
            if included
            else "not missing (`backfill run --include-held` replays them too)"
        )
    ]
    for p in pauses:
        until = utc_text(p.resumed_at) if p.resumed_at else "now"
        reason = f" ({p.reason})" if p.reason else ""
        lines.append(f"    paused {utc_text(p.paused_at)} .. {until}{reason}")
    return lines


def awaiting_notes(count: int) -> list[str]:
    if not count:
        return []
    return [
        f"  not missing yet: {count} fire(s) whose jittered start may still come "
        "(nominal time + jitter is later than now)"
    ]


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
    client: Client,
    pool: asyncpg.Pool,
    schedule: ManagedSchedule | GoneSchedule,
    window: Window,
    *,
    now: datetime | None = None,
) -> Plan:
    """The plan for the window, clamped to the start of the id's first known life (`life_start`):
    no fire was due before."""
    async with pool.acquire() as conn:
        start = await life_start(conn, schedule)
        return await plan_on(
            client,
            conn,
            schedule.schedule_id,
            window.clamped_to(start),
            now=now,
            live=schedule.description,
            gone=schedule.description is None,
        )


@dataclass(frozen=True)
class GoneSchedule:
    """A schedule id Temporal no longer holds, known from its recorded history: it can still be
    planned and audited (what its lives should have run, and did not), never replayed into."""

    schedule_id: str
    deleted_at: datetime | None
    """Its last recorded delete; None: it was deleted outside cronwarden, at a time not known
    (its last recorded definition is taken to have held until now)."""
    description: None = None

    @property
    def created_at(self) -> None:
        return None


async def load_gone(conn: Any, schedule_id: str) -> GoneSchedule | None:
    """The id's recorded history, if it has one (None: it never was a cronwarden schedule)."""
    rows = await definitions.history(conn, schedule_id)
    if not any(not deleted for _, _, _, deleted in rows):
        # Nothing but delete rows: no definition says what its life ran.
        return None
    deletes = [at for at, _, _, deleted in rows if deleted]
    return GoneSchedule(schedule_id, deletes[-1] if deletes and rows[-1][3] else None)


async def life_start(conn: Any, schedule: ManagedSchedule | GoneSchedule) -> datetime:
    """The earliest time a fire of the id can have been due: the first recorded definition (of
    an earlier life, when the id was deleted and created again), or the live schedule's creation
    when nothing older is recorded. Parts between two lives are judged by the recorded delete
    (`Judged.deleted`)."""
    first = await definitions.first_applied_at(conn, schedule.schedule_id)
    created = schedule.created_at
    candidates = [t for t in (first, created) if t is not None]
    if not candidates:
        raise ValueError(f"schedule '{schedule.schedule_id}' has neither history nor a creation")
    return min(candidates)


async def plan_window(
    client: Client,
    pool: asyncpg.Pool,
    schedule_id: str,
    window: Window,
    *,
    now: datetime | None = None,
    live: ScheduleDescription | None = None,
) -> Plan:
    """Expected minus done over exactly `window`: one matching-times page, one query."""
    async with pool.acquire() as conn:
        return await plan_on(client, conn, schedule_id, window, now=now, live=live)


async def plan_on(
    client: Client,
    conn: Any,
    schedule_id: str,
    window: Window,
    *,
    now: datetime | None = None,
    live: ScheduleDescription | None = None,
    gone: bool = False,
) -> Plan:
    """`plan_window` on one connection: inside a REPEATABLE READ transaction every page (and
    whatever the caller reads after) sees one snapshot of the outbox.

    Each part of the window is judged by the definition in force then (schedules/spec_history),
    always at its nominal times. A fire without an outbox record is missing only once its
    nominal time plus that definition's jitter has passed (at `now`, the clock when not given):
    before that, Temporal may still start it, and it is counted as awaiting its jitter instead.
    `live` is the schedule's description, if the caller has one (it is described otherwise,
    only when needed); `gone`: Temporal no longer holds the schedule, only its history judges.
    """
    now = datetime.now(UTC) if now is None else now
    result = Plan(schedule_id, window, expected=0, done=0, missing=array("q"))
    parts = await _parts(client, conn, schedule_id, window, live, gone=gone)
    if not window.empty:
        # A pause up to the longest jitter after the window's end may still have held a fire
        # of its last seconds (its start was due inside the pause).
        reach = max((p.judged.jitter or timedelta(0) for p in parts), default=timedelta(0))
        result.pauses = await pause_history.overlapping(
            conn, schedule_id, window.start, window.end + reach
        )
    for part in parts:
        result.judged.append(part.judged)
        # The last nominal second whose jittered start must have come by now. Without jitter
        # every time asked for counts (the commands never ask past now).
        jitter = part.judged.jitter
        due = math.floor((now - jitter).timestamp()) if jitter else None
        held = _held_spans(result.pauses, jitter)
        async for page in _prefetched(part.pages(client, schedule_id)):
            missing = await outbox.missing_fire_times(conn, schedule_id, page)
            result.expected += len(page)
            result.done += len(page) - len(missing)
            if held and missing:
                missing = _split_held(missing, held, result.paused)
            if due is not None and missing and missing[-1] > due:
                cut = bisect_right(missing, due)
                result.awaiting_jitter.extend(missing[cut:])
                missing = missing[:cut]
            result.missing.extend(missing)
    return result


def _held_spans(pauses: Sequence[Pause], jitter: timedelta | None) -> list[tuple[int, int]]:
    """Each pause as the nominal seconds it held, [first, last]: a fire whose start (its
    nominal time, up to the jitter later) fell inside the pause was not started by Temporal.
    One whose jittered start may have come just before the pause counts as held too: replaying
    a fire the operator may have held on purpose is the wrong thing to apply, while a held one
    is still listed (and replayed on request)."""
    spans = []
    for p in pauses:
        first = math.ceil((p.paused_at - (jitter or timedelta(0))).timestamp())
        # A fire at the very second the pause was lifted may not have been started either.
        last = math.floor(p.resumed_at.timestamp()) if p.resumed_at else _FOREVER
        spans.append((first, last))
    return spans


_FOREVER = 2**62


def _split_held(missing: list[int], held: list[tuple[int, int]], into: array[int]) -> list[int]:
    """`missing` without the times inside a held span, which are appended to `into`.

    Both ascend, so one merge pass: the spans (overlapping ones joined) are cut out of the page
    by bisection, a slice per span, whatever the number of pauses.
    """
    kept: list[int] = []
    at = 0
    for first, last in _joined(held):
        lo = bisect_left(missing, first, at)
        hi = bisect_right(missing, last, lo)
        kept.extend(missing[at:lo])
        into.extend(missing[lo:hi])
        at = hi
    kept.extend(missing[at:])
    return kept


def _joined(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """The spans sorted, overlapping ones joined (the jitter can widen one into the next)."""
    joined: list[tuple[int, int]] = []
    for first, last in sorted(spans):
        if joined and first <= joined[-1][1] + 1:
            joined[-1] = (joined[-1][0], max(joined[-1][1], last))
        else:
            joined.append((first, last))
    return joined


async def expected_pages(
    client: Client,
    conn: Any,
    schedule_id: str,
    window: Window,
    *,
    live: ScheduleDescription | None = None,
) -> AsyncGenerator[list[int], None]:
    """The nominal fire times (epoch seconds, ascending, in pages) the schedule should have
    produced in `window`, each part judged by the definition in force then."""
    for part in await _parts(client, conn, schedule_id, window, live):
        async for page in _prefetched(part.pages(client, schedule_id)):
            yield page


@dataclass(frozen=True)
class _Part:
    """A part of the window, what judges it, and how Temporal is asked for its nominal times."""

    judged: Judged
    definition: ScheduleDefinition | None
    """Evaluated through a paused copy without jitter; None with `spec` None: the live schedule
    itself is asked (its spec has no jitter, so its times are the nominal ones)."""
    spec: ScheduleSpec | None
    """The live schedule's own spec, evaluated through a paused copy without jitter."""
    task_queue: str

    async def pages(self, client: Client, schedule_id: str) -> AsyncGenerator[list[int], None]:
        window = self.judged.window
        if self.judged.deleted:
            return
        if self.definition is not None:
            # A zoned definition's entries are compiled for whole years: for the part's own,
            # whatever years `apply` compiles today (a UTC one ignores the window).
            scratch = scratch_schedule(
                client,
                self.definition,
                task_queue=self.task_queue,
                window=(window.start, window.end),
            )
        elif self.spec is not None:
            scratch = scratch_of_spec(client, self.spec, task_queue=self.task_queue)
        else:
            async for page in matching_times(client, schedule_id, window):
                yield page
            return
        async with scratch as scratch_id:
            async for page in matching_times(client, scratch_id, window):
                yield page


async def _parts(
    client: Client,
    conn: Any,
    schedule_id: str,
    window: Window,
    live: ScheduleDescription | None,
    *,
    gone: bool = False,
) -> list[_Part]:
    """The window's parts and how each is evaluated.

    Temporal's matching times are the jittered ones when the spec asked has jitter, and a
    jittered time names no logical key (a replay of one applies the job a second time under a
    key of its own). So the live schedule is asked directly only when its spec Temporal holds
    has no jitter; otherwise a paused copy without jitter answers: of the recorded definition
    in force, or, for a part no recorded definition covers, of the live schedule's own spec.
    """
    if live is None and not gone:
        live = await _describe(client, schedule_id)
    history = await effective_history(client, conn, schedule_id, live)
    latest = history[-1] if history else None
    parts: list[_Part] = []
    for segment in segments(history, window):
        applied = segment.applied
        if applied is not None and applied.deleted:
            judged = Judged(segment.window, applied.applied_at, None, True, applied.inferred)
            parts.append(_Part(judged, None, None, ""))
            continue
        if applied is None:
            live = live or await _describe(client, schedule_id)
            spec = live.schedule.spec
            action = live.schedule.action
            queue = action.task_queue if isinstance(action, ScheduleActionStartWorkflow) else ""
            judged = Judged(segment.window, None, spec.jitter)
            zoned = await _zoned_memo(client, live)
            if zoned is not None and not _inside_compiled(zoned, segment.window):
                # The live entries of a zoned schedule fire nothing outside the years they
                # were compiled for: its memo's definition, compiled for the part, answers.
                parts.append(_Part(judged, zoned.rebuilt(), None, queue))
                continue
            parts.append(_Part(judged, None, spec if spec.jitter else None, queue))
            continue
        defn = applied.rebuilt()
        judged = Judged(segment.window, applied.applied_at, defn.jitter, inferred=applied.inferred)
        direct = False
        if (
            applied is latest
            and defn.jitter is None
            and not gone
            and _inside_compiled(applied, segment.window)
        ):
            # The latest row should be what Temporal holds, but a write whose row was lost
            # (an update interrupted between the two) may have given the live spec a jitter.
            live = live or await _describe(client, schedule_id)
            direct = not live.schedule.spec.jitter
        parts.append(_Part(judged, None if direct else defn, None, applied.task_queue))
    return parts


def _inside_compiled(applied: Applied, window: Window) -> bool:
    """Whether the live schedule's own entries can answer `window`: always for a UTC
    definition; for a zoned one only inside the years its entries were compiled for (the label
    its definition records), as it fires nothing outside them. A window years back (or past the
    horizon) is judged by the rule all the same, through a copy compiled for it."""
    if applied.definition.get("timezone") is None:
        return True
    years = _compiled_years(applied.definition.get(ZONE_COMPILED))
    return years is not None and years[0] <= window.start and window.end < years[1]


async def _zoned_memo(client: Client, live: ScheduleDescription) -> Applied | None:
    """The zoned definition the live schedule's memo holds (as an unrecorded apply), or None:
    a UTC schedule, or a memo that does not read."""
    definition = (await action_memo(client, live)).get(DEFINITION_MEMO)
    if not isinstance(definition, dict) or definition.get("timezone") is None:
        return None
    return Applied(live.info.created_at, "", definition, inferred=UNRECORDED)


def _compiled_years(label: object) -> tuple[datetime, datetime] | None:
    """[start, end) of the whole years a `compiled_label` names; None if it names none."""
    end = compiled_until(label)
    if end is None:
        return None
    assert isinstance(label, str)  # compiled_until reads only strings
    first, _, _ = label.rpartition(", ")[2].partition("-")
    return (datetime(int(first), 1, 1, tzinfo=UTC), end) if first.isdigit() else None


async def effective_history(
    client: Client, conn: Any, schedule_id: str, live: ScheduleDescription | None
) -> list[Applied]:
    """The recorded history, corrected by what Temporal and the outbox prove, oldest first.

    The rows can be wrong three ways, each from a command interrupted between its two writes
    (or a change made outside cronwarden), and each would make a replay apply the wrong thing:

    - a delete row later than the live schedule's creation: the schedule outlived it (a
      delete that never reached Temporal). It is ignored, or every fire since would be judged
      not due;
    - a life that ended without a delete row (deleted in Temporal's UI, or a delete whose row
      was never written), followed by a new creation or by nothing: the end is unknown, so the
      old life is taken to end at its last evidence (its last row, or its last committed fire,
      whichever is later). Fires after it are not planned: they may never have been due, and a
      replay of one would apply the old life's job in a time no schedule held;
    - the definition Temporal holds is not the latest row (an update or a create whose row was
      lost): it is taken from the schedule's memo, as in force from Temporal's last write of
      the schedule (its creation, if never updated), source `unrecorded`, so the keys since run
      the definition Temporal ran them by, not the one before.
    """
    rows = [Applied(*row) for row in await definitions.history(conn, schedule_id)]
    if live is None:
        if rows and not rows[-1].deleted:
            last_fire = await outbox.last_fire_time(conn, schedule_id, before=None)
            rows.append(_ended(rows[-1], last_fire))
        return rows
    created = live.info.created_at
    rows = [a for a in rows if not (a.deleted and a.applied_at > created)]
    before = [a for a in rows if a.applied_at < created]
    current = [a for a in rows if a.applied_at >= created]
    if before and not before[-1].deleted:
        before.append(
            _ended(before[-1], await outbox.last_fire_time(conn, schedule_id, before=created))
        )
    if rows:
        memo = await action_memo(client, live)
        digest, definition = memo.get(DIGEST_MEMO), memo.get(DEFINITION_MEMO)
        written_at = live.info.last_updated_at or created
        if (
            isinstance(digest, str)
            and isinstance(definition, dict)
            and (not current or current[-1].digest != digest)
            and (not current or written_at > current[-1].applied_at)
        ):
            current.append(Applied(written_at, digest, definition, inferred=UNRECORDED))
    return before + current


def _ended(last: Applied, last_fire: datetime | None) -> Applied:
    """A life's end where none was recorded: its last evidence."""
    at = max(last.applied_at, last_fire) if last_fire is not None else last.applied_at
    return Applied(at, "", {}, deleted=True, inferred=ENDED)


async def _describe(client: Client, schedule_id: str) -> ScheduleDescription:
    desc = await describe_or_none(client, schedule_id)
    if desc is None:
        raise await no_such_schedule(client, schedule_id)
    return desc


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
