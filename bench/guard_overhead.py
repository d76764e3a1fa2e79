"""What the guard costs: runs/s of a bare workflow + no-op activity against ScheduledRunWorkflow
with a no-op job through the full guard, on the same worker (same settings, same task queue) and
the same Temporal server; and how many Postgres round trips a guarded run makes.

Throughput: N runs of one kind are started as fast as the server accepts them, then awaited;
runs/s = N / (first start .. last result). Bare and guarded alternate, several rounds, and the
table reports the medians over `--repeat` rounds (the ratio is the median of the per-round ratios).

Round trips are counted on the wire (tests/support/pgwire.py: a proxy in front of Postgres) for
guarded no-op runs made one after another, after a warm-up, so asyncpg's one-off statement
preparations are left out; the job makes no statement, so every round trip is the guard's.
Temporal DescribeSchedule calls made by the guard (for the heartbeat's next expected fire) are
counted beside them with a client interceptor, in steady state: the warm-up runs one run per
schedule first, so each worker cache of next action times is filled (a describe returns several
times; the worker asks again only when they run out, see activities/next_fires.py).

Where the time goes: the worker, client and both sides share one process, and on a loaded host
its CPU bounds both rates, so the table also gives this process's CPU time per run of each kind
(whatever the servers spend is not in it). Bytecode is cached for the measurement (in the
stack's work dir) as in the deployed image (Dockerfile: compileall): Temporal's sandbox imports
the workflow's module again for every run, and with PYTHONDONTWRITEBYTECODE (a dev shell, CI)
each run would compile it from source, a cost that grows with the module and no deployed worker
pays.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import time
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import asyncpg
from temporalio.client import (
    Client,
    DescribeScheduleInput,
    Interceptor,
    OutboundInterceptor,
    ScheduleDescription,
)
from temporalio.worker import Worker

import bench.jobs
from bench.bare import BareInput, BareWorkflow, bare_noop
from bench.cpu import own_cpu
from bench.stack import BenchStack, run_alone
from bench.stats import median, ratio
from bench.table import Row
from bench.worker import bench_worker, make_schedules, worker_pool
from cronwarden.workflows.scheduled_run import ScheduledRunInput, ScheduledRunWorkflow
from tests.support.pgwire import RoundTripProxy, target_of

SCHEDULES = 10
# Starts in flight at once: enough to keep the server's frontend busy, few enough not to time out.
START_CONCURRENCY = 64
RATIO_GOAL = 0.9
ROUND_TRIP_GOAL = 3
ROUND_TRIP_RUNS = 20
DESCRIBE_GOAL = 0.1
RUN_TIMEOUT = timedelta(minutes=10)

# Which guard statement a round trip ran, by a fragment of its SQL.
_LABELS = [
    ("cronwarden.acquire_lease", "acquire (+ outbox look)"),
    ("SELECT args_digest, fencing_token FROM cronwarden.outbox", "outbox check"),
    ("WITH fence AS", "commit (fence + outbox + heartbeat + release)"),
    ("pg_advisory_unlock_all", "pool reset on release"),
    ("UPDATE cronwarden.locks\n   SET holder = NULL", "release"),
    ("SET expires_at", "lease renewal"),
]


def is_prepare(label: str) -> bool:
    """asyncpg preparing a statement on a connection's first use of it: warm-up, not per run."""
    return label.startswith("prepare: ")


def label_statement(query: str) -> str:
    prefix = "prepare: " if is_prepare(query) else ""
    for fragment, label in _LABELS:
        if fragment in query:
            return prefix + label
    return prefix + " ".join(query.split())[:60]


class DescribeCounter(Interceptor):
    """Counts ScheduleHandle.describe calls made through the client it is installed on."""

    def __init__(self) -> None:
        self.calls = 0

    def intercept_client(self, next: OutboundInterceptor) -> OutboundInterceptor:
        return _CountingOutbound(next, self)


class _CountingOutbound(OutboundInterceptor):
    def __init__(self, next: OutboundInterceptor, counter: DescribeCounter) -> None:
        super().__init__(next)
        self._counter = counter

    async def describe_schedule(self, input: DescribeScheduleInput) -> ScheduleDescription:
        self._counter.calls += 1
        return await self.next.describe_schedule(input)


async def measure(stack: BenchStack, *, quick: bool) -> list[Row]:
    runs = 20 if quick else 500
    rounds = stack.repeat
    dsn = stack.dsn_for("guard_overhead")
    pool = await worker_pool(dsn)
    task_queue = f"bench-guard-{uuid.uuid4().hex[:8]}"
    try:
        # Real schedules (yearly, so none fires meanwhile): the guard describes them and writes
        # their heartbeat rows, as in production.
        schedule_ids = await make_schedules(
            stack.client,
            pool,
            task_queue=task_queue,
            prefix="bench-guard",
            count=SCHEDULES,
            spec={"job": bench.jobs.NOOP_JOB, "cron": "0 0 1 1 *"},
        )
        runner = _Runner(stack.client, task_queue, schedule_ids)
        cpu: dict[str, list[float]] = {"bare": [], "guarded": []}
        with _bytecode_cached(stack.work_dir / "pycache"):
            async with _both(stack.client, pool, task_queue):
                await runner.burst("bare", 5)
                await runner.burst("guarded", 5)
                bare_rates, guarded_rates, ratios = [], [], []
                for r in range(rounds):
                    # Alternate which side goes first, so a drift of the machine hits both.
                    order = ("bare", "guarded") if r % 2 == 0 else ("guarded", "bare")
                    rates = {}
                    for kind in order:
                        before = own_cpu()
                        rates[kind] = await runner.burst(kind, runs)
                        cpu[kind].append((own_cpu() - before) / runs * 1000)
                    bare_rates.append(rates["bare"])
                    guarded_rates.append(rates["guarded"])
                    ratios.append(ratio(rates["guarded"], rates["bare"]))
        trips, describes = await count_round_trips(
            stack, dsn, schedule_ids, task_queue=f"{task_queue}-count"
        )
    finally:
        await pool.close()
    per_run = sum(n for label, n in trips.items() if not is_prepare(label)) / ROUND_TRIP_RUNS
    breakdown = ", ".join(f"{label} {n / ROUND_TRIP_RUNS:g}" for label, n in sorted(trips.items()))
    verdict = None if quick else median(ratios) >= RATIO_GOAL
    return [
        Row(
            f"guarded runs/s, no-op job ({runs} runs x {rounds} rounds, medians; "
            "ratio = median of the per-round ratios)",
            f"{median(guarded_rates):.1f}",
            baseline=f"{median(bare_rates):.1f} (bare)",
            ratio=f"{median(ratios):.2f}",
            goal=f"ratio >= {RATIO_GOAL}",
            met=verdict,
        ),
        Row(
            "  CPU of this process per run, ms (worker + client; ratio = bare / guarded)",
            f"{median(cpu['guarded']):.1f}",
            baseline=f"{median(cpu['bare']):.1f} (bare)",
            ratio=f"{ratio(median(cpu['bare']), median(cpu['guarded'])):.2f}",
        ),
        Row(
            "Postgres round trips per guarded run",
            f"{per_run:g}",
            goal=f"<= {ROUND_TRIP_GOAL}",
            met=None if quick else per_run <= ROUND_TRIP_GOAL,
        ),
        Row("  of which", breakdown or "-"),
        Row(
            "Temporal DescribeSchedule calls per guarded run (steady state, cached next fires)",
            f"{describes / ROUND_TRIP_RUNS:g}",
            goal=f"<= {DESCRIBE_GOAL}",
            met=None if quick else describes / ROUND_TRIP_RUNS <= DESCRIBE_GOAL,
        ),
    ]


@contextlib.contextmanager
def _bytecode_cached(prefix: Path) -> Iterator[None]:
    """Let imports write and reuse bytecode under `prefix` (never beside the sources)."""
    saved = sys.dont_write_bytecode, sys.pycache_prefix
    sys.dont_write_bytecode, sys.pycache_prefix = False, str(prefix)
    try:
        yield
    finally:
        sys.dont_write_bytecode, sys.pycache_prefix = saved


def _both(client: Client, pool: asyncpg.Pool, task_queue: str) -> Worker:
    # One worker runs both sides, with the settings `cronwarden worker` uses.
    return bench_worker(
        client, pool, task_queue, extra_workflows=[BareWorkflow], extra_activities=[bare_noop]
    )


class _Runner:
    def __init__(self, client: Client, task_queue: str, schedule_ids: list[str]) -> None:
        self._client = client
        self._task_queue = task_queue
        self._schedule_ids = schedule_ids
        self._serial = 0
        # Fire times far in the past: a replay of an old key never moves "last fire" forward.
        self._base = datetime(2001, 1, 1, tzinfo=UTC)

    def _start(self, kind: str) -> Callable[[], Awaitable[Any]]:
        self._serial += 1
        serial = self._serial
        if kind == "bare":
            return lambda: self._client.start_workflow(
                BareWorkflow.run,
                BareInput(key=f"bare-{serial}"),
                id=f"bench-bare-{uuid.uuid4().hex}",
                task_queue=self._task_queue,
            )
        schedule_id = self._schedule_ids[serial % len(self._schedule_ids)]
        fire = self._base + timedelta(minutes=serial)
        return lambda: self._client.start_workflow(
            ScheduledRunWorkflow.run,
            guarded_input(schedule_id, fire, lock_name=f"bench:{serial}"),
            id=f"{schedule_id}~replay-{fire:%Y-%m-%dT%H:%M:%SZ}-{uuid.uuid4().hex[:6]}",
            task_queue=self._task_queue,
        )

    async def burst(self, kind: str, runs: int) -> float:
        """Start `runs` runs as fast as the server accepts them; runs/s until the last ends."""
        starters = [self._start(kind) for _ in range(runs)]
        gate = asyncio.Semaphore(START_CONCURRENCY)

        async def start_and_wait(start: Callable[[], Awaitable[Any]]) -> None:
            async with gate:
                handle = await start()
            await handle.result()

        began = time.perf_counter()
        await asyncio.wait_for(
            asyncio.gather(*(start_and_wait(s) for s in starters)),
            RUN_TIMEOUT.total_seconds(),
        )
        return runs / (time.perf_counter() - began)


def guarded_input(schedule_id: str, fire: datetime, *, lock_name: str) -> ScheduledRunInput:
    # One lock per run: N runs of one schedule at once would otherwise skip each other, and
    # the point is the guard's cost, not its overlap policy.
    return ScheduledRunInput(
        schedule_id=schedule_id,
        job=bench.jobs.NOOP_JOB,
        lock_name=lock_name,
        fire_time=fire.isoformat(),
    )


async def count_round_trips(
    stack: BenchStack, dsn: str, schedule_ids: list[str], *, task_queue: str
) -> tuple[Counter[str], int]:
    """Round trips (by label) and describe calls of ROUND_TRIP_RUNS guarded no-op runs."""
    proxy = RoundTripProxy(*target_of(dsn), label=label_statement)
    await proxy.start()
    describes = DescribeCounter()
    client = await Client.connect(
        stack.temporal.address, interceptors=[describes], namespace=stack.client.namespace
    )
    pool = await worker_pool(proxy.proxied(dsn))
    try:
        runner = _Runner(stack.client, task_queue, schedule_ids)
        runner._serial = 10_000_000  # keys apart from the throughput rounds'
        async with _both(client, pool, task_queue):
            # One per schedule: every cache entry is warm before counting.
            for _ in range(SCHEDULES):
                await runner.burst("guarded", 1)
            proxy.reset()
            describes.calls = 0
            for _ in range(ROUND_TRIP_RUNS):
                await runner.burst("guarded", 1)
            counts = Counter(proxy.counts)
            calls = describes.calls
    finally:
        await pool.close()
        await proxy.stop()
    return counts, calls


if __name__ == "__main__":
    run_alone(measure, __doc__)
