"""Item 2: `backfill plan` of a year of minutely fires (525,600 keys) against an outbox that
holds 500,000 of them, evenly spread: its time and the peak memory of the command.

One paused minutely schedule (on a task queue no worker polls); the outbox seeded with one
`INSERT ... SELECT generate_series`. Each figure is the median of the stack's runs:

- the plan in process (`plan_window`, what the commands run), beside Temporal's matching-times
  stream alone, which is the floor: the plan cannot be faster than Temporal lists the times.
  The two run back to back in each round, and the ratio is the median of the rounds' ratios;
- the real commands as subprocesses (`backfill plan --json`, `backfill run --dry-run`, `audit`
  and `audit --json`, through `bench.cli_unclamped`, which only moves the schedule's creation
  a year back so the window is not clamped away): wall time from exec to exit, interpreter
  start and imports included, beside Temporal's matching times alone;
- each subprocess's peak RSS (its own VmHWM, written as it exits: bench/cpu.py says why not
  wait4's), beside `backfill plan --json` over one hour of the same schedule: the process's
  own size, which the window adds to. The outputs are written as they are formatted, so a
  year's keys should add little;
- the same for the largest document, `backfill run --dry-run --json` of a schedule with no
  outbox record at all: every key of the year and the workflow id of each.

`python -m bench.backfill_plan [--repeat 3]` prints the older, wider table: windows of one day,
30 days and a year, against an empty and the seeded outbox, with tracemalloc's peak and four
ways of subtracting a page from the outbox side by side (a NOT EXISTS probe per element,
EXCEPT against one range scan, a range scan's rows subtracted in Python, and the range scan's
times as one array subtracted in Python, which is the plan's statement).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import time
import tracemalloc
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from statistics import median
from typing import Any

import asyncpg
from temporalio.client import Client

from bench.stack import BenchStack, boot
from bench.table import Row, beside
from cronwarden.backfill.plan import matching_times, plan_window
from cronwarden.backfill.window import Window
from cronwarden.logs import configure
from cronwarden.schedules.apply import apply_definitions
from cronwarden.schedules.model import ScheduleDefinition
from cronwarden.store import outbox
from cronwarden.store.pool import create_pool
from cronwarden.times import utc_text

SCHEDULE_ID = "bench-minutely"
NONE_DONE_ID = "bench-minutely-none-done"
"""The same schedule without a single outbox record: every key of the window is listed."""
TASK_QUEUE = "bench-backfill-nobody-polls"
KEYS = 525_600  # a year of minutely fires
DONE = 500_000
QUICK_KEYS = 1_440  # a day
RATIO_GOAL = 1.1
GOAL_MIB = 300.0
CLI_TIMEOUT = 120.0

# Key i of the window is left out when i * missing / keys steps to the next integer: exactly
# `missing` gaps, spread evenly.
_SEED = """
INSERT INTO cronwarden.outbox
       (logical_key, schedule_id, fire_time, attempt, fencing_token, worker, args_digest)
SELECT $1 || '@' || to_char(t AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"'),
       $1, t, 1, 0, 'benchmark', 'seed'
  FROM generate_series(0::bigint, $3::bigint - 1) AS i,
       LATERAL (SELECT $2::timestamptz + make_interval(mins => i::int)) AS f(t)
 WHERE (i * $4) / $3 = ((i + 1) * $4) / $3
"""

# The ways to subtract one page of fire times from the outbox, compared side by side by
# `main`. Each returns how many of the page's fire times have no record.
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


# --- setup, shared by `measure` and `main` --------------------------------------------------------


def year_end() -> datetime:
    """The last whole minute that has passed: `backfill plan` refuses an end in the future."""
    return datetime.now(UTC).replace(second=0, microsecond=0) - timedelta(minutes=1)


def window_of(keys: int, end: datetime) -> Window:
    return Window(end - timedelta(minutes=keys - 1), end)


async def create_schedule(client: Client, schedule_id: str = SCHEDULE_ID) -> None:
    # The two schedules of `measure` share job and spec on purpose.
    defn = ScheduleDefinition.model_validate(
        {"id": schedule_id, "job": "probe", "cron": "* * * * *", "allow_duplicate": True}
    )
    await apply_definitions(client, None, [defn], task_queue=TASK_QUEUE)
    await client.get_schedule_handle(schedule_id).pause(note="benchmark")


async def seed(pool: asyncpg.Pool, window: Window, *, keys: int, missing: int) -> None:
    async with pool.acquire() as conn:
        await conn.execute(_SEED, SCHEDULE_ID, window.start, keys, missing)
        await conn.execute("ANALYZE cronwarden.outbox")


# --- item 2 ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CliRun:
    seconds: float
    max_rss_mib: float
    output: str


def _run_cli(argv: list[str], env: dict[str, str], out: Path, errors: Path) -> CliRun:
    """Run the command to its exit; blocking, so it runs in a thread."""
    peak_file = out.with_suffix(".peak-rss")
    peak_file.unlink(missing_ok=True)
    # stderr goes to a file, not a pipe: nobody reads a pipe while wait blocks, and a chatty
    # child would fill it and hang.
    with out.open("wb") as stdout, errors.open("wb") as stderr:
        started = time.perf_counter()
        proc = subprocess.Popen(
            argv, env=env | {"BENCH_PEAK_RSS_FILE": str(peak_file)}, stdout=stdout, stderr=stderr
        )
        try:
            proc.wait(timeout=CLI_TIMEOUT)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        seconds = time.perf_counter() - started
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(argv[1:])} exited {proc.returncode}: {errors.read_text()}")
    # The child's own figure (bench.cli_unclamped): wait4's ru_maxrss would carry this
    # process's peak into the child's.
    peak = peak_file.read_text().strip()
    if peak == "None":
        raise RuntimeError("the command could not read its own peak RSS (no /proc/self/status)")
    return CliRun(seconds, float(peak), out.read_text())


@dataclass(frozen=True)
class Command:
    """One command over the window, and how to tell that its output covers every key."""

    label: str
    args: list[str]
    listed: Callable[[str], int]
    """How many keys the output lists as missing (or would replay)."""
    exact: bool = True
    """False for `audit`, whose window runs on to now: a minute or two more than the plan's."""


def _json_keys(text: str) -> int:
    return len(json.loads(text)["missing_keys"])


def _lines(prefix: str) -> Callable[[str], int]:
    return lambda text: sum(1 for line in text.splitlines() if line.startswith(prefix))


def commands(window: Window) -> list[Command]:
    span = ["--start", utc_text(window.start), "--end", utc_text(window.end)]
    since = ["--since", utc_text(window.start)]
    return [
        Command(
            "backfill plan --json", ["backfill", "plan", SCHEDULE_ID, *span, "--json"], _json_keys
        ),
        Command(
            "backfill run --dry-run",
            # The bench's schedules are paused (nothing may fire into the measured window).
            ["backfill", "run", SCHEDULE_ID, *span, "--dry-run", "--include-paused"],
            _lines("  would replay "),
        ),
        Command("audit", ["audit", SCHEDULE_ID, *since], _lines("  missing "), exact=False),
        Command("audit --json", ["audit", SCHEDULE_ID, *since, "--json"], _json_keys, exact=False),
    ]


def worst_case(window: Window) -> Command:
    """The largest document: every key of the window, and the workflow id of each."""
    span = ["--start", utc_text(window.start), "--end", utc_text(window.end)]
    return Command(
        "backfill run --dry-run --json",
        ["backfill", "run", NONE_DONE_ID, *span, "--dry-run", "--include-paused", "--json"],
        lambda text: len(json.loads(text)["workflow_ids"]),
    )


async def _cli(stack: BenchStack, dsn: str, window: Window, args: list[str]) -> CliRun:
    env = stack.cli_env(dsn, task_queue=TASK_QUEUE)
    env["BENCH_SCHEDULE_CREATED_AT"] = (window.start - timedelta(days=1)).isoformat()
    argv = [*stack.python_argv("-m", "bench.cli_unclamped"), "--log-level", "WARNING", *args]
    out = stack.work_dir / "cli.out"
    return await asyncio.to_thread(_run_cli, argv, env, out, stack.work_dir / "cli.stderr")


async def _plan_and_matching(
    client: Client, pool: asyncpg.Pool, window: Window, repeat: int
) -> tuple[float, float, float]:
    """Median plan time, median matching-times time and the median of the per-round ratios:
    the two run back to back in each round, so a slow moment of the machine weighs on both."""
    plans, matchings, ratios = [], [], []
    for _ in range(repeat):
        started = time.perf_counter()
        await plan_window(client, pool, SCHEDULE_ID, window)
        plans.append(time.perf_counter() - started)
        started = time.perf_counter()
        await _count_matching(client, window)
        matchings.append(time.perf_counter() - started)
        ratios.append(plans[-1] / matchings[-1])
    return median(plans), median(matchings), median(ratios)


async def measure(stack: BenchStack, *, quick: bool) -> list[Row]:
    keys = QUICK_KEYS if quick else KEYS
    missing = keys - round(keys * DONE / KEYS)
    dsn = stack.dsn_for("backfill")
    pool = await create_pool(dsn, max_size=2)
    client = stack.client
    measured: list[tuple[str, list[CliRun]]] = []
    created: list[str] = []
    try:
        for schedule_id in (SCHEDULE_ID, NONE_DONE_ID):
            await create_schedule(client, schedule_id)
            created.append(schedule_id)
        window = window_of(keys, year_end())
        await seed(pool, window, keys=keys, missing=missing)

        planned = await plan_window(client, pool, SCHEDULE_ID, window)
        if (planned.expected, len(planned.missing)) != (keys, missing):
            raise RuntimeError(
                f"planned {planned.expected} keys, {len(planned.missing)} missing: "
                f"expected {keys} and {missing}"
            )
        plan_s, matching_s, plan_ratio = await _plan_and_matching(
            client, pool, window, stack.repeat
        )
        hour = window_of(60, window.end)
        small = [await _cli(stack, dsn, hour, commands(hour)[0].args) for _ in range(stack.repeat)]
        what = f"{keys:,} keys, {keys - missing:,} done"
        cases = [(command, what, missing) for command in commands(window)]
        cases.append((worst_case(window), f"{keys:,} keys, none done", keys))
        for command, named, listing in cases:
            runs = [await _cli(stack, dsn, window, command.args) for _ in range(stack.repeat)]
            listed = {command.listed(r.output) for r in runs}
            if any(n != listing if command.exact else n < listing for n in listed):
                raise RuntimeError(
                    f"`{command.label}` listed {sorted(listed)} keys, the plan {listing}"
                )
            measured.append((f"`cronwarden {command.label}`, {named}", runs))
    finally:
        await pool.close()
        for schedule_id in created:
            await client.get_schedule_handle(schedule_id).delete()

    judged = not quick
    hour_mib = median([r.max_rss_mib for r in small])
    # Judged on the ratio, not on seconds: Temporal's own evaluation of the spec is the floor.
    floor = f"{matching_s:.2f} s (Temporal's times alone)"
    rows = [
        Row(
            metric=f"backfill plan, {what}: in process",
            ours=f"{plan_s:.2f} s",
            baseline=floor,
            ratio=f"{plan_ratio:.2f}x (median of per-round ratios)",
            goal=f"<= {RATIO_GOAL}x",
            met=plan_ratio <= RATIO_GOAL if judged else None,
        )
    ]
    for name, done in measured:
        wall = median([r.seconds for r in done])
        rows.append(
            Row(
                metric=f"{name}: wall time",
                ours=f"{wall:.2f} s",
                baseline=floor,
                ratio=f"{wall / matching_s:.2f}x",
            )
        )
        rows.append(
            beside(
                f"{name}: peak RSS",
                median([r.max_rss_mib for r in done]),
                hour_mib,
                unit="MiB",
                baseline_note="`backfill plan --json`, 60 keys",
                below=GOAL_MIB,
                judged=judged,
                digits=0,
            )
        )
    return rows


# --- the strategy comparison (`python -m bench.backfill_plan`) ------------------------------------


async def _not_exists(conn: Any, page: list[int]) -> int:
    n: int = await conn.fetchval(_NOT_EXISTS, SCHEDULE_ID, page)
    return n


async def _except(conn: Any, page: list[int]) -> int:
    n: int = await conn.fetchval(_EXCEPT, SCHEDULE_ID, page, page[0], page[-1])
    return n


async def _range_then_python(conn: Any, page: list[int]) -> int:
    done = {r[0] for r in await conn.fetch(_RANGE, SCHEDULE_ID, page[0], page[-1])}
    return sum(1 for s in page if s not in done)


async def _array_then_python(conn: Any, page: list[int]) -> int:
    return len(await outbox.missing_fire_times(conn, SCHEDULE_ID, page))


STRATEGIES: dict[str, Callable[[Any, list[int]], Awaitable[int]]] = {
    "not-exists": _not_exists,
    "except": _except,
    "range+py": _range_then_python,
    "array+py": _array_then_python,  # the plan's own statement, without the page prefetch
}
WINDOWS = [("1 day", 1_440), ("30 days", 43_200), ("1 year", KEYS)]


async def _with_strategy(
    client: Client, pool: asyncpg.Pool, window: Window, strategy: Callable[..., Awaitable[int]]
) -> int:
    missing = 0
    async with pool.acquire() as conn:
        async for page in matching_times(client, SCHEDULE_ID, window):
            missing += await strategy(conn, page)
    return missing


async def _count_matching(client: Client, window: Window) -> int:
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


async def _comparison_row(client: Client, pool: asyncpg.Pool, window: Window, repeat: int) -> str:
    matching_s, _ = await _best_of(repeat, _bind(_count_matching, client, window))
    plan_s, planned = await _best_of(repeat, _bind(plan_window, client, pool, SCHEDULE_ID, window))
    peak = await _peak_mib(_bind(plan_window, client, pool, SCHEDULE_ID, window))
    cells = []
    for strategy in STRATEGIES.values():
        took, missing = await _best_of(
            repeat, _bind(_with_strategy, client, pool, window, strategy)
        )
        if missing != len(planned.missing):
            raise RuntimeError("a strategy disagrees with the plan")
        cells.append(f"{took:>10.2f}s")
    return (
        f"{planned.expected:>9,} {len(planned.missing):>8,} {matching_s:>8.2f}s "
        f"{plan_s:>7.2f}s {planned.expected / plan_s:>9,.0f} {peak:>9.2f} " + " ".join(cells)
    )


async def compare(repeat: int) -> None:
    async with boot(repeat=repeat, quick=False) as stack:
        pool = await create_pool(stack.dsn_for("backfill_compare"), max_size=2)
        try:
            await create_schedule(stack.client)
            end = year_end()
            print(f"best of {repeat} runs; peak = tracemalloc peak during one plan\n")
            header = (
                f"{'outbox rows':>11} {'window':<8} {'expected':>9} {'missing':>8} "
                f"{'matching':>9} {'plan':>8} {'keys/s':>9} {'peak MiB':>9} "
                + " ".join(f"{n:>11}" for n in STRATEGIES)
            )
            print(header)
            print("-" * len(header))
            for seeded in (False, True):
                if seeded:
                    await seed(pool, window_of(KEYS, end), keys=KEYS, missing=KEYS - DONE)
                async with pool.acquire() as conn:
                    rows = await conn.fetchval("SELECT count(*) FROM cronwarden.outbox")
                for name, keys in WINDOWS:
                    cells = await _comparison_row(stack.client, pool, window_of(keys, end), repeat)
                    print(f"{rows:>11,} {name:<8} {cells}")
        finally:
            await pool.close()


def main() -> None:
    parser = argparse.ArgumentParser(
        prog="python -m bench.backfill_plan",
        description="Backfill planning: windows, outbox sizes and subtraction strategies.",
    )
    parser.add_argument("--repeat", type=int, default=3, help="timed runs per cell (best kept)")
    args = parser.parse_args()
    configure(level="WARNING")
    asyncio.run(compare(args.repeat))


if __name__ == "__main__":
    main()
