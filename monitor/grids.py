"""What the status page knows from Temporal, gathered outside any request.

A page load reads Postgres only. The fire times each schedule should have produced (its nominal
grid, Temporal's own evaluation of the spec, as `backfill plan` makes it) and its runs in flight
come from this cache, which a background task of the page fills: it refreshes the schedules
pages showed recently, at most `schedules_per_round` of them and at most `scratch_per_round`
scratch schedules (the writes a jittered or changed spec needs) per round, one round per
`period`. So an open tab, or fifty, costs Temporal the same bounded work, and a schedule whose
grid is not in yet shows "grid pending" instead of making the page wait.

A grid is kept under the schedule's definition digest (the heartbeat row's) and covers a
window reaching past the time it was computed, so it serves every page until that window runs
out or the definition changes; runs in flight are re-read each time the schedule's turn comes.
The same task sweeps scratch schedules left behind by interrupted commands.

It also judges why the missing slots a page showed are missing (`backfill.explain.slot_causes`:
a describe, a visibility list and a queue describe per schedule), for at most
`causes_per_round` schedules a round, after the round's grids and within `causes_timeout`.
A cause is kept by schedule and slot until the slot is no longer shown missing; a cause naming
a run still open (no worker polls its queue, a run in flight) is judged again at the schedule's
next turn, a settled one never. Until a slot's cause is in, the page says "cause pending".
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time
from array import array
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
from temporalio.client import Client
from temporalio.service import RPCError

from cronwarden.backfill.audit import running_fire_times_of
from cronwarden.backfill.explain import slot_causes
from cronwarden.backfill.plan import expected_pages
from cronwarden.backfill.window import Window
from cronwarden.errors import CronwardenError
from cronwarden.logs import get_logger
from cronwarden.schedules.bounded import try_bounded
from cronwarden.schedules.inventory import describe_or_none
from cronwarden.schedules.preview import ScratchBudgetSpent, scratch_budget, sweep_scratch

log = get_logger("cronwarden.monitor")

TemporalClient = Callable[[], Awaitable[Client | None]]
PoolSource = Callable[[], Awaitable[asyncpg.Pool]]

PENDING_NOTE = "grid pending"
"""A timeline whose expected fire times are not read yet: what the outbox and leases know."""
_MAX_LOOKBACK = timedelta(days=366)
_MIN_AHEAD = timedelta(minutes=10)
_MAX_AHEAD = timedelta(days=1)
_SWEEP_TIMEOUT = 60.0
_AHEAD_SLOTS = 4
"""A grid keeps at most this many times `slots` past its computation (8 hours of a minutely
spec): enough to serve pages for a while, small enough to keep two thousand grids."""


@dataclass(frozen=True)
class RefreshPolicy:
    period: float = 10.0
    """Seconds between rounds: at most one round starts per period, however many pages ask."""
    schedules_per_round: int = 50
    """Schedules a round asks Temporal about (a describe and a visibility list each, plus their
    matching times when the grid is due)."""
    scratch_per_round: int = 10
    """Scratch schedules a round may create (jittered specs, specs changed inside the window);
    a grid that needs one more waits for the next round."""
    concurrency: int = 8
    round_timeout: float = 8.0
    """Longest a round waits for Temporal; what is not done by then waits for the next."""
    wanted_for: float = 120.0
    """A schedule a page showed is kept fresh this long after."""
    slots: int = 120
    """Slots a grid holds before its computation time: the longest timeline (a schedule's own
    page)."""
    max_schedules: int = 2_000
    """Grids kept at most (the least recently shown go first)."""
    sweep_every: float = 300.0
    """Seconds between sweeps of leftover scratch schedules."""
    causes_per_round: int = 10
    """Schedules whose missing slots a round judges (one `slot_causes` each, for every slot
    of theirs a page showed missing whose cause is not settled), once its grids are read."""
    causes_timeout: float = 5.0
    """Longest a round spends judging causes, after its grids."""


@dataclass(frozen=True)
class Grid:
    """A schedule's nominal fire times over a window, as of one definition."""

    digest: str | None
    seconds: array[int]
    """Epoch seconds, ascending, up to `covers_until`."""
    covers_until: datetime
    """The grid is complete up to here; past it the schedule's slots are unknown."""

    def before(self, now: datetime, n: int) -> list[datetime] | None:
        """The last `n` times up to `now`; None when the grid does not reach `now`."""
        if now > self.covers_until:
            return None
        cut = int(now.timestamp())
        past = [s for s in self.seconds if s <= cut][-n:]
        return [datetime.fromtimestamp(s, UTC) for s in past]


@dataclass(frozen=True)
class Live:
    """What Temporal said of a schedule's runs at one moment."""

    running: frozenset[datetime]
    buffered: int
    read_at: float
    """time.monotonic() of the read."""


@dataclass(frozen=True)
class SlotCause:
    """Why a missing slot is missing, and what closes its gap (`slot_causes`)."""

    cause: str
    """The cause's stable name (`no-worker-polling`, `skipped-overlap` ...)."""
    text: str
    next_command: str | None
    """None while the slot's run is open: a replay would only wait behind it."""
    settled: bool
    """False: the cause names a run still open, so it is judged again at the next turn."""

    @classmethod
    def of(cls, found: dict[str, Any]) -> SlotCause:
        command = found.get("next_command")
        return cls(str(found["cause"]), str(found["text"]), command, settled=command is not None)


UNREADABLE = SlotCause(
    "unknown", "its cause cannot be read: the schedule is not cronwarden's", None, settled=True
)


@dataclass
class _Entry:
    digest: str | None
    grid: Grid | None = None
    live: Live | None = None
    absent: bool = False
    """Temporal has no such schedule (deleted elsewhere, or never created)."""
    wanted_at: float = 0.0
    missing: dict[datetime, float] = field(default_factory=dict)
    """Slots a page showed missing, with when it last did."""
    causes: dict[datetime, SlotCause] = field(default_factory=dict)


@dataclass(frozen=True)
class Lookup:
    expected: list[datetime] | None
    """The grid's last slots up to now; None: not known (see `note`)."""
    running: frozenset[datetime] = frozenset()
    buffered: int = 0
    note: str | None = None


class GridCache:
    """The page's view of Temporal. Read by requests (no I/O), written by `GridRefresher`."""

    def __init__(
        self, policy: RefreshPolicy | None = None, *, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.policy = policy or RefreshPolicy()
        self.clock = clock
        self.error: str | None = None
        """Why the last round could not ask Temporal, if it could not."""
        self.error_since: datetime | None = None
        self._entries: OrderedDict[str, _Entry] = OrderedDict()
        self._wake = asyncio.Event()

    async def woken(self, timeout: float) -> None:
        """Until a page wants a grid that is not there yet, or `timeout` seconds."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._wake.wait(), timeout=timeout)
        self._wake.clear()

    def want(self, schedules: Sequence[tuple[str, str | None]]) -> None:
        """The (schedule id, definition digest) a page just showed: kept fresh for a while.
        Wakes the refresher when one of them has no usable grid yet."""
        now = self.clock()
        pending = False
        for schedule_id, digest in schedules:
            entry = self._entries.get(schedule_id)
            if entry is None:
                entry = self._entries[schedule_id] = _Entry(digest)
            if entry.digest != digest:
                entry.digest = digest
                # Another definition, another grid: what was missing may not be any more.
                entry.missing.clear()
                entry.causes.clear()
                pending = True
            pending = pending or (entry.grid is None and not entry.absent)
            entry.wanted_at = now
            self._entries.move_to_end(schedule_id)
        while len(self._entries) > self.policy.max_schedules:
            self._entries.popitem(last=False)
        if pending:
            self._wake.set()

    def want_causes(self, schedule_id: str, missing: Sequence[datetime]) -> None:
        """The slots a page just showed missing: their causes are judged in the background.
        Wakes the refresher when one of them has no cause yet. No I/O (a request calls it)."""
        entry = self._entries.get(schedule_id)
        if entry is None or not missing:
            return
        now = self.clock()
        horizon = now - self.policy.wanted_for
        for t in missing:
            entry.missing[t] = now
        # Only the slots some page showed lately, and never more than a grid's length.
        kept = sorted(t for t, at in entry.missing.items() if at >= horizon)[-self.policy.slots :]
        entry.missing = {t: entry.missing[t] for t in kept}
        entry.causes = {t: c for t, c in entry.causes.items() if t in entry.missing}
        if any(t not in entry.causes for t in missing):
            self._wake.set()

    def causes(self, schedule_id: str) -> dict[datetime, SlotCause]:
        """The known causes of the schedule's missing slots, by fire time."""
        entry = self._entries.get(schedule_id)
        return dict(entry.causes) if entry is not None else {}

    def causes_due(self, schedule_id: str) -> list[datetime]:
        """The schedule's missing slots to judge: without a cause, or with one not settled."""
        entry = self._entries.get(schedule_id)
        if entry is None or entry.absent:
            return []
        return sorted(
            t for t in entry.missing if (c := entry.causes.get(t)) is None or not c.settled
        )

    def put_causes(self, schedule_id: str, found: dict[datetime, SlotCause]) -> None:
        entry = self._entries.get(schedule_id)
        if entry is None:
            return
        entry.causes.update({t: c for t, c in found.items() if t in entry.missing})

    def _live(self, entry: _Entry | None) -> Live | None:
        live = entry.live if entry is not None else None
        # Runs in flight are worth showing while recent: a stale list would call a finished
        # run running. The lease table still shows the runs that hold a lease.
        if live is not None and self.clock() - live.read_at > 3 * self.policy.period:
            return None
        return live

    def running(self, schedule_id: str) -> frozenset[datetime]:
        """The schedule's runs in flight as Temporal last said, if lately."""
        live = self._live(self._entries.get(schedule_id))
        return live.running if live else frozenset()

    def lookup(self, schedule_id: str, digest: str | None, *, now: datetime, n: int) -> Lookup:
        entry = self._entries.get(schedule_id)
        if entry is None:
            return Lookup(None, note=PENDING_NOTE)
        live = self._live(entry)
        running = live.running if live else frozenset()
        buffered = live.buffered if live else 0
        if entry.absent:
            return Lookup(None, note="the schedule is not in Temporal")
        grid = entry.grid
        if grid is None or grid.digest != digest:
            return Lookup(None, running, buffered, PENDING_NOTE)
        expected = grid.before(now, n)
        if expected is None:
            return Lookup(None, running, buffered, PENDING_NOTE)
        return Lookup(expected, running, buffered)

    def due(self, *, now: datetime) -> list[tuple[str, str | None]]:
        """The wanted schedules in the order a round takes them: without a usable grid first,
        then the longest since their runs were read."""
        horizon = self.clock() - self.policy.wanted_for
        soon = now + timedelta(seconds=3 * self.policy.period)

        def order(item: tuple[str, _Entry]) -> tuple[int, float]:
            _, entry = item
            grid = entry.grid
            usable = entry.absent or (
                grid is not None and grid.digest == entry.digest and grid.covers_until > soon
            )
            return (1 if usable else 0, entry.live.read_at if entry.live else 0.0)

        wanted = [(sid, e) for sid, e in self._entries.items() if e.wanted_at >= horizon]
        return [(sid, e.digest) for sid, e in sorted(wanted, key=order)]

    def needs_grid(self, schedule_id: str, digest: str | None, *, now: datetime) -> bool:
        entry = self._entries.get(schedule_id)
        if entry is None or entry.grid is None or entry.grid.digest != digest:
            return True
        return entry.grid.covers_until <= now + timedelta(seconds=3 * self.policy.period)

    def put(
        self,
        schedule_id: str,
        *,
        live: Live | None = None,
        grid: Grid | None = None,
        absent: bool = False,
    ) -> None:
        entry = self._entries.get(schedule_id)
        if entry is None:
            return  # no longer wanted (pushed out meanwhile)
        entry.absent = absent
        if live is not None:
            entry.live = live
        if grid is not None and grid.digest == entry.digest:
            entry.grid = grid

    def __len__(self) -> int:
        return len(self._entries)


@dataclass(frozen=True)
class RoundReport:
    asked: int
    grids: int
    """Grids (re)computed."""
    waiting_for_budget: int
    """Schedules whose grid needed a scratch schedule beyond the round's budget."""
    scratch_made: int
    error: str | None = None


class GridRefresher:
    """The background task that fills a `GridCache` (see the module docstring)."""

    def __init__(self, cache: GridCache, temporal: TemporalClient, pool: PoolSource) -> None:
        self.cache = cache
        self._temporal = temporal
        self._pool = pool
        self.policy = cache.policy
        self.in_round = False
        """A round is asking Temporal now."""

    async def run(self) -> None:
        """Rounds, and sweeps of leftover scratch schedules, until cancelled. Each loop logs a
        failure and goes on: one bad round must not end the refreshing."""
        async with asyncio.TaskGroup() as group:
            group.create_task(self._rounds(), name="status-page-grid-rounds")
            group.create_task(self._sweeps(), name="status-page-scratch-sweeps")

    async def _rounds(self) -> None:
        """One round per period at most, sooner after a quiet spell when a page finds grids
        pending."""
        last_start: float | None = None
        while True:
            if last_start is not None:
                # Woken early: the round still waits for its period to have passed.
                wait = last_start + self.policy.period - self.cache.clock()
                if wait > 0:
                    await asyncio.sleep(wait)
            last_start = self.cache.clock()
            try:
                await self.round()
            except Exception as exc:
                log.exception("monitor.status-grids-failed", error=f"{type(exc).__name__}: {exc}")
            await self.cache.woken(self.policy.period)

    async def _sweeps(self) -> None:
        while True:
            client = await self._temporal()
            if client is not None:
                try:
                    # Its own bound: listing ten thousand schedules takes a few pages.
                    async with asyncio.timeout(_SWEEP_TIMEOUT):
                        await sweep_scratch(client, now=datetime.now(UTC))
                except Exception as exc:  # the next sweep tries again
                    log.warning(
                        "monitor.scratch-sweep-failed", error=f"{type(exc).__name__}: {exc}"
                    )
            await asyncio.sleep(self.policy.sweep_every)

    async def round(self, *, now: datetime | None = None) -> RoundReport:
        now = now or datetime.now(UTC)
        due = self.cache.due(now=now)[: self.policy.schedules_per_round]
        if not due:
            return RoundReport(0, 0, 0, 0)
        self.in_round = True
        try:
            return await self._round(now, due)
        finally:
            self.in_round = False

    async def _round(self, now: datetime, due: list[tuple[str, str | None]]) -> RoundReport:
        client = await self._temporal()
        if client is None:
            return self._failed(now, "Temporal is unreachable", asked=len(due))
        pool = await self._pool()
        grids = waiting = 0

        async def one(item: tuple[str, str | None]) -> None:
            nonlocal grids, waiting
            schedule_id, digest = item
            computed = await self._refresh(client, pool, schedule_id, digest, now=now)
            grids += computed is True
            waiting += computed is None

        error: str | None = None
        with scratch_budget(self.policy.scratch_per_round) as budget:
            try:
                async with asyncio.timeout(self.policy.round_timeout):
                    outcomes = await try_bounded(one, due, limit=self.policy.concurrency)
                failure = next((o.error for o in outcomes if o.error is not None), None)
                if failure is not None:
                    # An RPC error is Temporal's; anything else (Postgres, for the definition
                    # history) is named as what it is.
                    source = "Temporal failed" if isinstance(failure, RPCError) else "failed"
                    error = f"reading the grids {source}: {type(failure).__name__}"
                    log.warning(
                        "monitor.status-page-temporal-failed",
                        error=f"{type(failure).__name__}: {failure}",
                    )
            except TimeoutError:
                error = f"Temporal did not answer within {self.policy.round_timeout:g}s"
        if error is not None:
            return self._failed(now, error, asked=len(due), grids=grids, scratch=budget.made)
        self.cache.error = self.cache.error_since = None
        # After the grids, never in their way: a cause is worth less than a timeline.
        await self._judge_round(client, pool, [sid for sid, _ in due], now=now)
        return RoundReport(len(due), grids, waiting, budget.made)

    async def _judge_round(
        self, client: Client, pool: asyncpg.Pool, schedule_ids: list[str], *, now: datetime
    ) -> None:
        """Judge the missing slots of up to `causes_per_round` of the round's schedules, within
        `causes_timeout`; what is not judged by then stays "cause pending" for the next round."""
        todo = [(sid, d) for sid in schedule_ids if (d := self.cache.causes_due(sid))]
        todo = todo[: self.policy.causes_per_round]
        if not todo:
            return
        gate = asyncio.Semaphore(self.policy.concurrency)

        async def one(sid: str, slots: list[datetime]) -> None:
            async with gate:
                await self._judge(client, pool, sid, slots, now=now)

        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(self.policy.causes_timeout):
                await asyncio.gather(*(one(sid, slots) for sid, slots in todo))

    async def _judge(
        self,
        client: Client,
        pool: asyncpg.Pool,
        schedule_id: str,
        due: list[datetime],
        *,
        now: datetime,
    ) -> None:
        """The causes of the schedule's missing slots `due`, into the cache."""
        try:
            found = await slot_causes(client, pool, schedule_id, due, now=now)
        except CronwardenError:
            # Not a schedule cronwarden manages (or deleted meanwhile): nothing to judge by,
            # and nothing to ask again each round.
            self.cache.put_causes(schedule_id, {t: UNREADABLE for t in due})
            return
        except Exception as exc:
            # Temporal failing, or one schedule's evidence unreadable: its slots stay "cause
            # pending" and are asked about again at its next turn; the grids go on regardless.
            log.warning(
                "monitor.slot-causes-failed",
                schedule_id=schedule_id,
                error=f"{type(exc).__name__}: {exc}",
            )
            return
        self.cache.put_causes(schedule_id, {t: SlotCause.of(c) for t, c in found.items()})

    def _failed(
        self, now: datetime, error: str, *, asked: int, grids: int = 0, scratch: int = 0
    ) -> RoundReport:
        if self.cache.error is None:
            self.cache.error_since = now
        self.cache.error = error
        return RoundReport(asked, grids, 0, scratch, error)

    async def _refresh(
        self,
        client: Client,
        pool: asyncpg.Pool,
        schedule_id: str,
        digest: str | None,
        *,
        now: datetime,
    ) -> bool | None:
        """Re-read the schedule's runs, and its grid when due. True: a grid was computed;
        False: none was needed; None: it needs a scratch schedule the budget has no room for."""
        desc = await describe_or_none(client, schedule_id)
        if desc is None:
            self.cache.put(schedule_id, absent=True)
            return False
        running = await running_fire_times_of(client, schedule_id, desc)
        live = Live(
            frozenset(running), int(desc.raw_description.info.buffer_size), self.cache.clock()
        )
        self.cache.put(schedule_id, live=live)
        if not self.cache.needs_grid(schedule_id, digest, now=now):
            return False
        info = desc.info
        now = now.replace(microsecond=0)
        n = self.policy.slots
        lookback = first_lookback(info.next_action_times, n)
        ahead = min(max(lookback, _MIN_AHEAD), _MAX_AHEAD)
        cut = int(now.timestamp())
        try:
            while True:
                window = Window(now - lookback, now + ahead).clamped_to(info.created_at)
                seconds: array[int] = array("q")
                # The pool, not a connection: the history read holds a connection for its own
                # statement only, never while Temporal answers.
                async for page in expected_pages(client, pool, schedule_id, window, live=desc):
                    seconds.extend(page)
                past = sum(1 for s in seconds if s <= cut)
                # A spec with gaps (weekdays only) needs longer looks back, each 4 times the
                # last, until `n` slots are found or the schedule's creation is reached.
                if past >= n or window.start > now - lookback or lookback >= _MAX_LOOKBACK:
                    break
                lookback = min(lookback * 4, _MAX_LOOKBACK)
        except ScratchBudgetSpent:
            return None
        future = [s for s in seconds if s > cut]
        covers_until = window.end
        if len(future) > _AHEAD_SLOTS * n:
            # Every time up to the last one kept is known; past it, nothing is.
            future = future[: _AHEAD_SLOTS * n]
            covers_until = datetime.fromtimestamp(future[-1], UTC)
        keep = array("q", [s for s in seconds if s <= cut][-n:] + future)
        self.cache.put(schedule_id, live=live, grid=Grid(digest, keep, covers_until=covers_until))
        return True


def first_lookback(next_times: Sequence[datetime], n: int) -> timedelta:
    """`n` slots back at the tightest gap among the next fire times (a day a slot when Temporal
    lists fewer than two)."""
    gaps = [b - a for a, b in itertools.pairwise(next_times) if b > a]
    step = min(gaps) if gaps else timedelta(days=1)
    return min(step * (n + 1), _MAX_LOOKBACK)
