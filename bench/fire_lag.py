"""Fire lag: how late after its nominal fire time a scheduled run starts working.

100 schedules firing every 10 s (all on the same instants: the worst case, a burst of 100 runs
every 10 s) run a job that writes nothing and returns two times into its outbox record: when
Temporal started the activity (`activity.info().started_time`, the server's clock) and when the
job itself started, after the guard took its lease and checked the outbox (the worker's clock;
same machine). Lag = that time - the key's nominal fire time, both read back from the outbox.
Fires that should have happened in the window but have no outbox record are counted too.
cronwarden's own share is measured apart: from Temporal starting the activity to the run's commit
(the outbox record's `committed_at`).

The worker is `cronwarden worker`'s own (default settings: 10 concurrent runs).
"""

from __future__ import annotations

import asyncio
import os
import time
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import asyncpg
from temporalio.client import Client

import bench.jobs
from bench.cpu import own_cpu, pid_cpu
from bench.stack import BenchStack, run_alone
from bench.stats import percentile
from bench.table import Row
from bench.worker import bench_worker, make_schedules, worker_pool

EVERY_SECONDS = 10
P99_GOAL_SECONDS = 1.0
OWN_SHARE_P99_GOAL_SECONDS = 0.1
# Runs of the window still in flight at its end get this long to commit. --quick runs three
# schedules, whose runs commit in a second or two: a shorter wait keeps the smoke test short.
DRAIN_TIMEOUT = 60.0
QUICK_DRAIN_TIMEOUT = 20.0

_LAGS = """
SELECT fire_time, workflow_id,
       (result->>'activity_scheduled_at')::timestamptz AS activity_scheduled_at,
       (result->>'activity_started_at')::timestamptz AS activity_started_at,
       (result->>'started_at')::timestamptz AS job_started_at,
       -- The job makes no writes, so its run commits in a statement of its own (autocommit):
       -- now() in it, which committed_at records, is the commit's time.
       committed_at
  FROM cronwarden.outbox
 WHERE schedule_id = ANY($1::text[]) AND fire_time BETWEEN $2 AND $3
"""


@dataclass(frozen=True)
class Lags:
    activity: list[float]
    """Seconds from nominal fire time to Temporal starting the activity."""
    job: list[float]
    """Seconds from nominal fire time to the job starting (lease taken, outbox checked)."""
    own: list[float]
    """Seconds from Temporal starting the activity to the run's commit: cronwarden's share."""
    expected: int
    phases: dict[str, list[float]]
    """Where the lag goes, phase by phase (seconds each), to tell Temporal's share from ours."""
    server_cpu: float | None = None
    """CPU seconds the Temporal server used over the window (None: procfs cannot tell)."""
    worker_cpu: float | None = None
    """CPU seconds this process (the worker and the measurement's polling) used over it."""
    cpu_fires: int = 0
    """The fires that CPU was spent on: those before the window's end (the fire at its end is
    run after the CPU was read)."""


# Each phase: from one recorded instant to the next.
PHASES = [
    ("Temporal starts the workflow", "fire_time", "workflow_started_at"),
    ("workflow task schedules the activity", "workflow_started_at", "activity_scheduled_at"),
    ("activity waits for the worker", "activity_scheduled_at", "activity_started_at"),
    ("guard takes the lease, checks the outbox", "activity_started_at", "job_started_at"),
    ("job runs, the run commits", "job_started_at", "committed_at"),
]


async def measure(stack: BenchStack, *, quick: bool) -> list[Row]:
    schedules = 3 if quick else 100
    seconds = 20.0 if quick else 120.0
    pool = await worker_pool(stack.dsn_for("fire_lag"))
    try:
        drain = QUICK_DRAIN_TIMEOUT if quick else DRAIN_TIMEOUT
        lags = await _run(stack.client, pool, schedules, seconds, drain, stack.temporal.pid)
    finally:
        await pool.close()
    return rows(lags, schedules=schedules, seconds=seconds, quick=quick)


def rows(lags: Lags, *, schedules: int, seconds: float, quick: bool) -> list[Row]:
    what = f"{schedules} schedules every {EVERY_SECONDS}s for {seconds:g}s"
    ran = len(lags.job)
    out = [
        Row(
            f"fires run ({what})",
            f"{ran} of {lags.expected}",
            goal="all",
            met=None if quick else ran == lags.expected,
        )
    ]
    # Every row is printed, "-" where there is nothing to show: the table has the same rows
    # whatever the run found (a missing row would hide that nothing ran).
    for name, values in (("job start", lags.job), ("activity start", lags.activity)):
        p99 = percentile(values, 99) if values else None
        out.append(
            Row(
                f"fire lag to {name}, p50 / p99",
                _p50_p99(values),
                goal=f"p99 < {P99_GOAL_SECONDS:g}s",
                # No runs at all misses the goal too.
                met=None if quick else p99 is not None and p99 < P99_GOAL_SECONDS,
            )
        )
    own_p99 = percentile(lags.own, 99) if lags.own else None
    out.append(
        Row(
            "cronwarden's share: activity start to commit, p50 / p99",
            _p50_p99(lags.own),
            goal=f"p99 < {OWN_SHARE_P99_GOAL_SECONDS * 1000:g}ms",
            met=None if quick else own_p99 is not None and own_p99 < OWN_SHARE_P99_GOAL_SECONDS,
        )
    )
    for name, _, _ in PHASES:
        out.append(Row(f"  {name}, p50 / p99", _p50_p99(lags.phases.get(name, []))))
    out.extend(cpu_rows(lags, schedules=schedules, fires=lags.cpu_fires))
    return out


def cpu_rows(lags: Lags, *, schedules: int, fires: int) -> list[Row]:
    """Where the machine's CPU went per fire, and the floor it sets: the server and the worker
    share the machine's cores, so a burst cannot be through sooner than their CPU for it spread
    over every core (less than that: the worker's share runs on one core, under one GIL)."""
    cores = os.cpu_count() or 1
    if lags.server_cpu is None or lags.worker_cpu is None or not fires:
        return [
            Row("Temporal server CPU per fire / worker CPU per fire", "-"),
            Row(f"burst floor: server + worker CPU of {schedules} fires / {cores} cores", "-"),
        ]
    server, worker = lags.server_cpu / fires, lags.worker_cpu / fires
    return [
        Row(
            "Temporal server CPU per fire / worker CPU per fire",
            f"{server * 1000:.0f}ms / {worker * 1000:.0f}ms",
        ),
        Row(
            f"burst floor: server + worker CPU of {schedules} fires / {cores} cores",
            f"{(server + worker) * schedules / cores:.2f}s",
        ),
    ]


def _p50_p99(values: list[float]) -> str:
    if not values:
        return "-"
    return f"{percentile(values, 50):.3f}s / {percentile(values, 99):.3f}s"


async def _run(
    client: Client,
    pool: asyncpg.Pool,
    schedules: int,
    seconds: float,
    drain: float,
    server_pid: int | None,
) -> Lags:
    task_queue = f"bench-lag-{uuid.uuid4().hex[:8]}"
    async with bench_worker(client, pool, task_queue):
        ids: list[str] = []
        try:
            ids = await make_schedules(
                client,
                pool,
                task_queue=task_queue,
                prefix="bench-lag",
                count=schedules,
                spec={"job": bench.jobs.LAG_JOB, "every": f"{EVERY_SECONDS}s"},
            )
            # Count only fires after every schedule exists: the first is the next boundary.
            # The schedules keep firing until deleted: fires after `end` are left out, and no
            # pause can drop a fire of the window that Temporal has yet to start.
            start = _next_boundary(datetime.now(UTC))
            end = start + timedelta(seconds=seconds // EVERY_SECONDS * EVERY_SECONDS)
            # CPU is counted over the window only (not the apply before it): its fires and the
            # runs still finishing from the fire before it.
            await asyncio.sleep(max(0.0, (start - datetime.now(UTC)).total_seconds()))
            server_before, worker_before = pid_cpu(server_pid), own_cpu()
            await asyncio.sleep(max(0.0, (end - datetime.now(UTC)).total_seconds()))
            server_after, worker_after = pid_cpu(server_pid), own_cpu()
            expected = schedules * (int((end - start).total_seconds()) // EVERY_SECONDS + 1)
            records = await _drain(pool, ids, start, end, expected, drain)
        finally:
            await asyncio.gather(
                *(client.get_schedule_handle(i).delete() for i in ids), return_exceptions=True
            )
        started = {
            wf.id: wf.start_time async for wf in client.list_workflows(f'TaskQueue="{task_queue}"')
        }
    instants = [{**r, "workflow_started_at": started.get(r["workflow_id"])} for r in records]
    return Lags(
        activity=[(r["activity_started_at"] - r["fire_time"]).total_seconds() for r in records],
        job=[(r["job_started_at"] - r["fire_time"]).total_seconds() for r in records],
        own=[(r["committed_at"] - r["activity_started_at"]).total_seconds() for r in records],
        expected=expected,
        server_cpu=(
            server_after - server_before
            if server_after is not None and server_before is not None
            else None
        ),
        worker_cpu=worker_after - worker_before,
        cpu_fires=sum(1 for r in records if r["fire_time"] < end),
        phases={
            name: [
                (i[to] - i[since]).total_seconds()
                for i in instants
                if i[since] is not None and i[to] is not None
            ]
            for name, since, to in PHASES
        },
    )


async def _drain(
    pool: asyncpg.Pool,
    ids: list[str],
    start: datetime,
    end: datetime,
    expected: int,
    timeout: float,
) -> list[asyncpg.Record]:
    """The window's outbox records, once all expected fires committed or `timeout` passed."""
    deadline = time.monotonic() + timeout
    while True:
        async with pool.acquire() as conn:
            records: list[asyncpg.Record] = await conn.fetch(_LAGS, ids, start, end)
        if len(records) >= expected or time.monotonic() > deadline:
            return records
        await asyncio.sleep(0.5)


def _next_boundary(now: datetime) -> datetime:
    epoch = int(now.timestamp())
    return datetime.fromtimestamp(epoch - epoch % EVERY_SECONDS + EVERY_SECONDS, UTC)


if __name__ == "__main__":
    run_alone(measure, __doc__)
