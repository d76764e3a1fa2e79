"""`schedules apply` of 1,000 schedules, then the same file again, beside `schedules list`.

The first apply creates every schedule (bounded concurrent writes). The same file again finds
nothing to change: it must read Temporal's schedule list once (its pages) and send no describe
and no write (counted at the client's edge, see `bench.rpc_calls`), and take at most twice what
`schedules list` takes over the same namespace (`describe.listed`, the code behind it, in
process on the same client and pool). The same re-apply with `--verify` (a describe of every
schedule, what every re-apply cost before) is shown beside it. All run `apply_definitions`, the
code behind `cronwarden schedules apply`, in process with a heartbeat pool, against a task queue
no worker polls. Each size uses new schedule ids (a first apply needs schedules that do not
exist yet); they are deleted afterwards so they do not load the server for the measurements
that follow.

10,000 schedules as well with CRONWARDEN_BENCH_APPLY_10K=1 (`CRONWARDEN_BENCH_APPLY_10K=1 make
bench ARGS="--only apply_scale"`): its first apply alone takes minutes on a 2-core machine, and
`bench/scale.py` already applies 10,000 (first apply and again) in the default run.
"""

from __future__ import annotations

import os
import time
import uuid
from statistics import median

from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode

from bench.rpc_calls import RpcCalls, counting_rpcs
from bench.stack import BenchStack, run_alone
from bench.table import Row
from cronwarden.schedules.apply import UNCHANGED, apply_definitions
from cronwarden.schedules.bounded import map_bounded
from cronwarden.schedules.describe import listed
from cronwarden.schedules.inventory import DESCRIBE_CONCURRENCY
from cronwarden.schedules.model import ScheduleDefinition
from cronwarden.store.pool import create_pool

SCHEDULES = 1_000
LARGE = 10_000
QUICK_SCHEDULES = 20
TASK_QUEUE = "bench-apply-nobody-polls"
# An unchanged re-apply may take at most this many times `schedules list` (issue 33, item 4).
LIST_RATIO_GOAL = 2.0
# Set to also measure LARGE schedules.
LARGE_ENV = "CRONWARDEN_BENCH_APPLY_10K"


def definitions(prefix: str, count: int) -> list[ScheduleDefinition]:
    """`count` schedules that differ in their args (else the duplicate guard refuses them),
    firing once a year so none fires while the benchmark runs."""
    return [
        ScheduleDefinition.model_validate(
            {"id": f"{prefix}-{i:04d}", "job": "probe", "cron": "0 3 1 1 *", "args": {"n": i}}
        )
        for i in range(count)
    ]


async def _delete_all(client: Client, ids: list[str]) -> None:
    async def delete(schedule_id: str) -> None:
        try:
            await client.get_schedule_handle(schedule_id).delete()
        except RPCError as exc:
            if exc.status != RPCStatusCode.NOT_FOUND:
                raise

    await map_bounded(delete, ids, limit=DESCRIBE_CONCURRENCY)


async def measure(stack: BenchStack, *, quick: bool) -> list[Row]:
    sizes = [QUICK_SCHEDULES] if quick else [SCHEDULES]
    if not quick and os.environ.get(LARGE_ENV) == "1":
        sizes.append(LARGE)
    rows: list[Row] = []
    for count in sizes:
        rows += await _measure_size(stack, count, quick=quick)
    return rows


async def _measure_size(stack: BenchStack, count: int, *, quick: bool) -> list[Row]:
    pool = await create_pool(stack.dsn_for(f"apply{count}"), max_size=4)
    # A client of its own: the counter must see this code's calls and nobody else's.
    client = await Client.connect(stack.temporal.address)
    defs = definitions(f"apply-{uuid.uuid4().hex[:6]}", count)
    again: list[float] = []
    lists: list[float] = []
    again_calls = RpcCalls()
    verify: float | None = None
    try:
        # The creating apply runs once: a second one would need new ids and minutes, and it is
        # the baseline here, not the figure judged.
        with counting_rpcs(client) as first_calls:
            started = time.perf_counter()
            await apply_definitions(client, pool, defs, task_queue=TASK_QUEUE)
            first = time.perf_counter() - started
        if first_calls.write_count < count:
            # Each new schedule is one create: fewer means the counter no longer sees the
            # calls, and the "0 writes" verdict below would pass for nothing.
            raise RuntimeError(
                f"the first apply of {count} schedules counted {first_calls.write_count} writes"
            )
        # Temporal's list is eventually consistent: the first apply after the creates may
        # still describe the few it does not show yet (correct, not the figure judged).
        await apply_definitions(client, pool, defs, task_queue=TASK_QUEUE)
        for _ in range(stack.repeat):
            # Back to back, so both see the same server load.
            started = time.perf_counter()
            await listed(client, pool)
            lists.append(time.perf_counter() - started)
            with counting_rpcs(client) as calls:
                started = time.perf_counter()
                changes = await apply_definitions(client, pool, defs, task_queue=TASK_QUEUE)
                again.append(time.perf_counter() - started)
            again_calls.update(calls)
            if any(c.action != UNCHANGED for c in changes):
                raise RuntimeError("a second apply of the same file changed something")
        if count <= SCHEDULES:
            # The verifying re-apply describes every schedule: at ten thousand, minutes.
            started = time.perf_counter()
            await apply_definitions(client, pool, defs, task_queue=TASK_QUEUE, verify=True)
            verify = time.perf_counter() - started
    finally:
        await pool.close()
        await _delete_all(client, [d.id for d in defs])

    second, listing = median(again), median(lists)
    ratio = second / listing
    runs = len(again)
    describes = again_calls["describe_schedule"] // runs
    pages = again_calls["list_schedules"] // runs
    other = {k: v for k, v in again_calls.items() if k not in ("list_schedules",)}
    return [
        Row(
            metric=f"apply {count:,} schedules: first apply (creates; 1 run)",
            ours=(
                f"{first:.2f} s ({first_calls.write_count:,} writes, "
                f"{first_calls.read_count:,} reads)"
            ),
            # What every re-apply cost before it read the list: a describe per schedule.
            baseline="-" if verify is None else f"{verify:.2f} s (again with --verify, 1 run)",
        ),
        Row(
            metric=f"apply {count:,} schedules again, no change: time",
            ours=f"{second:.2f} s",
            baseline=f"{listing:.2f} s (`schedules list`)",
            ratio=f"{ratio:.2f}x",
            goal=f"<= {LIST_RATIO_GOAL:g}x of list",
            met=None if quick else ratio <= LIST_RATIO_GOAL,
        ),
        Row(
            metric=f"apply {count:,} schedules again, no change: Temporal writes",
            ours=f"{pages} ListSchedules page(s), {describes} describes, "
            f"{again_calls.write_count // runs} writes",
            baseline=f"{first_calls.write_count:,} writes (first)",
            goal="list pages only",
            # Not a speed: a describe or a write here is a bug, in --quick mode too.
            met=not other,
        ),
    ]


if __name__ == "__main__":
    run_alone(measure, __doc__)
