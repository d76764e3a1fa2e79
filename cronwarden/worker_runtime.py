"""The worker process: poll the task queues until told to stop, then drain.

One process runs several Temporal Workers (a Python SDK Worker polls one task queue): one on the
schedule's task queue for the workflows (and the guarded activity of runs started before per-job
queues), and one per registered job on that job's activity queue (workflows/job_queues.py). They
start, stop and drain together, and share one budget of runs (cronwarden/worker_slots.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from datetime import timedelta
from typing import TYPE_CHECKING, Any

import asyncpg
from temporalio import activity
from temporalio.client import Client
from temporalio.worker import (
    FixedSizeSlotSupplier,
    PollerBehaviorSimpleMaximum,
    Worker,
    WorkerTuner,
)
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner

from cronwarden import temporal
from cronwarden.activities.contract import RUN_GUARDED, GuardedRunInput, RunOutcome
from cronwarden.activities.guard import GuardedRun
from cronwarden.activities.jobs import JobRegistry, import_job_modules
from cronwarden.activities.run_failures import RunFailures
from cronwarden.config import Settings
from cronwarden.errors import InvalidInput
from cronwarden.health import WorkerReadiness, serve_health
from cronwarden.logs import get_logger
from cronwarden.store.pool import create_pool
from cronwarden.tracing import worker_tracing
from cronwarden.worker_metrics import WorkerMetrics
from cronwarden.worker_slots import RunSlots, SlotNotTaken
from cronwarden.workflows.job_queues import job_queue_problem, job_task_queue
from cronwarden.workflows.scheduled_run import JOB_QUEUES_PATCH, ScheduledRunWorkflow

if TYPE_CHECKING:
    from cronwarden.otel import WorkerTracing

log = get_logger("cronwarden.worker")

# The SDK's own defaults for the slots that are not runs.
WORKFLOW_TASK_SLOTS = 100
LOCAL_ACTIVITY_SLOTS = 100
# Pollers per activity queue. One long poll per job queue is enough for cron traffic (after a
# task arrives the next poll goes out at once), and each idle poll is one open request to
# Temporal: a process with N jobs keeps N + 1 activity polls open, each renewed about once a
# minute when idle.
ACTIVITY_POLLERS_PER_QUEUE = 1


def pool_size(max_concurrent_runs: int) -> int:
    """A run may hold its commit transaction's connection while its lease renewal needs a
    second one; size the pool so neither waits on the other."""
    return 2 * max_concurrent_runs + 2


def worker_identity() -> str:
    return f"{os.getpid()}@{socket.gethostname()}"


class RunWorker(Worker):
    """The Worker on the schedule's task queue, carrying one activity Worker per registered job:
    they run, stop and drain together, so callers handle one Worker as before."""

    def __init__(self, client: Client, *, job_workers: Sequence[Worker], **config: Any) -> None:
        super().__init__(client, **config)
        self.job_workers = tuple(job_workers)

    @property
    def is_running(self) -> bool:
        return super().is_running and all(w.is_running for w in self.job_workers)

    async def run(self) -> None:
        try:
            async with asyncio.TaskGroup() as group:
                for job_worker in self.job_workers:
                    group.create_task(job_worker.run())
                group.create_task(super().run())
        except BaseExceptionGroup as failed:
            # The first Worker to fail stops the others: raise its error as the SDK would.
            raise failed.exceptions[0] from None

    async def shutdown(self) -> None:
        # All at once: in-flight runs on every queue share one graceful timeout, and no queue
        # keeps taking runs while another drains.
        await asyncio.gather(super().shutdown(), *(w.shutdown() for w in self.job_workers))


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
    before_job_queues: bool = False,
) -> Worker:
    """`extra_*`: more workflows/activities on the schedule's queue (the guard-overhead
    benchmark runs its bare baseline beside the guarded runs, under the same settings).
    `metrics`: where the guarded runs are counted. `tracing`: what traces them (none: tracing
    off). `max_concurrent_runs` bounds the runs of the whole process, every queue together.
    `before_job_queues`: a worker as released before per-job queues (it decides new runs the
    old way and polls no job queue), for tests of the path such runs take while they drain."""
    for name in registry.names():
        problem = job_queue_problem(task_queue, name)
        if problem is not None:
            raise InvalidInput(problem)
    guarded = GuardedRun(
        pool=pool,
        registry=registry,
        client=client,
        worker_identity=worker_identity(),
        metrics=metrics,
        tracer=tracing.guard if tracing else None,
    )
    slots = RunSlots(max_concurrent_runs)
    run_guarded = _within_slots(guarded, slots)
    common: dict[str, Any] = {
        # On the worker, not the client: the spans are the workflow's and the activity's, and
        # the calls this worker's client makes (describe, pause) are ones the interceptor does
        # not trace. A client given by the caller may be its own, so it is left as it is.
        "interceptors": [tracing.interceptor] if tracing else [],
        "graceful_shutdown_timeout": graceful_shutdown,
        # One tuner for all: its fixed suppliers become each Worker's own, its run slots are
        # the one budget every Worker shares.
        "tuner": WorkerTuner.create_composite(
            workflow_supplier=FixedSizeSlotSupplier(WORKFLOW_TASK_SLOTS),
            activity_supplier=slots,
            local_activity_supplier=FixedSizeSlotSupplier(LOCAL_ACTIVITY_SLOTS),
            nexus_supplier=FixedSizeSlotSupplier(1),
        ),
        "activity_task_poller_behavior": PollerBehaviorSimpleMaximum(ACTIVITY_POLLERS_PER_QUEUE),
        # The SDK sends at most one heartbeat per 0.8 x heartbeat timeout by default (8 s of our
        # 10 s): too little slack for a busy host. Let our 2 s heartbeats through sooner.
        "max_heartbeat_throttle_interval": timedelta(seconds=3),
    }
    job_workers = [
        Worker(
            client, task_queue=job_task_queue(task_queue, name), activities=[run_guarded], **common
        )
        for name in ([] if before_job_queues else registry.names())
    ]
    if before_job_queues:
        common["patch_activation_callback"] = lambda p: p.patch_id != JOB_QUEUES_PATCH
    return RunWorker(
        client,
        job_workers=job_workers,
        task_queue=task_queue,
        workflows=[ScheduledRunWorkflow, *extra_workflows],
        # The guarded activity here too: runs started before per-job queues scheduled it on
        # this queue, and their retries still come here.
        activities=[run_guarded, RunFailures(pool=pool).record_no_worker, *extra_activities],
        workflow_runner=tracing.workflow_runner() if tracing else SandboxedWorkflowRunner(),
        **common,
    )


def _within_slots(guarded: GuardedRun, slots: RunSlots) -> Callable[..., Any]:
    """The guarded activity, run only inside one of the process's run slots."""

    @activity.defn(name=RUN_GUARDED)
    async def run_guarded(inp: GuardedRunInput) -> RunOutcome:
        queued = time.monotonic()
        try:
            async with slots.running(heartbeat=activity.heartbeat, give_up=_slot_wait_over):
                # A wait for a slot comes out of the wait for the lease, as a wait in the queue
                # does: the activity's start-to-close covers both waits plus the job's timeout.
                waited = time.monotonic() - queued
                if waited > 0 and inp.lock_wait_seconds:
                    inp = replace(inp, lock_wait_seconds=max(inp.lock_wait_seconds - waited, 0.0))
                return await guarded.run_guarded(inp)
        except SlotNotTaken:
            # A task this process took beyond its budget (pollers of several queues in the same
            # instant), or one still waiting when the worker stops: handed back, no attempt
            # spent, while Temporal's clock on the attempt still has room. The workflow
            # dispatches it again, to a worker with a free slot; a saturated one is not polling.
            raise guarded.handed_back(inp, where="waiting for a run slot") from None

    return run_guarded


# How long a task waits for a run slot before it goes back: at most this, and at most half the
# attempt's start-to-close (its job's timeout needs the rest).
SLOT_WAIT_LIMIT = 10.0


def _slot_wait_over(waited: float) -> bool:
    if activity.is_worker_shutdown():
        return True
    budget = activity.info().start_to_close_timeout
    limit = SLOT_WAIT_LIMIT if budget is None else min(SLOT_WAIT_LIMIT, budget.total_seconds() / 2)
    return waited >= limit


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
    metrics = WorkerMetrics(
        schedule_label=settings.metrics_schedule_label, label_keys=settings.metrics_label_keys()
    )
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
            job_queues=[job_task_queue(settings.task_queue, n) for n in registry.names()],
            max_concurrent_runs=settings.max_concurrent_runs,
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
