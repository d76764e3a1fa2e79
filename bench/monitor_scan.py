"""Item 3: the monitor's overdue query on 100,000 heartbeat rows, 1% of them overdue.

The statement timed is `store.watch.OVERDUE`, the one every monitor pass runs, prepared once
and executed as the monitor does. Beside its median time, each row shows the plan Postgres
chose (EXPLAIN ANALYZE) and the buffers it touched, which do not depend on the machine's load,
and the same query with index scans turned off as the baseline.

Four tables show what the cost follows: 10k and 100k rows, each with 0.1% and 1% overdue. The
100k-row table at 0.1% and the 10k-row table at 1% hold the same 100 overdue rows: if the scan
follows the overdue rows, not the table, the two cost the same.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from statistics import median
from typing import Any

from bench.stack import BenchStack
from bench.table import Row
from cronwarden.store import watch
from cronwarden.store.pool import connect

SIZES = (10_000, 100_000)
QUICK_SIZES = (1_000, 10_000)
FRACTIONS = (0.001, 0.01)
GOAL_MS = 50.0
INDEX = "heartbeats_alert_after"
# Executions per median: the query takes well under a millisecond, so a handful is noise.
MIN_RUNS = 25

# One row in ten is paused by an operator (outside the partial index). The overdue rows are
# spread evenly (every 1/fraction-th row, never a paused one); the others expect a fire later.
_SEED = """
INSERT INTO cronwarden.heartbeats (schedule_id, next_expected_at, grace, paused)
SELECT 'bench-' || i,
       CASE WHEN i % $2 = 0 THEN now() - interval '2 hours'
            ELSE now() + make_interval(secs => i) END,
       interval '1 minute',
       i % 10 = 5
  FROM generate_series(1, $1) AS i
"""
_NO_INDEX = (
    "SET LOCAL enable_indexscan = off; SET LOCAL enable_bitmapscan = off; "
    "SET LOCAL enable_indexonlyscan = off"
)


@dataclass(frozen=True)
class Scan:
    rows: int
    overdue: int
    ms: float
    plan: str
    buffers: int
    seq_ms: float


def _nodes(node: dict[str, Any]) -> list[dict[str, Any]]:
    return [node, *(n for child in node.get("Plans", []) for n in _nodes(child))]


def _plan_text(plan: dict[str, Any]) -> str:
    scans = [n for n in _nodes(plan) if "Scan" in n["Node Type"]]
    return ", ".join(
        f"{n['Node Type']}" + (f" on {n['Index Name']}" if "Index Name" in n else "") for n in scans
    )


async def _median_ms(conn: Any, runs: int) -> float:
    statement = await conn.prepare(watch.OVERDUE)
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        await statement.fetch()
        times.append((time.perf_counter() - started) * 1000)
    return median(times)


async def _scan(stack: BenchStack, rows: int, fraction: float, runs: int) -> Scan:
    conn = await connect(stack.dsn_for(f"monitor_{rows}"))
    try:
        await conn.execute(_SEED, rows, round(1 / fraction))
        await conn.execute("ANALYZE cronwarden.heartbeats")
        overdue = len(await conn.fetch(watch.OVERDUE))
        explained = json.loads(
            await conn.fetchval(f"EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) {watch.OVERDUE}")
        )[0]["Plan"]
        ms = await _median_ms(conn, runs)
        async with conn.transaction():
            await conn.execute(_NO_INDEX)
            seq_ms = await _median_ms(conn, runs)
    finally:
        await conn.close()
    buffers = explained.get("Shared Hit Blocks", 0) + explained.get("Shared Read Blocks", 0)
    return Scan(rows, overdue, ms, _plan_text(explained), buffers, seq_ms)


def _row(scan: Scan, *, judged: bool) -> Row:
    share = scan.overdue / scan.rows
    index_scan = INDEX in scan.plan and "Seq Scan" not in scan.plan
    return Row(
        metric=f"monitor overdue query: {scan.rows:,} rows, {share:.1%} overdue ({scan.overdue:,})",
        ours=f"{scan.ms:.2f} ms; {scan.plan}; {scan.buffers:,} buffers",
        baseline=f"{scan.seq_ms:.2f} ms (index scans off)",
        ratio=f"{scan.ms / scan.seq_ms:.2f}x",
        goal=f"< {GOAL_MS:g} ms, index scan" if judged else "index scan",
        met=(index_scan and scan.ms < GOAL_MS) if judged else index_scan,
    )


async def measure(stack: BenchStack, *, quick: bool) -> list[Row]:
    small, big = QUICK_SIZES if quick else SIZES
    runs = max(stack.repeat, MIN_RUNS)
    scans = {
        (rows, fraction): await _scan(stack, rows, fraction, runs)
        for rows in (small, big)
        for fraction in FRACTIONS
    }
    low, high = FRACTIONS
    headline = scans[(big, high)]
    # The same overdue rows in a table ten times larger.
    same_overdue_small, same_overdue_big = scans[(small, high)], scans[(big, low)]
    table_ratio = same_overdue_big.buffers / same_overdue_small.buffers
    overdue_ratio = headline.buffers / same_overdue_big.buffers
    return [
        # The speed goal only on a full run; the plan is judged in --quick mode too.
        _row(headline, judged=not quick),
        *(_row(s, judged=False) for _, s in sorted(scans.items()) if s is not headline),
        Row(
            metric=(
                f"overdue query, {same_overdue_big.overdue:,} overdue either way: "
                f"{big:,} vs {small:,} rows"
            ),
            ours=f"{same_overdue_big.ms:.2f} ms, {same_overdue_big.buffers:,} buffers",
            baseline=f"{same_overdue_small.ms:.2f} ms, {same_overdue_small.buffers:,} buffers",
            ratio=f"{table_ratio:.2f}x buffers",
            goal="< 2x buffers (10x the rows)",
            met=table_ratio < 2,
        ),
        Row(
            metric=(
                f"overdue query, {big:,} rows: {headline.overdue:,} vs "
                f"{same_overdue_big.overdue:,} overdue"
            ),
            ours=f"{headline.ms:.2f} ms, {headline.buffers:,} buffers",
            baseline=f"{same_overdue_big.ms:.2f} ms, {same_overdue_big.buffers:,} buffers",
            ratio=f"{overdue_ratio:.2f}x buffers",
            goal="grows with the overdue rows",
        ),
    ]
