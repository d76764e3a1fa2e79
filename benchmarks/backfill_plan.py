"""How long `backfill plan` takes, and how much memory it holds, for windows of minutely fires
against a large outbox. Not a test: it prints a table.

    .venv/bin/python -m benchmarks.backfill_plan [--repeat 3]

It starts its own Temporal dev server and Postgres (the embedded stack, in a temp dir), creates
one paused minutely schedule, seeds the outbox with a year of that schedule's fires minus 1 %
(one `INSERT ... SELECT generate_series`), then plans windows of one day, 30 days and one year.
The planned window is NOT clamped to the schedule's creation (it was created seconds ago): the
point is the cost of the stream, and ListScheduleMatchingTimes evaluates the spec over any range.

It runs every window twice: against an empty outbox (every key missing) and against the seeded
one. Columns: `matching` is the Temporal stream alone (no database); `plan` the whole plan as
`backfill plan` runs it (it fetches the next page from Temporal while Postgres works on the
current one); `keys/s` expected keys per second of `plan`; `peak MiB` the largest Python
allocation seen during one plan (tracemalloc, in a separate pass so tracing does not slow the
timed ones); then the same stream without the prefetch, for three ways of subtracting a page
from the outbox: a NOT EXISTS probe per element, EXCEPT against one range scan (the plan's
statement), and a range scan whose rows are subtracted in Python.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
import tracemalloc
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import asyncpg
from temporalio.client import Client

from cronwarden.embedded import EmbeddedPostgres, EmbeddedTemporal, free_port
from schedules.apply import apply_definitions
from schedules.backfill import matching_times, plan_window
from schedules.model import ScheduleDefinition
from schedules.window import Window
from store.migrate import migrate
from store.pool import create_pool

SCHEDULE_ID = "bench-minutely"
YEAR = timedelta(days=365)
WINDOWS = [("1 day", timedelta(days=1)), ("30 days", timedelta(days=30)), ("1 year", YEAR)]
# Every 100th minute has no outbox record: the plan must find each of them.
GAP_EVERY_SECONDS = 6000

_SEED = """
INSERT INTO cronwarden.outbox
       (logical_key, schedule_id, fire_time, attempt, fencing_token, worker, args_digest)
SELECT $1 || '@' || to_char(t AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"'),
       $1, t, 1, 0, 'benchmark', 'seed'
  FROM generate_series($2::timestamptz, $3::timestamptz, interval '1 minute') AS t
 WHERE extract(epoch FROM t)::bigint % $4 <> 0
"""

# The ways to subtract one page of fire times from the outbox, compared side by side. Each
# returns how many of the page's fire times have no record.
_NOT_EXISTS = """
SELECT count(*) FROM unnest($2::bigint[]) AS s
 WHERE NOT EXISTS (SELECT 1 FROM cronwarden.outbox o
                    WHERE o.schedule_id = $1 AND o.fire_time = to_timestamp(s))
"""
_EXCEPT = """
SELECT count(*) FROM (
    SELECT s FROM unnest($2::bigint[]) AS s
    EXCEPT
    SELECT extract(epoch FROM fire_time)::bigint FROM cronwarden.outbox
     WHERE schedule_id = $1 AND fire_time BETWEEN to_timestamp($3) AND to_timestamp($4)
) AS missing
"""
_RANGE = """
SELECT extract(epoch FROM fire_time)::bigint FROM cronwarden.outbox
 WHERE schedule_id = $1 AND fire_time BETWEEN to_timestamp($2) AND to_timestamp($3)
"""


async def _not_exists(conn: Any, page: list[int]) -> int:
    n: int = await conn.fetchval(_NOT_EXISTS, SCHEDULE_ID, page)
    return n


async def _except(conn: Any, page: list[int]) -> int:
    n: int = await conn.fetchval(_EXCEPT, SCHEDULE_ID, page, page[0], page[-1])
    return n


async def _range_then_python(conn: Any, page: list[int]) -> int:
    done = {r[0] for r in await conn.fetch(_RANGE, SCHEDULE_ID, page[0], page[-1])}
    return sum(1 for s in page if s not in done)


STRATEGIES: dict[str, Callable[[Any, list[int]], Awaitable[int]]] = {
    "not-exists": _not_exists,
    "except": _except,  # the plan's own statement, without the page prefetch
    "range+py": _range_then_python,
}


async def _with_strategy(
    client: Client, pool: asyncpg.Pool, window: Window, strategy: Callable[..., Awaitable[int]]
) -> int:
    missing = 0
    async with pool.acquire() as conn:
        async for page in matching_times(client, SCHEDULE_ID, window):
            missing += await strategy(conn, page)
    return missing


async def _matching_only(client: Client, window: Window) -> int:
    return sum([len(page) async for page in matching_times(client, SCHEDULE_ID, window)])


def _bind(func: Callable[..., Awaitable[Any]], *args: Any) -> Callable[[], Awaitable[Any]]:
    return lambda: func(*args)


async def _best_of(repeat: int, make: Callable[[], Awaitable[Any]]) -> tuple[float, Any]:
    times, result = [], None
    for _ in range(repeat):
        started = time.perf_counter()
        result = await make()
        times.append(time.perf_counter() - started)
    return min(times), result


async def _peak_mib(make: Callable[[], Awaitable[Any]]) -> float:
    tracemalloc.start()
    try:
        await make()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return peak / 2**20


async def run(repeat: int) -> None:
    with tempfile.TemporaryDirectory(prefix="cw-bench-") as tmp:
        root = Path(tmp)
        postgres = EmbeddedPostgres(
            data_dir=root / "pg", port=free_port(), fast_unsafe=True, log_file=root / "pg.log"
        )
        temporal = EmbeddedTemporal(
            port=free_port(), ui_port=None, db_file=None, log_file=root / "temporal.log"
        )
        postgres.start()
        temporal.start()
        try:
            await _bench(postgres, temporal, repeat)
        finally:
            temporal.stop()
            postgres.stop()


async def _seed(pool: asyncpg.Pool, end: datetime) -> None:
    async with pool.acquire() as conn:
        await conn.execute(
            _SEED, SCHEDULE_ID, end - YEAR + timedelta(minutes=1), end, GAP_EVERY_SECONDS
        )
        await conn.execute("ANALYZE cronwarden.outbox")


async def _row(client: Client, pool: asyncpg.Pool, window: Window, repeat: int) -> str:
    matching_s, _ = await _best_of(repeat, _bind(_matching_only, client, window))
    plan_s, planned = await _best_of(repeat, _bind(plan_window, client, pool, SCHEDULE_ID, window))
    peak = await _peak_mib(_bind(plan_window, client, pool, SCHEDULE_ID, window))
    cells = []
    for strategy in STRATEGIES.values():
        took, missing = await _best_of(
            repeat, _bind(_with_strategy, client, pool, window, strategy)
        )
        assert missing == len(planned.missing), "a strategy disagrees with the plan"
        cells.append(f"{took:>10.2f}s")
    return (
        f"{planned.expected:>9,} {len(planned.missing):>8,} {matching_s:>8.2f}s "
        f"{plan_s:>7.2f}s {planned.expected / plan_s:>9,.0f} {peak:>9.2f} " + " ".join(cells)
    )


async def _bench(postgres: EmbeddedPostgres, temporal: EmbeddedTemporal, repeat: int) -> None:
    postgres.create_database("bench")
    pool = await create_pool(postgres.dsn("bench"), max_size=2)
    client = await Client.connect(temporal.address)
    try:
        async with pool.acquire() as conn:
            await migrate(conn)
        defn = ScheduleDefinition.model_validate(
            {"id": SCHEDULE_ID, "job": "probe", "cron": "* * * * *"}
        )
        await apply_definitions(client, None, [defn], task_queue="benchmark-nobody-polls")
        await client.get_schedule_handle(SCHEDULE_ID).pause(note="benchmark")

        end = datetime.now(UTC).replace(second=0, microsecond=0) - timedelta(minutes=1)
        print(f"best of {repeat} runs; peak = tracemalloc peak during one plan\n")
        names = list(STRATEGIES)
        header = (
            f"{'outbox rows':>11} {'window':<8} {'expected':>9} {'missing':>8} {'matching':>9} "
            f"{'plan':>8} {'keys/s':>9} {'peak MiB':>9} " + " ".join(f"{n:>11}" for n in names)
        )
        print(header)
        print("-" * len(header))
        for seeded in (False, True):
            if seeded:
                await _seed(pool, end)
            async with pool.acquire() as conn:
                rows = await conn.fetchval("SELECT count(*) FROM cronwarden.outbox")
            for name, length in WINDOWS:
                window = Window(end - length + timedelta(minutes=1), end)
                cells = await _row(client, pool, window, repeat)
                print(f"{rows:>11,} {name:<8} {cells}")
    finally:
        await pool.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--repeat", type=int, default=3, help="timed runs per cell (best kept)")
    args = parser.parse_args()
    asyncio.run(run(args.repeat))


if __name__ == "__main__":
    main()
