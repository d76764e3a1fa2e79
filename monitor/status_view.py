"""What the status page shows, read on each request: every schedule's health from Postgres, and
for the first few its recent fire slots, set against Temporal's own evaluation of the spec.

Postgres alone answers the table (health, last success, next expected, open incident), so the
page works while Temporal is down, as the monitor does; the timelines then show what the outbox
and the leases know, and say that missing slots cannot be told. Temporal is asked with a
deadline and a bound on calls in flight: a page must never hang on it.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
from temporalio.client import Client

from cronwarden.activities.contract import fire_time_of_key
from cronwarden.backfill.audit import running_fire_times_of
from cronwarden.backfill.plan import expected_pages
from cronwarden.backfill.window import Window
from cronwarden.logs import get_logger
from cronwarden.monitor import timeline
from cronwarden.schedules.bounded import try_bounded
from cronwarden.schedules.health import LATE, OK, OVERDUE, PAUSED, RUNNING, derive_health
from cronwarden.schedules.inventory import describe_or_none
from cronwarden.schedules.run_ids import REPLAY_INFIX
from cronwarden.store import heartbeats, incidents, locks, outbox

log = get_logger("cronwarden.monitor")

INCIDENT = "incident"
"""Health shown for a schedule with an open incident, whatever its heartbeat says."""
NEVER_SINCE = datetime.min.replace(tzinfo=UTC)


@dataclass(frozen=True)
class PageLimits:
    timelines: int = 50
    """Schedules whose timeline the overview shows (problems first); the rest link to theirs."""
    slots: int = 30
    """Slots in an overview timeline."""
    detail_slots: int = 120
    """Slots on one schedule's own page."""
    temporal_timeout: float = 5.0
    """Longest a page waits for Temporal, all its calls together."""
    temporal_concurrency: int = 8


@dataclass
class ScheduleStatus:
    schedule_id: str
    health: str
    last_success_at: datetime | None
    next_expected_at: datetime | None
    grace: timedelta
    paused: bool
    paused_reason: str | None
    last_error: str | None
    incident: dict[str, Any] | None
    last_replay_error: str | None = None
    """The last failed `backfill run` replay's error, shown apart from the live `last_error`."""
    last_replay_error_key: str | None = None
    slots: list[timeline.Slot] | None = None
    """None: no timeline read for this schedule on this page."""
    grid_known: bool = False
    """Whether the slots were set against Temporal's expected times (missing ones can show)."""
    note: str | None = None
    """Why the timeline is partial, when it is."""

    def count(self, state: str) -> int:
        return sum(s.state == state for s in self.slots or [])


@dataclass
class StatusView:
    now: datetime
    schedules: list[ScheduleStatus]
    system_incidents: list[dict[str, Any]] = field(default_factory=list)
    temporal_error: str | None = None
    """Set when Temporal could not be asked: the timelines lack their expected slots."""


TemporalClient = Callable[[], Awaitable[Client | None]]


@dataclass(frozen=True)
class _Grid:
    expected: list[datetime] | None
    running: set[datetime]
    buffered: int = 0
    note: str | None = None


async def read_status(
    pool: asyncpg.Pool,
    temporal: TemporalClient,
    *,
    limits: PageLimits,
    only: str | None = None,
) -> StatusView:
    """The overview (`only` None) or one schedule's page (`only` its id; no such schedule:
    an empty list)."""
    async with pool.acquire() as conn, conn.transaction(isolation="repeatable_read", readonly=True):
        now: datetime = await conn.fetchval("SELECT now()")
        beats = await heartbeats.all_rows(conn)
        open_now = await incidents.open_incidents(conn)
    if only is not None:
        beats = {only: beats[only]} if only in beats else {}
    by_schedule = {i["schedule_id"]: i for i in open_now if i["schedule_id"] is not None}
    schedules = sorted(
        (_status(beat, by_schedule.get(sid), now) for sid, beat in beats.items()),
        key=lambda s: (_RANK.get(s.health, len(_RANK)), s.schedule_id),
    )
    view = StatusView(
        now=now,
        schedules=schedules,
        system_incidents=[i for i in open_now if i["schedule_id"] is None],
    )
    shown = schedules[: limits.timelines] if only is None else schedules
    if shown:
        slot_count = limits.slots if only is None else limits.detail_slots
        grids, view.temporal_error = await _grids(
            temporal, pool, shown, now=now, limits=limits, n=slot_count
        )
        await _fill_timelines(pool, shown, beats, grids, now=now, n=slot_count)
    return view


# Problems first: what an operator opened the page for.
_RANK = {INCIDENT: 0, OVERDUE: 1, LATE: 2, RUNNING: 3, OK: 4, PAUSED: 5}


def _status(
    beat: Mapping[str, Any], incident: dict[str, Any] | None, now: datetime
) -> ScheduleStatus:
    health = derive_health(
        now=now,
        tracked=True,
        operator_paused=bool(beat["paused"]),
        next_expected_at=beat["next_expected_at"],
        grace=beat["grace"],
    )
    return ScheduleStatus(
        schedule_id=beat["schedule_id"],
        health=INCIDENT if incident is not None else health,
        last_success_at=beat["last_success_at"],
        next_expected_at=beat["next_expected_at"],
        grace=beat["grace"],
        paused=bool(beat["paused"]),
        paused_reason=beat["paused_reason"],
        last_error=beat["last_error"],
        incident=incident,
        last_replay_error=beat["last_replay_error"],
        last_replay_error_key=beat["last_replay_error_key"],
    )


async def _grids(
    temporal: TemporalClient,
    pool: asyncpg.Pool,
    shown: Sequence[ScheduleStatus],
    *,
    now: datetime,
    limits: PageLimits,
    n: int,
) -> tuple[dict[str, _Grid], str | None]:
    """Each shown schedule's expected fire times and running fires, from Temporal, all within
    one deadline: a schedule that is not done by then has no grid (its timeline shows what
    Postgres knows), and the others keep theirs. Empty, with the reason, when Temporal cannot
    be reached (the client's own connect timeout and back-off apply)."""
    client = await temporal()
    if client is None:
        return {}, "Temporal is unreachable"
    deadline = asyncio.get_running_loop().time() + limits.temporal_timeout

    async def one(status: ScheduleStatus) -> _Grid:
        async with asyncio.timeout_at(deadline):
            return await _grid(client, pool, status.schedule_id, now=now, n=n)

    outcomes = await try_bounded(one, list(shown), limit=limits.temporal_concurrency)
    grids = {}
    error = None
    for status, outcome in zip(shown, outcomes, strict=True):
        if outcome.value is not None:
            grids[status.schedule_id] = outcome.value
        elif isinstance(outcome.error, TimeoutError) or not outcome.started:
            error = f"Temporal did not answer within {limits.temporal_timeout:g}s"
        elif outcome.error is not None:
            error = f"Temporal failed: {type(outcome.error).__name__}"
            log.warning(
                "monitor.status-page-temporal-failed",
                schedule_id=status.schedule_id,
                error=f"{type(outcome.error).__name__}: {outcome.error}",
            )
    return grids, error


async def _grid(
    client: Client, pool: asyncpg.Pool, schedule_id: str, *, now: datetime, n: int
) -> _Grid:
    desc = await describe_or_none(client, schedule_id)
    if desc is None:
        return _Grid(expected=None, running=set(), note="the schedule is not in Temporal")
    info = desc.info
    running = await running_fire_times_of(client, schedule_id, desc)
    expected: list[datetime] = []
    # The spec's rhythm ahead is its rhythm behind, near enough to size a first look back; a
    # spec with gaps (weekdays only) needs longer looks, each 4 times the last, until `n` slots
    # are found or the schedule's creation is reached.
    lookback = _first_lookback(info.next_action_times, n)
    async with pool.acquire() as conn:
        while True:
            window = Window(now - lookback, now).clamped_to(info.created_at)
            # The same evaluation `backfill plan` makes: each part of the window by the
            # definition in force then, nominal slots under jitter. Only the last `n` are kept.
            expected = []
            async for page in expected_pages(client, conn, schedule_id, window):
                expected.extend(datetime.fromtimestamp(s, UTC) for s in page)
                del expected[:-n]
            if len(expected) >= n or window.start > now - lookback or lookback >= _MAX_LOOKBACK:
                break
            lookback = min(lookback * 4, _MAX_LOOKBACK)
    return _Grid(
        expected=expected, running=running, buffered=int(desc.raw_description.info.buffer_size)
    )


_MAX_LOOKBACK = timedelta(days=366)


def _first_lookback(next_times: Sequence[datetime], n: int) -> timedelta:
    """`n` slots back at the tightest gap among the next fire times (a day a slot when Temporal
    lists fewer than two)."""
    gaps = [b - a for a, b in itertools.pairwise(next_times) if b > a]
    step = min(gaps) if gaps else timedelta(days=1)
    return min(step * (n + 1), _MAX_LOOKBACK)


async def _fill_timelines(
    pool: asyncpg.Pool,
    shown: Sequence[ScheduleStatus],
    beats: Mapping[str, Mapping[str, Any]],
    grids: Mapping[str, _Grid],
    *,
    now: datetime,
    n: int,
) -> None:
    since = {}
    for s in shown:
        grid = grids.get(s.schedule_id)
        since[s.schedule_id] = (
            grid.expected[0] if grid is not None and grid.expected else NEVER_SINCE
        )
    ids = [s.schedule_id for s in shown]
    # One snapshot: a run that commits between the two reads would otherwise be in neither (its
    # commit releases the lease and writes the outbox record in one transaction).
    async with pool.acquire() as conn, conn.transaction(isolation="repeatable_read", readonly=True):
        # More than the slots: off-grid records (manual triggers) may sit between the grid's.
        rows = await outbox.recent(conn, since, until=now, limit=4 * n)
        active = await locks.active_keys(conn, ids)
    records: dict[str, list[timeline.Record]] = {sid: [] for sid in ids}
    for r in rows:
        workflow_id = r["workflow_id"]
        records[r["schedule_id"]].append(
            timeline.Record(
                fire_time=r["fire_time"],
                committed_at=r["committed_at"],
                worker=r["worker"],
                attempt=r["attempt"],
                workflow_id=workflow_id,
                run_id=r["run_id"],
                replay=workflow_id is not None and REPLAY_INFIX in workflow_id,
            )
        )
    leased: dict[str, set[datetime]] = {sid: set() for sid in ids}
    for sid, key in active:
        fire_time = fire_time_of_key(sid, key)
        if fire_time is not None:
            leased[sid].add(fire_time)
    for s in shown:
        grid = grids.get(s.schedule_id)
        beat = beats[s.schedule_id]
        skip_key = beat.get("last_lease_skip_key")
        s.grid_known = grid is not None and grid.expected is not None
        s.note = grid.note if grid is not None else None
        s.slots = timeline.slots(
            s.schedule_id,
            expected=grid.expected if grid is not None else None,
            records=records[s.schedule_id],
            running=leased[s.schedule_id] | (grid.running if grid is not None else set()),
            lease_skip=(
                timeline.LeaseSkip(skip_key, beat.get("last_lease_skip_holder"))
                if skip_key
                else None
            ),
            now=now,
            settle=timeline.settle_time(s.grace),
            limit=n,
            buffered=grid.buffered if grid is not None else 0,
        )
        if s.health == LATE and s.count(timeline.RUNNING):
            # Past the expected time but within its grace, with a run in flight: it is not late.
            s.health = RUNNING
