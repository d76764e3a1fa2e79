"""What the status page shows: every schedule's health from Postgres, problems first, a page at
a time, and for the schedules on the page their recent fire slots set against the grid Temporal
evaluated for them.

A read here touches Postgres only. What Temporal says (each schedule's nominal grid, its runs
in flight) comes from `monitor.grids`, filled outside any request; a schedule whose grid is not
there yet is drawn from what the outbox and the leases know, marked "grid pending". So the page
answers the same while Temporal is down, as the monitor does, and no connection is ever held
while waiting on Temporal.

Two reads: `read_ranking` (the heartbeats and open incidents in one snapshot: every schedule's
health, the order, the counts), shared by every page; `read_page` (one page's timelines: one
outbox and one lease query in one snapshot).
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg

from cronwarden.activities.contract import fire_time_of_key
from cronwarden.monitor import timeline
from cronwarden.monitor.grids import GridCache, SlotCause
from cronwarden.monitor.scan import elapsed_text
from cronwarden.schedules.health import LATE, OK, OVERDUE, PAUSED, RUNNING, derive_health
from cronwarden.schedules.run_ids import REPLAY_INFIX
from cronwarden.store import change_log, heartbeats, incidents, locks, outbox
from cronwarden.store import zones as zone_store
from cronwarden.store.runs import recent_timings

# The changes one schedule's page lists (`cronwarden audit log ID` has them all).
RECENT_CHANGES = 10
INCIDENT = "incident"
"""Health shown for a schedule with an open incident, whatever its heartbeat says."""
NEVER_SINCE = datetime.min.replace(tzinfo=UTC)
# Problems first: what an operator opened the page for.
HEALTH_ORDER = (INCIDENT, OVERDUE, LATE, RUNNING, OK, PAUSED)
_RANK = {health: i for i, health in enumerate(HEALTH_ORDER)}


@dataclass(frozen=True)
class PageLimits:
    page_size: int = 100
    """Schedules on one page of the overview, each with its timeline."""
    slots: int = 30
    """Slots in an overview timeline."""
    detail_slots: int = 120
    """Slots on one schedule's own page."""
    fresh_for: float = 5.0
    """Seconds one read serves every request that asks for the same page."""


@dataclass(frozen=True, slots=True)
class RunTiming:
    """One committed run's start and duration, set against the schedule's bounds."""

    logical_key: str
    fire_time: datetime
    started_at: datetime
    duration: timedelta
    breach: str | None
    """The bound it broke, as its commit judged it (`too-fast`, `too-slow`, `late-start`)."""
    replay: bool

    @property
    def duration_text(self) -> str:
        return elapsed_text(self.duration)

    @property
    def start_lag_text(self) -> str:
        """How long after its nominal fire time the job started."""
        return elapsed_text(max(self.started_at - self.fire_time, timedelta(0)))


@dataclass(slots=True)
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
    digest: str | None = None
    """The definition digest of the heartbeat row: what a cached grid must match."""
    last_replay_error: str | None = None
    """The last failed `backfill run` replay's error, shown apart from the live `last_error`."""
    last_replay_error_key: str | None = None
    lease_skip: timeline.LeaseSkip | None = None
    slots: list[timeline.Slot] | None = None
    """None: no timeline read for this schedule on this page."""
    grid_known: bool = False
    """Whether the slots were set against Temporal's expected times (missing ones can show)."""
    note: str | None = None
    """Why the timeline is partial, when it is."""
    causes: dict[datetime, SlotCause] = field(default_factory=dict)
    """Why its missing slots are missing, by fire time, as far as judged yet (the others
    show "cause pending")."""
    timezone: str | None = None
    """A zoned schedule's zone, from its latest recorded definition (None: UTC, or not read):
    its times are shown in local time beside UTC."""
    duration_min: timedelta | None = None
    """The bounds the last live run was judged by (None: unset, or no run judged yet)."""
    duration_max: timedelta | None = None
    late_start: timedelta | None = None
    runs: list[RunTiming] | None = None
    """The recent runs' durations, newest first (None: not read for this view)."""
    changes: list[change_log.Recorded] | None = None
    """Its latest changes (who, what, why), newest first; None: not read on this page."""

    def count(self, state: str) -> int:
        return sum(s.state == state for s in self.slots or [])


@dataclass(frozen=True)
class Ranking:
    """Every schedule's health at one snapshot, problems first."""

    now: datetime
    schedules: list[ScheduleStatus]
    system_incidents: list[dict[str, Any]]
    counts: dict[str, int]
    """Schedules per health, in HEALTH_ORDER (healths with none left out)."""
    index: dict[str, int] = field(default_factory=dict)

    def pages(self, size: int) -> int:
        return max(1, math.ceil(len(self.schedules) / size))

    def find(self, schedule_id: str) -> ScheduleStatus | None:
        i = self.index.get(schedule_id)
        return self.schedules[i] if i is not None else None


@dataclass
class StatusView:
    ranking: Ranking
    schedules: list[ScheduleStatus]
    """The schedules shown: one page of the overview, or the one schedule."""
    temporal_error: str | None = None
    """Set when Temporal could not be asked lately: grids may be pending or old."""
    temporal_error_since: datetime | None = None
    page: int = 1
    pages: int = 1
    first: int = 1
    """The position of the page's first schedule in the whole list, from 1."""

    @property
    def now(self) -> datetime:
        return self.ranking.now

    @property
    def system_incidents(self) -> list[dict[str, Any]]:
        return self.ranking.system_incidents

    @property
    def counts(self) -> dict[str, int]:
        return self.ranking.counts

    @property
    def total(self) -> int:
        return len(self.ranking.schedules)

    @property
    def pending(self) -> int:
        return sum(s.slots is not None and not s.grid_known for s in self.schedules)


async def read_ranking(pool: asyncpg.Pool, grids: GridCache) -> Ranking:
    """Every schedule's health, in one REPEATABLE READ snapshot with the database's clock."""
    async with pool.acquire() as conn, conn.transaction(isolation="repeatable_read", readonly=True):
        now: datetime = await conn.fetchval("SELECT now()")
        beats = await heartbeats.all_rows(conn)
        open_now = await incidents.open_incidents(conn)
        by_schedule = {i["schedule_id"]: i for i in open_now if i["schedule_id"] is not None}
        # In a thread, here and for the order below: ten thousand rows are tens of milliseconds
        # of Python, which the event loop the monitor pages from should not wait out.
        statuses = await asyncio.to_thread(_statuses, beats, by_schedule, now)
        del beats
        late = [s.schedule_id for s in statuses if s.health == LATE]
        # Few are late at once; one query over all of them, in the same snapshot, so the counts
        # and the order agree with what each row shows.
        active = await locks.active_keys(conn, late) if late else []
    in_flight = {sid for sid, fire in _fire_times(active) if fire <= now}
    for s in statuses:
        if s.health == LATE and (
            s.schedule_id in in_flight or any(t <= now for t in grids.running(s.schedule_id))
        ):
            # Past the expected time but within its grace, with a run in flight: not late.
            s.health = RUNNING
    system = [i for i in open_now if i["schedule_id"] is None]
    return await asyncio.to_thread(_ranked, now, statuses, system)


def _statuses(
    beats: Mapping[str, Mapping[str, Any]],
    incident_of: Mapping[str, dict[str, Any]],
    now: datetime,
) -> list[ScheduleStatus]:
    return [_status(beat, incident_of.get(sid), now) for sid, beat in beats.items()]


def _ranked(
    now: datetime, statuses: list[ScheduleStatus], system_incidents: list[dict[str, Any]]
) -> Ranking:
    statuses.sort(key=lambda s: (_RANK.get(s.health, len(_RANK)), s.schedule_id))
    counts = {h: 0 for h in HEALTH_ORDER}
    for s in statuses:
        counts[s.health] = counts.get(s.health, 0) + 1
    return Ranking(
        now=now,
        schedules=statuses,
        system_incidents=system_incidents,
        counts={h: n for h, n in counts.items() if n},
        index={s.schedule_id: i for i, s in enumerate(statuses)},
    )


async def read_page(
    pool: asyncpg.Pool,
    grids: GridCache,
    ranking: Ranking,
    *,
    page: int,
    limits: PageLimits,
) -> StatusView:
    """Page `page` (from 1, at most `ranking.pages(...)`) of the overview, with timelines."""
    start = (page - 1) * limits.page_size
    shown = [replace(s) for s in ranking.schedules[start : start + limits.page_size]]
    view = _view(ranking, grids, shown)
    view.page, view.pages, view.first = page, ranking.pages(limits.page_size), start + 1
    await _fill_timelines(pool, grids, shown, n=limits.slots)
    return view


async def read_one(
    pool: asyncpg.Pool, grids: GridCache, ranking: Ranking, schedule_id: str, *, limits: PageLimits
) -> StatusView | None:
    """One schedule's page; None: no heartbeat row for it."""
    found = ranking.find(schedule_id)
    if found is None:
        return None
    shown = [replace(found)]
    view = _view(ranking, grids, shown)
    await _fill_runs(pool, shown[0], n=limits.detail_slots)
    await _fill_timelines(pool, grids, shown, n=limits.detail_slots)
    async with pool.acquire() as conn:
        shown[0].changes = await change_log.listed(
            conn, schedule_id=schedule_id, since=None, limit=RECENT_CHANGES
        )
    return view


async def _fill_runs(pool: asyncpg.Pool, s: ScheduleStatus, *, n: int) -> None:
    """The schedule's recent runs with their recorded start and duration (one schedule's page
    only: the overview shows no durations)."""
    async with pool.acquire() as conn:
        rows = await recent_timings(conn, s.schedule_id, limit=n)
    s.runs = [
        RunTiming(
            logical_key=r["logical_key"],
            fire_time=r["fire_time"],
            started_at=r["started_at"],
            duration=r["duration"],
            breach=r["breach"],
            replay=r["workflow_id"] is not None and REPLAY_INFIX in r["workflow_id"],
        )
        for r in rows
    ]


def _view(ranking: Ranking, grids: GridCache, shown: list[ScheduleStatus]) -> StatusView:
    return StatusView(ranking, shown, grids.error, grids.error_since)


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
    skip_key = beat.get("last_lease_skip_key")
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
        digest=beat.get("definition_digest"),
        last_replay_error=beat["last_replay_error"],
        last_replay_error_key=beat["last_replay_error_key"],
        lease_skip=(
            timeline.LeaseSkip(skip_key, beat.get("last_lease_skip_holder")) if skip_key else None
        ),
        duration_min=beat.get("duration_min"),
        duration_max=beat.get("duration_max"),
        late_start=beat.get("late_start"),
    )


def _fire_times(active: Sequence[tuple[str, str]]) -> list[tuple[str, datetime]]:
    found = []
    for sid, key in active:
        fire_time = fire_time_of_key(sid, key)
        if fire_time is not None:
            found.append((sid, fire_time))
    return found


async def _fill_timelines(
    pool: asyncpg.Pool, grids: GridCache, shown: Sequence[ScheduleStatus], *, n: int
) -> None:
    if not shown:
        return
    grids.want([(s.schedule_id, s.digest) for s in shown])
    ids = [s.schedule_id for s in shown]
    # One snapshot: a run that commits between the two reads would otherwise be in neither (its
    # commit releases the lease and writes the outbox record in one transaction). The grids
    # are looked up with this snapshot's clock, before the outbox is asked from their start.
    async with pool.acquire() as conn, conn.transaction(isolation="repeatable_read", readonly=True):
        now: datetime = await conn.fetchval("SELECT now()")
        found = {s.schedule_id: grids.lookup(s.schedule_id, s.digest, now=now, n=n) for s in shown}
        since = {sid: (g.expected[0] if g.expected else NEVER_SINCE) for sid, g in found.items()}
        # More than the slots: off-grid records (manual triggers) may sit between the grid's.
        rows = await outbox.recent(conn, since, until=now, limit=4 * n)
        active = await locks.active_keys(conn, ids)
        # From the definitions `apply` recorded, never from Temporal: a page load stays a read
        # of Postgres.
        zones = await zone_store.latest_zones(conn, ids)
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
    for sid, fire_time in _fire_times(active):
        leased[sid].add(fire_time)
    for s in shown:
        s.timezone = zones.get(s.schedule_id)
        grid = found[s.schedule_id]
        s.grid_known = grid.expected is not None
        s.note = grid.note
        s.slots = timeline.slots(
            s.schedule_id,
            expected=grid.expected,
            records=records[s.schedule_id],
            running=leased[s.schedule_id] | grid.running,
            lease_skip=s.lease_skip,
            now=now,
            settle=timeline.settle_time(s.grace),
            limit=n,
            buffered=grid.buffered,
        )
        missing = [slot.fire_time for slot in s.slots if slot.state == timeline.MISSING]
        # Judged in the background (`monitor.grids`), never here: this only says which.
        grids.want_causes(s.schedule_id, missing)
        known = grids.causes(s.schedule_id)
        s.causes = {t: known[t] for t in missing if t in known}
