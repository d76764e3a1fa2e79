"""The status page's cost: what one load of `/` reads, beside the same page without timelines.

A thousand heartbeat rows, the first fifty overdue (so they are the ones the page draws
timelines for) and each of those a real, paused schedule firing every second, with half its
slots committed. `ours` is the whole read the page makes (`read_status`: the Postgres snapshot,
then per shown schedule a describe, a visibility list and its matching times from Temporal, then
one outbox and one lease query in a snapshot); the baseline is the same read with no timeline,
Postgres alone. One schedule's own page (120 slots) is measured too.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from dataclasses import replace
from datetime import UTC, datetime
from statistics import median

from temporalio.client import Client, ScheduleState

from bench.stack import BenchStack, run_alone
from bench.table import Row, beside
from cronwarden.monitor.status_view import PageLimits, read_status
from cronwarden.schedules.mapping import to_temporal
from cronwarden.schedules.model import ScheduleDefinition
from cronwarden.store.pool import create_pool

ROWS, SHOWN, SLOTS = 1_000, 50, 30
QUICK_ROWS, QUICK_SHOWN, QUICK_SLOTS = 60, 5, 5
TASK_QUEUE = "bench-status-page"
GOAL_MS = 2_000.0

_HEARTBEATS = """
INSERT INTO cronwarden.heartbeats (schedule_id, next_expected_at, last_success_at, grace)
SELECT CASE WHEN i <= $2 THEN $3 || '-' || i ELSE 'bench-quiet-' || i END,
       CASE WHEN i <= $2 THEN now() - interval '1 hour' ELSE now() + interval '1 hour' END,
       now() - interval '1 hour',
       interval '1 minute'
  FROM generate_series(1, $1) AS i
"""
# Every other second since the schedules' creation committed, as a worker would have.
_OUTBOX = """
INSERT INTO cronwarden.outbox (logical_key, schedule_id, fire_time, attempt, fencing_token,
                               worker, args_digest, workflow_id, run_id)
SELECT s.id || '@' || to_char(t AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"'), s.id, t, 1, 1,
       'bench', 'd', s.id || '-' || to_char(t AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"'),
       'r'
  FROM unnest($1::text[]) AS s(id),
       generate_series(date_trunc('second', $2::timestamptz) + interval '2 seconds', now(),
                       interval '2 seconds') AS t
"""


async def _create_paused(client: Client, schedule_id: str) -> None:
    defn = ScheduleDefinition.model_validate({"id": schedule_id, "job": "probe", "every": "1s"})
    schedule = to_temporal(defn, task_queue=TASK_QUEUE)
    # Paused: its spec is evaluated all the same, and no run is ever started.
    await client.create_schedule(
        schedule_id, replace(schedule, state=ScheduleState(paused=True, note="benchmark"))
    )


async def measure(stack: BenchStack, *, quick: bool) -> list[Row]:
    rows, shown, slots = (QUICK_ROWS, QUICK_SHOWN, QUICK_SLOTS) if quick else (ROWS, SHOWN, SLOTS)
    prefix = f"bench-page-{uuid.uuid4().hex[:6]}"
    ids = [f"{prefix}-{i}" for i in range(1, shown + 1)]
    client = stack.client
    created = datetime.now(UTC)
    await asyncio.gather(*(_create_paused(client, sid) for sid in ids))
    pool = await create_pool(stack.dsn_for("status_page"), max_size=4)
    try:
        await pool.execute(_HEARTBEATS, rows, shown, prefix)
        # Until each schedule has produced the slots a timeline shows (a schedule has no slot
        # before its creation): a fixed span of the clock, not a guess at a condition.
        await asyncio.sleep(max(slots + 1 - (datetime.now(UTC) - created).total_seconds(), 0))
        await pool.execute(_OUTBOX, ids, created)
        await pool.execute("ANALYZE")

        async def temporal() -> Client:
            return client

        page = PageLimits(timelines=shown, slots=slots, temporal_timeout=60)
        bare = PageLimits(timelines=0)
        detail = PageLimits(detail_slots=4 * slots, temporal_timeout=60)
        view = await read_status(pool, temporal, limits=page)
        drawn = [s for s in view.schedules if s.slots is not None]
        assert len(drawn) == shown and all(s.grid_known for s in drawn), view.temporal_error
        runs = stack.repeat

        async def timed(limits: PageLimits, only: str | None = None) -> float:
            times = []
            for _ in range(runs):
                started = time.perf_counter()
                await read_status(pool, temporal, limits=limits, only=only)
                times.append((time.perf_counter() - started) * 1000)
            return median(times)

        full_ms = await timed(page)
        bare_ms = await timed(bare)
        one_ms = await timed(detail, only=ids[0])
    finally:
        await pool.close()
        await asyncio.gather(*(client.get_schedule_handle(sid).delete() for sid in ids))
    return [
        beside(
            f"status page `/`: {rows:,} schedules, timelines of {shown} ({slots} slots each)",
            full_ms,
            bare_ms,
            unit="ms",
            baseline_note="the same page without timelines: Postgres only",
            below=GOAL_MS,
            judged=not quick,
            digits=1,
        ),
        Row(
            metric=f"status page `/schedules/{{id}}`: one schedule, {4 * slots} slots",
            ours=f"{one_ms:.1f} ms",
            baseline=f"{bare_ms:.1f} ms (`/` without timelines)",
            ratio=f"{one_ms / bare_ms:.2f}x",
        ),
    ]


if __name__ == "__main__":
    run_alone(measure, __doc__)
