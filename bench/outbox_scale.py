"""Issue 35: what the outbox costs as it fills, at 1 million records and at 10 million (100
million with `--full`), and what converting an existing outbox costs the commits meanwhile.

Each size gets a database of its own, filled inside Postgres (generate_series) with a fleet
firing every 5 minutes across 13 months back from now, the span the default horizon keeps:
the partitions are the same at every size, only the fleet is larger (9 schedules at 1M, 89 at
10M, 890 at 100M), so one schedule's day holds the same 288 fires at each. Measured per size:

- a live fire's guard round trips (per-key lease, then the commit statement; 2 round trips)
  and the throughput of 8 of them at once;
- the guard's "done?" look for an old key (a replay, or a retry), which reads the outbox by
  key alone: one index probe per partition;
- `backfill plan`'s outbox read for one schedule's day (store.outbox.missing_fire_times; the
  rest of a plan is Temporal's and does not depend on the outbox);
- the monitor's outbox work per pass: the partition upkeep, and the status page's timelines
  (store.outbox.recent for 10 schedules);
- disk per million fires (tables and indexes, every partition);
- the oldest month dropped past the horizon while fires commit, and the longest fire meanwhile.

The goal: at the largest size every figure within 1.2x of its value at 1 million. Then a plain
(unpartitioned) outbox of each size is converted by `migrate` while fires commit: its duration,
and the longest a commit waited meanwhile against the median before.
"""

from __future__ import annotations

import asyncio
import json
import os
import statistics
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from bench.stack import BenchStack
from bench.table import Row
from cronwarden.activities.contract import logical_key
from cronwarden.store import outbox, outbox_partitions
from cronwarden.store.migrate import migrate
from cronwarden.store.pool import connect, create_pool
from tests.support.outbox_fires import Committer, commit_fire, create_months, fill

SIZES = (1_000_000, 10_000_000)
FULL_SIZES = (1_000_000, 100_000_000)
QUICK_SIZES = (10_000, 100_000)
STEP = timedelta(minutes=5)
SPAN = timedelta(days=390)
GOAL_RATIO = 1.2
# Rows per fill statement: a statement's work is kept to minutes, and progress shows.
CHUNK = 5_000_000


def full_run() -> bool:
    """`python -m bench --full` (it sets this): 100 million rows instead of 10 million."""
    return os.environ.get("CRONWARDEN_BENCH_FULL") == "1"


@dataclass(frozen=True)
class Figures:
    rows: int
    fill_s: float
    fire_ms: float
    fires_per_s: float
    done_ms: float
    plan_ms: float
    upkeep_ms: float
    timelines_ms: float
    mb_per_million: float
    drop_ms: float
    drop_fire_ms: float
    done_pages: int
    fresh_pages: int


async def _median_ms(runs: int, call: Callable[[], Awaitable[object]]) -> float:
    times = []
    for _ in range(runs):
        began = time.perf_counter()
        await call()
        times.append((time.perf_counter() - began) * 1000)
    return statistics.median(times)


@dataclass(frozen=True)
class Filled:
    dsn: str
    name: str
    start: datetime
    """The fleet's first fire time; each schedule fires every STEP from it."""
    per_schedule: int
    """Fires of each schedule."""


_BY_KEY_AND_TIME = (
    "SELECT args_digest FROM cronwarden.outbox WHERE logical_key = $1 AND fire_time = $2"
)
_BY_KEY = "SELECT args_digest FROM cronwarden.outbox WHERE logical_key = $1"


async def _pages(conn: Any, query: str, *args: object) -> int:
    """Shared buffers (hit or read) one execution of `query` touches, by EXPLAIN ANALYZE."""
    plan = await conn.fetchval(f"EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) {query}", *args)
    top = json.loads(plan)[0]["Plan"]
    return int(top["Shared Hit Blocks"] + top["Shared Read Blocks"])


async def _filled(stack: BenchStack, rows: int, *, partitioned: bool) -> Filled:
    """A database holding `rows` records, in the months an installation running for SPAN holds
    (or in one plain table, as before migration 0019)."""
    name = f"bench_outbox_{rows}_{'p' if partitioned else 'plain'}_{time.monotonic_ns() % 10**6}"
    stack.postgres.create_database(name)
    dsn = stack.postgres.dsn(name)
    conn = await connect(dsn)
    try:
        await migrate(conn, through=None if partitioned else 18)
        schedules = max(1, round(rows * STEP / SPAN))
        now = await conn.fetchval("SELECT date_trunc('hour', now())")
        start = now - SPAN
        if partitioned:
            await create_months(conn, start, now)
        for first in range(0, rows, CHUNK):
            await fill(
                conn,
                rows=min(CHUNK, rows - first),
                schedules=schedules,
                start=start,
                step=STEP,
                first=first,
            )
        await conn.execute("VACUUM ANALYZE cronwarden.outbox")
        # The fill's dirty pages written out now, not while the figures are taken.
        await conn.execute("CHECKPOINT")
    finally:
        await conn.close()
    return Filled(dsn, name, start, rows // schedules)


async def _drop(stack: BenchStack, name: str) -> None:
    conn = await connect(stack.postgres.dsn())
    try:
        await conn.execute(f'DROP DATABASE "{name}"')
    finally:
        await conn.close()


async def _figures(stack: BenchStack, rows: int) -> Figures:
    began = time.monotonic()
    filled = await _filled(stack, rows, partitioned=True)
    dsn, start, per_schedule = filled.dsn, filled.start, filled.per_schedule
    fill_s = time.monotonic() - began
    runs = 10 if stack.quick else 200
    pool = await create_pool(dsn, max_size=10)
    try:
        async with pool.acquire() as conn:
            now = await conn.fetchval("SELECT date_trunc('second', now())")
        fires = iter(range(10**9))

        async def live_fire(schedule: str = "bench-live") -> None:
            outcome = await commit_fire(pool, schedule, now + timedelta(seconds=next(fires)))
            assert outcome is not None and outcome.recorded

        await live_fire()  # the statements prepared on the connection, caches warm
        fire_ms = await _median_ms(runs, live_fire)

        async def eight_at_once() -> None:
            await asyncio.gather(*(live_fire(f"bench-live-{i}") for i in range(8)))

        rounds = 3 if stack.quick else 40
        began_batch = time.perf_counter()
        for _ in range(rounds):
            await eight_at_once()
        fires_per_s = rounds * 8 / (time.perf_counter() - began_batch)

        old = [start + STEP * k for k in range(0, per_schedule, max(1, per_schedule // 113))]
        olds = iter(old * (runs // len(old) + 2))

        async def done_look() -> None:
            assert await commit_fire(pool, "fleet-0", next(olds)) is None

        done_ms = await _median_ms(runs, done_look)
        async with pool.acquire() as conn:
            # Pages read, which the machine's load does not change: a done key's month, and a
            # key not done yet, which is read by key alone in every month.
            known = old[len(old) // 2]
            done_pages = await _pages(conn, _BY_KEY_AND_TIME, logical_key("fleet-0", known), known)
            fresh_pages = await _pages(conn, _BY_KEY, logical_key("fleet-0", now))

        day = start + STEP * (per_schedule // 2)
        page = [int((day + STEP * k).timestamp()) for k in range(288)]
        async with pool.acquire() as conn:

            async def plan_day() -> None:
                assert await outbox.missing_fire_times(conn, "fleet-0", page) == []

            plan_ms = await _median_ms(runs, plan_day)
            upkeep_ms = await _median_ms(
                max(3, runs // 20), lambda: outbox_partitions.upkeep(conn, timedelta(days=400))
            )
            since = {f"fleet-{i}": datetime.min.replace(tzinfo=UTC) for i in range(10)}
            timelines_ms = await _median_ms(
                runs, lambda: outbox.recent(conn, since, until=now, limit=48)
            )
            # The oldest month dropped past a horizon while fires commit (what the monitor's
            # upkeep does once a month): how long, and the longest a fire waited meanwhile.
            committer = Committer(pool, "bench-drop", start=now + timedelta(days=1))
            committer.begin()
            try:
                await committer.until(20, what="fires")
                before = len(committer.latencies)
                horizon = now - (start + timedelta(days=32)).replace(day=1, hour=0)
                began_drop = time.perf_counter()
                dropped = await outbox_partitions.drop_past(conn, horizon)
                drop_ms = (time.perf_counter() - began_drop) * 1000
                await committer.until(len(committer.committed) + 20, what="fires")
            finally:
                await committer.stop()
            assert len(dropped) == 1 and not committer.errors, (dropped, committer.errors[:3])
            drop_fire_ms = max(committer.latencies[before:]) * 1000
            size = await conn.fetchval(
                "SELECT sum(pg_total_relation_size(i.inhrelid))::float8 FROM pg_inherits i"
                " WHERE i.inhparent = 'cronwarden.outbox'::regclass"
            )
            total = await conn.fetchval("SELECT count(*) FROM cronwarden.outbox")
    finally:
        await pool.close()
    await _drop(stack, filled.name)
    return Figures(
        rows=rows,
        fill_s=fill_s,
        fire_ms=fire_ms,
        fires_per_s=fires_per_s,
        done_ms=done_ms,
        plan_ms=plan_ms,
        upkeep_ms=upkeep_ms,
        timelines_ms=timelines_ms,
        mb_per_million=size / 2**20 / (total / 1e6),
        drop_ms=drop_ms,
        drop_fire_ms=drop_fire_ms,
        done_pages=done_pages,
        fresh_pages=fresh_pages,
    )


@dataclass(frozen=True)
class Conversion:
    rows: int
    migrate_s: float
    median_fire_ms: float
    longest_fire_ms: float
    fires_during: int


async def _conversion(stack: BenchStack, rows: int) -> Conversion:
    filled = await _filled(stack, rows, partitioned=False)
    dsn = filled.dsn
    pool = await create_pool(dsn, max_size=4)
    conn = await connect(dsn)
    try:
        now = await conn.fetchval("SELECT date_trunc('second', now())")
        committer = Committer(pool, "bench-live", start=now)
        committer.begin()
        try:
            await committer.until(50, what="fires committing")
            before = len(committer.latencies)
            began = time.perf_counter()
            await migrate(conn)
            migrate_s = time.perf_counter() - began
            during = committer.latencies[before:]
        finally:
            await committer.stop()
        assert not committer.errors and not committer.duplicates, committer.errors[:3]
    finally:
        await conn.close()
        await pool.close()
    await _drop(stack, filled.name)
    return Conversion(
        rows=rows,
        migrate_s=migrate_s,
        median_fire_ms=statistics.median(committer.latencies[:before]) * 1000,
        longest_fire_ms=max(during) * 1000 if during else 0.0,
        fires_during=len(during),
    )


def _label(rows: int) -> str:
    return f"{rows // 1_000_000}M" if rows >= 1_000_000 else f"{rows // 1000}k"


def _rows(figures: list[Figures], conversions: list[Conversion], *, judged: bool) -> list[Row]:
    base, top = figures[0], figures[-1]
    out: list[Row] = []
    metrics: list[tuple[str, str, Callable[[Figures], float], bool]] = [
        ("live fire: lease + commit, 2 round trips", "ms", lambda f: f.fire_ms, False),
        ("live fires, 8 at once", "fires/s", lambda f: f.fires_per_s, True),
        ("guard's done? look of an old key", "ms", lambda f: f.done_ms, False),
        ("pages read: a done key's record", "pages", lambda f: f.done_pages, False),
        ("pages read: a key not done yet (every month)", "pages", lambda f: f.fresh_pages, False),
        ("backfill plan's outbox read, one schedule's day", "ms", lambda f: f.plan_ms, False),
        ("monitor: partition upkeep", "ms", lambda f: f.upkeep_ms, False),
        ("status timelines, 10 schedules", "ms", lambda f: f.timelines_ms, False),
        ("disk per million fires", "MB", lambda f: f.mb_per_million, False),
    ]
    for metric, unit, value, higher_is_better in metrics:
        ours, baseline = value(top), value(base)
        # How much worse the largest size is: a throughput worse when lower.
        ratio = baseline / ours if higher_is_better else ours / baseline
        out.append(
            Row(
                metric=f"outbox {_label(top.rows)}: {metric}",
                ours=f"{ours:.2f} {unit}",
                baseline=f"{baseline:.2f} {unit} (at {_label(base.rows)})",
                ratio=f"{ratio:.2f}x",
                goal=f"< {GOAL_RATIO:g}x",
                met=ratio < GOAL_RATIO if judged else None,
            )
        )
    for f in figures:
        out.append(Row(metric=f"outbox {_label(f.rows)}: generated in", ours=f"{f.fill_s:.0f} s"))
        out.append(
            Row(
                metric=f"outbox {_label(f.rows)}: oldest month dropped while fires commit",
                ours=f"{f.drop_ms:.0f} ms",
                baseline=f"{f.drop_fire_ms:.0f} ms (longest fire meanwhile)",
            )
        )
    for c in conversions:
        out.append(
            Row(
                metric=f"outbox {_label(c.rows)}: converted online by migrate in",
                ours=f"{c.migrate_s:.1f} s",
            )
        )
        out.append(
            Row(
                metric=f"outbox {_label(c.rows)}: longest fire while converting",
                ours=f"{c.longest_fire_ms:.0f} ms (of {c.fires_during} fires)",
                baseline=f"{c.median_fire_ms:.1f} ms (median before)",
            )
        )
    return out


async def measure(stack: BenchStack, *, quick: bool) -> list[Row]:
    sizes = QUICK_SIZES if quick else FULL_SIZES if full_run() else SIZES
    figures = [await _figures(stack, rows) for rows in sizes]
    conversions = [await _conversion(stack, rows) for rows in sizes]
    return _rows(figures, conversions, judged=not quick)
