"""Issue 16, goal 2: ten thousand schedules on the embedded stack.

One row each for: the first `schedules apply` of 10,000 schedules (bounded concurrent writes),
the same apply again (no write to Temporal), `cronwarden schedules list --json` and
`cronwarden status --json` (subprocesses, as a user runs them: no describe per schedule), one
pass of the monitor (`Monitor.run_pass`, the real pass) over their 10,000 heartbeat rows, and
`backfill plan` for one schedule while the 10,000 exist, against the same plan with few
schedules. `list` and `status` make no describe per schedule; what they cost is mostly
Temporal's own ListSchedules (its row, in process). The schedules fire once a year on a task
queue no worker polls, so none fires during the run; they are deleted afterwards (bounded) so
they do not load later measurements.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from statistics import median

from temporalio.client import Client

from bench.apply_scale import _delete_all, definitions
from bench.cpu import children_cpu, pid_cpu
from bench.rpc_calls import counting_rpcs
from bench.stack import BenchStack, run_alone
from bench.table import Row
from cronwarden.backfill.plan import matching_times, plan_window
from cronwarden.backfill.window import Window
from cronwarden.monitor.passes import Monitor, MonitorOptions
from cronwarden.monitor.pauses import PauseCheck
from cronwarden.schedules.apply import UNCHANGED, apply_definitions
from cronwarden.schedules.inventory import schedule_ids
from cronwarden.schedules.model import ScheduleDefinition
from cronwarden.schedules.schedule_list import list_pages
from cronwarden.store import definitions as definition_store
from cronwarden.store import outbox
from cronwarden.store.pool import create_pool

SCHEDULES = 10_000
QUICK_SCHEDULES = 30
TASK_QUEUE = "bench-scale-nobody-polls"
STATUS_GOAL_S = 10.0
MONITOR_GOAL_S = 1.0
# `backfill plan` with the many schedules present may cost at most this many times the same
# plan with few: "unaffected", allowing for the noise of a loaded machine.
PLAN_GOAL = 1.5
# Temporal's schedule list is eventually consistent: how long the list may take to show every
# schedule just created before the listing rows are measured.
VISIBLE_WITHIN = 300.0


def _minutely(schedule_id: str) -> ScheduleDefinition:
    return ScheduleDefinition.model_validate(
        {"id": schedule_id, "job": "probe", "every": "1m", "args": {"planned": True}}
    )


@dataclass(frozen=True)
class CliRun:
    seconds: float
    schedules: int
    """How many schedules its JSON lists."""
    own_cpu: float
    """CPU seconds of the `cronwarden` process itself."""
    server_cpu: float | None
    """CPU seconds the Temporal server used meanwhile (None: procfs cannot tell)."""

    def text(self, noun: str) -> str:
        server = "-" if self.server_cpu is None else f"{self.server_cpu:.1f} s"
        return (
            f"{self.seconds:.1f} s, {self.schedules:,} {noun} "
            f"(CPU: cronwarden {self.own_cpu:.1f} s, Temporal {server})"
        )


async def _timed_cli(stack: BenchStack, dsn: str, *args: str) -> CliRun:
    """One `cronwarden ...` run: its wall time and where the machine's CPU went meanwhile."""
    server_before, children_before = pid_cpu(stack.temporal.pid), children_cpu()
    started = time.perf_counter()
    proc = await asyncio.create_subprocess_exec(
        *stack.python_argv("-m", "cronwarden", *args),
        env=stack.cli_env(dsn, task_queue=TASK_QUEUE),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await proc.communicate()
    elapsed = time.perf_counter() - started
    server_after = pid_cpu(stack.temporal.pid)
    if proc.returncode != 0:
        raise RuntimeError(f"cronwarden {' '.join(args)} failed: {err.decode()[-2000:]}")
    return CliRun(
        seconds=elapsed,
        schedules=len(json.loads(out)["schedules"]),
        # Only this child is reaped meanwhile: the servers run until the stack stops.
        own_cpu=children_cpu() - children_before,
        server_cpu=(
            server_after - server_before
            if server_after is not None and server_before is not None
            else None
        ),
    )


async def _all_listed(client: Client, ids: set[str]) -> None:
    deadline = time.monotonic() + VISIBLE_WITHIN
    while not ids <= set(await schedule_ids(client)):
        if time.monotonic() > deadline:
            raise RuntimeError(f"Temporal's list did not show {len(ids):,} new schedules in time")
        await asyncio.sleep(1.0)


@dataclass(frozen=True)
class PlanTimes:
    """Median seconds of one schedule's `backfill plan` and of its two halves, each alone."""

    plan: float
    matching: float
    """Temporal's matching-times pages for the window."""
    postgres: float
    """The definition history and the outbox's committed times of each page."""


async def _plan_seconds(
    client: Client, dsn: str, schedule_id: str, window: Window, repeat: int
) -> PlanTimes:
    """The plan and its halves, measured back to back in each round."""
    pool = await create_pool(dsn, max_size=2)
    plans, matchings, queries = [], [], []
    try:
        for _ in range(repeat):
            started = time.perf_counter()
            await plan_window(client, pool, schedule_id, window)
            plans.append(time.perf_counter() - started)
            started = time.perf_counter()
            pages = [page async for page in matching_times(client, schedule_id, window)]
            matchings.append(time.perf_counter() - started)
            started = time.perf_counter()
            async with pool.acquire() as conn:
                await definition_store.history(conn, schedule_id)
                for page in pages:
                    await outbox.missing_fire_times(conn, schedule_id, page)
            queries.append(time.perf_counter() - started)
    finally:
        await pool.close()
    return PlanTimes(median(plans), median(matchings), median(queries))


async def _monitor_pass_seconds(client: Client, dsn: str, repeat: int) -> float:
    async def connect() -> Client:
        return client

    monitor = Monitor(
        dsn=dsn, sinks={}, options=MonitorOptions(state_file=None), pauses=PauseCheck(connect)
    )
    times = []
    try:
        await monitor.run_pass()  # its pool and first plans: not what a steady pass costs
        for _ in range(repeat):
            started = time.perf_counter()
            await monitor.run_pass()
            times.append(time.perf_counter() - started)
    finally:
        await monitor.close()
    return median(times)


async def measure(stack: BenchStack, *, quick: bool) -> list[Row]:
    count = QUICK_SCHEDULES if quick else SCHEDULES
    dsn = stack.dsn_for("scale")
    pool = await create_pool(dsn, max_size=4)
    # A client of its own: the write counter must see this code's calls only.
    client = await Client.connect(stack.temporal.address)
    prefix = f"scale-{uuid.uuid4().hex[:6]}"
    defs = definitions(prefix, count)
    planned = _minutely(f"{prefix}-planned")
    try:
        await apply_definitions(client, pool, [planned], task_queue=TASK_QUEUE)
        # One window for both plans, ended before the schedule was applied: a window that took in
        # the apply would be planned in two segments, twice the calls of the one before.
        end = datetime.now(UTC).replace(second=0, microsecond=0) - timedelta(minutes=1)
        window = Window(end - timedelta(days=1), end)
        few = await _plan_seconds(client, dsn, planned.id, window, stack.repeat)

        with counting_rpcs(client) as first_calls:
            started = time.perf_counter()
            await apply_definitions(client, pool, [planned, *defs], task_queue=TASK_QUEUE)
            first = time.perf_counter() - started
        # Once: at ten thousand schedules each re-apply is thousands of describes.
        with counting_rpcs(client) as again_calls:
            started = time.perf_counter()
            changes = await apply_definitions(client, pool, [planned, *defs], task_queue=TASK_QUEUE)
            again = time.perf_counter() - started
        if any(c.action != UNCHANGED for c in changes):
            raise RuntimeError("a second apply of the same file changed something")

        await _all_listed(client, {d.id for d in defs})
        started = time.perf_counter()
        # The pages alone, as list and status read them (read ahead, left as protobufs).
        async with contextlib.aclosing(list_pages(client)) as pages:
            async for _ in pages:
                pass
        list_rpc = time.perf_counter() - started
        listing = [await _timed_cli(stack, dsn, "schedules", "list", "--json")]
        status = [await _timed_cli(stack, dsn, "status", "--json")]
        monitor_pass = await _monitor_pass_seconds(client, dsn, stack.repeat)
        many = await _plan_seconds(client, dsn, planned.id, window, stack.repeat)
    finally:
        await pool.close()
        await _delete_all(client, [planned.id, *(d.id for d in defs)])

    status_s = status[0].seconds
    plan_ratio = many.plan / few.plan

    def speed(metric: str, ours: str, goal: str, met: bool, **more: str) -> Row:
        # Speeds are judged on a full run only: --quick sizes mean nothing.
        return Row(metric=metric, ours=ours, goal=goal, met=None if quick else met, **more)

    return [
        Row(
            metric=f"{count:,} schedules: first apply (1 run)",
            ours=f"{first:.1f} s ({first_calls.write_count:,} writes)",
        ),
        Row(
            metric=f"{count:,} schedules: apply again, no change (1 run)",
            ours=f"{again:.1f} s, {again_calls.write_count} writes",
            baseline=f"{first:.1f} s (first)",
            ratio=f"{first / again:.2f}x first/again",
            goal="0 writes",
            met=again_calls.write_count == 0,
        ),
        Row(
            metric=f"{count:,} schedules: `schedules list --json` (1 run)",
            ours=listing[0].text("listed"),
        ),
        # Where list's and status's time goes: Temporal's paged ListSchedules, in process.
        Row(
            metric=f"{count:,} schedules: Temporal's ListSchedules alone, all pages (1 run)",
            ours=f"{list_rpc:.1f} s",
        ),
        speed(
            f"{count:,} schedules: `status --json` (1 run)",
            status[0].text("rows"),
            f"< {STATUS_GOAL_S:g} s",
            status_s < STATUS_GOAL_S,
        ),
        speed(
            f"{count:,} schedules: one monitor pass over their heartbeats",
            f"{monitor_pass * 1000:.0f} ms",
            f"< {MONITOR_GOAL_S:g} s",
            monitor_pass < MONITOR_GOAL_S,
        ),
        speed(
            f"`backfill plan` of one schedule (1 day, minutely) with {count:,} others",
            f"{many.plan * 1000:.0f} ms",
            f"<= {PLAN_GOAL:g}x (unaffected)",
            plan_ratio <= PLAN_GOAL,
            baseline=f"{few.plan * 1000:.0f} ms (alone)",
            ratio=f"{plan_ratio:.2f}x",
        ),
        # Where the plan's extra time goes: its two halves, each alone. The matching times are
        # answered by the schedule's own workflow, on a server that also runs the others'.
        *(
            Row(
                metric=f"{half} of that plan alone, with {count:,} others",
                ours=f"{with_many * 1000:.0f} ms",
                baseline=f"{with_few * 1000:.0f} ms (alone)",
                ratio=f"{with_many / with_few:.2f}x",
            )
            for half, with_many, with_few in (
                ("Temporal's matching times", many.matching, few.matching),
                ("Postgres: definition history and outbox per page", many.postgres, few.postgres),
            )
        ),
    ]


if __name__ == "__main__":
    run_alone(measure, __doc__)
