"""The worker process: poll the task queue until told to stop, then drain."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any

import asyncpg
from temporalio.client import Client
from temporalio.worker import Worker
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner

from cronwarden import temporal
from cronwarden.activities.guard import GuardedRun
from cronwarden.activities.jobs import JobRegistry, import_job_modules
from cronwarden.config import Settings
from cronwarden.errors import InvalidInput
from cronwarden.health import WorkerReadiness, serve_health
from cronwarden.logs import get_logger
from cronwarden.store.pool import create_pool
from cronwarden.tracing import worker_tracing
from cronwarden.worker_metrics import WorkerMetrics
from cronwarden.workflows.scheduled_run import ScheduledRunWorkflow

if TYPE_CHECKING:
    from cronwarden.otel import WorkerTracing

log = get_logger("cronwarden.worker")


def pool_size(max_concurrent_runs: int) -> int:
    """A run may hold its commit transaction's connection while its lease renewal needs a
    second one; size the pool so neither waits on the other."""
    return 2 * max_concurrent_runs + 2


def worker_identity() -> str:
    return f"{os.getpid()}@{socket.gethostname()}"


def build_worker(
    *,
    client: Client,
    pool: asyncpg.Pool,
    registry: JobRegistry,
    task_queue: str,
    graceful_shutdown: timedelta,
    max_concurrent_runs: int = 10,
    extra_workflows: Sequence[type] = (),
    extra_activities: Sequence[Callable[..., Any]] = (),
    metrics: WorkerMetrics | None = None,
    tracing: WorkerTracing | None = None,
) -> Worker:
    """`extra_*`: more workflows/activities on the same worker (the guard-overhead benchmark
    runs its bare baseline beside the guarded runs, under the same settings). `metrics`: where
    the guarded runs are counted. `tracing`: what traces them (none: tracing off)."""
    guarded = GuardedRun(
        pool=pool,
        registry=registry,
        client=client,
        worker_identity=worker_identity(),
        metrics=metrics,
        tracer=tracing.guard if tracing else None,
    )
    return Worker(
        client,
        task_queue=task_queue,
        workflows=[ScheduledRunWorkflow, *extra_workflows],
        activities=[guarded.run_guarded, *extra_activities],
        # On the worker, not the client: the spans are the workflow's and the activity's, and
        # the calls this worker's client makes (describe, pause) are ones the interceptor does
        # not trace. A client given by the caller may be its own, so it is left as it is.
        interceptors=[tracing.interceptor] if tracing else [],
        workflow_runner=tracing.workflow_runner() if tracing else SandboxedWorkflowRunner(),
        graceful_shutdown_timeout=graceful_shutdown,
        max_concurrent_activities=max_concurrent_runs,
        # The SDK sends at most one heartbeat per 0.8 x heartbeat timeout by default (8 s of our
        # 10 s): too little slack for a busy host. Let our 2 s heartbeats through sooner.
        max_heartbeat_throttle_interval=timedelta(seconds=3),
    )


async def run_worker(
    settings: Settings,
    *,
    client: Client | None = None,
    pool: asyncpg.Pool | None = None,
    stop: asyncio.Event | None = None,
    tracing: WorkerTracing | None = None,
) -> None:
    """Run until `stop` is set or SIGINT/SIGTERM arrives; in-flight runs get the graceful
    timeout to finish, after which they are cancelled (and retried elsewhere). `tracing`: the
    caller's, left running; none given, CRONWARDEN_TRACING decides, and what it starts is
    flushed and shut down when the worker stops."""
    if not settings.job_modules():
        # A worker with no jobs would fail every run it picks up (and pause every
        # pause_on_failure schedule on the queue): refuse to start instead.
        raise InvalidInput("CRONWARDEN_JOBS is not set: name the modules that register your jobs")
    registry = import_job_modules(settings.job_modules())
    own_tracing = None if tracing else worker_tracing(settings)
    tracing = tracing or own_tracing
    own_pool = pool is None
    if client is None:
        client = await temporal.connect(settings)
    if pool is None:
        pool = await create_pool(settings.dsn, max_size=pool_size(settings.max_concurrent_runs))
    stop = stop or asyncio.Event()
    loop = asyncio.get_running_loop()
    installed: list[signal.Signals] = []
    for sig in (signal.SIGINT, signal.SIGTERM):
        try:
            loop.add_signal_handler(sig, stop.set)
            installed.append(sig)
        except (NotImplementedError, RuntimeError):
            pass
    metrics = WorkerMetrics(schedule_label=settings.metrics_schedule_label)
    try:
        worker = build_worker(
            client=client,
            pool=pool,
            registry=registry,
            task_queue=settings.task_queue,
            graceful_shutdown=timedelta(seconds=settings.graceful_shutdown_seconds),
            max_concurrent_runs=settings.max_concurrent_runs,
            metrics=metrics,
            tracing=tracing,
        )
        log.info(
            "worker.started",
            task_queue=settings.task_queue,
            namespace=settings.namespace,
            jobs=registry.names(),
            identity=worker_identity(),
            tracing=tracing is not None,
        )
        async with contextlib.AsyncExitStack() as serving:
            if settings.health_port is not None:
                # Up before the worker polls and down only after it drained: /readyz reads
                # `stop`, so it turns 503 the moment a stop is asked, before the drain.
                readiness = WorkerReadiness(
                    client=client,
                    pool=pool,
                    polling=lambda: worker.is_running,
                    draining=stop.is_set,
                )
                await serving.enter_async_context(
                    serve_health(settings.health_port, readiness, metrics=metrics.registry)
                )
            async with worker:
                await stop.wait()
                log.info("worker.draining", graceful_seconds=settings.graceful_shutdown_seconds)
        log.info("worker.stopped")
    finally:
        for sig in installed:
            loop.remove_signal_handler(sig)
        if own_pool:
            await pool.close()
        if own_tracing is not None:
            # Blocks while the last spans are exported: off the loop.
            await asyncio.to_thread(own_tracing.shutdown)
