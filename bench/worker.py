"""The worker and schedules a measurement runs against: `cronwarden worker`'s own settings."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import Any

import asyncpg
from temporalio.client import Client
from temporalio.worker import Worker

import bench.jobs
from cronwarden.activities.jobs import REGISTRY
from cronwarden.schedules.apply import apply_definitions
from cronwarden.schedules.model import ScheduleDefinition
from cronwarden.store.pool import create_pool
from cronwarden.worker_runtime import build_worker, pool_size

MAX_CONCURRENT_RUNS = 10  # the default of CRONWARDEN_MAX_CONCURRENT_RUNS


async def worker_pool(dsn: str) -> asyncpg.Pool:
    return await create_pool(dsn, max_size=pool_size(MAX_CONCURRENT_RUNS))


def bench_worker(
    client: Client,
    pool: asyncpg.Pool,
    task_queue: str,
    *,
    extra_workflows: Sequence[type] = (),
    extra_activities: Sequence[Callable[..., Any]] = (),
) -> Worker:
    if bench.jobs.NOOP_JOB not in REGISTRY:
        raise RuntimeError("bench.jobs did not register the benchmark jobs")
    return build_worker(
        client=client,
        pool=pool,
        registry=REGISTRY,
        task_queue=task_queue,
        graceful_shutdown=timedelta(seconds=5),
        max_concurrent_runs=MAX_CONCURRENT_RUNS,
        extra_workflows=extra_workflows,
        extra_activities=extra_activities,
    )


async def make_schedules(
    client: Client,
    pool: asyncpg.Pool,
    *,
    task_queue: str,
    prefix: str,
    count: int,
    spec: dict[str, Any],
) -> list[str]:
    """`count` real schedules applied as `schedules apply` does (heartbeat rows included)."""
    tag = uuid.uuid4().hex[:6]
    defns = [
        ScheduleDefinition.model_validate({"id": f"{prefix}-{tag}-{i}", **spec})
        for i in range(count)
    ]
    await apply_definitions(client, pool, defns, task_queue=task_queue)
    return [d.id for d in defns]
