"""Item 4: `schedules apply` of 1,000 schedules, then the same file again.

The first apply creates every schedule (bounded concurrent writes): it must take at most 4x the
second. The second finds nothing to change: it must send no write to Temporal (counted at the
client's edge, see `bench.rpc_calls`). Both run `apply_definitions`, the code behind
`cronwarden schedules apply`, in process with a heartbeat pool, against a task queue no worker
polls. Each timed run uses new schedule
ids (a first apply needs schedules that do not exist yet); they are deleted afterwards so they
do not load the server for the measurements that follow.
"""

from __future__ import annotations

import time
import uuid
from statistics import median

from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode

from bench.rpc_calls import RpcCalls, counting_rpcs
from bench.stack import BenchStack
from bench.table import Row
from cronwarden.schedules.apply import UNCHANGED, apply_definitions
from cronwarden.schedules.bounded import map_bounded
from cronwarden.schedules.inventory import DESCRIBE_CONCURRENCY
from cronwarden.schedules.model import ScheduleDefinition
from cronwarden.store.pool import create_pool

SCHEDULES = 1_000
QUICK_SCHEDULES = 20
TASK_QUEUE = "bench-apply-nobody-polls"
# The creating apply may cost at most this many times the no-op one (issue 16, goal 1).
RATIO_GOAL = 4.0


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
    count = QUICK_SCHEDULES if quick else SCHEDULES
    pool = await create_pool(stack.dsn_for("apply"), max_size=4)
    # A client of its own: the counter must see this code's calls and nobody else's.
    client = await Client.connect(stack.temporal.address)
    defs = definitions(f"apply-{uuid.uuid4().hex[:6]}", count)
    again: list[float] = []
    again_calls = RpcCalls()
    try:
        # The creating apply runs once: a second one would need another thousand new ids and
        # minutes, and it is the baseline here, not the figure judged.
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
        for _ in range(stack.repeat):
            with counting_rpcs(client) as calls:
                started = time.perf_counter()
                changes = await apply_definitions(client, pool, defs, task_queue=TASK_QUEUE)
                again.append(time.perf_counter() - started)
            again_calls.update(calls)
            if any(c.action != UNCHANGED for c in changes):
                raise RuntimeError("a second apply of the same file changed something")
    finally:
        await pool.close()
        await _delete_all(client, [d.id for d in defs])

    second = median(again)
    ratio = first / second
    writes, reads = again_calls.write_count, again_calls.read_count // len(again)
    return [
        Row(
            metric=f"apply {count:,} schedules: first apply (creates; 1 run)",
            ours=(
                f"{first:.2f} s ({first_calls.write_count:,} writes, "
                f"{first_calls.read_count:,} reads)"
            ),
            baseline=f"{second:.2f} s (again, no change)",
            ratio=f"{ratio:.2f}x",
            goal=f"<= {RATIO_GOAL:g}x of again",
            met=None if quick else ratio <= RATIO_GOAL,
        ),
        Row(
            metric=f"apply {count:,} schedules again, no change: time",
            ours=f"{second:.2f} s",
        ),
        Row(
            metric=f"apply {count:,} schedules again, no change: Temporal writes",
            ours=f"{writes} in {len(again)} applies ({reads:,} reads each)",
            baseline=f"{first_calls.write_count:,} (first)",
            goal="0",
            # Not a speed: a write here is a bug, in --quick mode too.
            met=writes == 0,
        ),
    ]
