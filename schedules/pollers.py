"""Who polls a task queue, by Temporal's account: the evidence for the causes "no worker polls
the task queue" and "no worker has job X".

A run's workflow waits on the schedule's task queue, its guarded activity on the job's own queue
(workflows/job_queues.py), which only workers that registered the job poll. Temporal remembers
each poller for a few minutes after its last poll (its poller history), so a queue reported
unpolled has had no worker for at least that long: a worker busy with a long poll, or stopped a
minute ago, still counts as polling. One DescribeTaskQueue call per queue; nothing is cached.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from temporalio.api.enums.v1 import TaskQueueKind, TaskQueueType
from temporalio.api.taskqueue.v1 import TaskQueue
from temporalio.api.workflowservice.v1 import DescribeTaskQueueRequest
from temporalio.client import Client
from temporalio.service import RPCError

from cronwarden.logs import get_logger
from cronwarden.workflows.job_queues import job_task_queue

log = get_logger("cronwarden.pollers")

DESCRIBE_TIMEOUT = timedelta(seconds=5)
# At most this many DescribeTaskQueue calls in flight for one batch.
CONCURRENCY = 8


@dataclass(frozen=True)
class QueuePollers:
    task_queue: str
    activity: bool
    """The queue's activity side (a job's queue), else its workflow side (the schedule's)."""
    identities: tuple[str, ...]
    """Workers Temporal saw polling it recently (`pid@host` for cronwarden's)."""
    last_poll_at: datetime | None
    """The latest poll Temporal remembers, aware UTC."""

    @property
    def polled(self) -> bool:
        return bool(self.identities)


async def queue_pollers(
    client: Client,
    task_queue: str,
    *,
    activity: bool,
    rpc_timeout: timedelta = DESCRIBE_TIMEOUT,
) -> QueuePollers:
    """Temporal's pollers of one queue (raises RPCError when Temporal cannot be asked)."""
    response = await client.workflow_service.describe_task_queue(
        DescribeTaskQueueRequest(
            namespace=client.namespace,
            task_queue=TaskQueue(name=task_queue, kind=TaskQueueKind.TASK_QUEUE_KIND_NORMAL),
            task_queue_type=(
                TaskQueueType.TASK_QUEUE_TYPE_ACTIVITY
                if activity
                else TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW
            ),
        ),
        timeout=rpc_timeout,
    )
    seen = [
        p.last_access_time.ToDatetime(tzinfo=UTC)
        for p in response.pollers
        if p.HasField("last_access_time")
    ]
    return QueuePollers(
        task_queue=task_queue,
        activity=activity,
        identities=tuple(sorted({p.identity for p in response.pollers})),
        last_poll_at=max(seen, default=None),
    )


async def job_pollers(
    client: Client, *, task_queue: str, job: str, rpc_timeout: timedelta = DESCRIBE_TIMEOUT
) -> QueuePollers:
    """The pollers of `job`'s activity queue on the schedule task queue `task_queue`: the
    workers that can run its runs."""
    return await queue_pollers(
        client, job_task_queue(task_queue, job), activity=True, rpc_timeout=rpc_timeout
    )


async def jobs_without_worker(
    client: Client, *, task_queue: str, jobs: Iterable[str]
) -> dict[str, QueuePollers]:
    """Of `jobs` (repeats asked once), those whose activity queue no worker polls, each with
    what Temporal said. A job Temporal could not be asked about is left out (cause unknown,
    logged), so a Temporal outage never reads as "no worker"."""
    names = sorted(set(jobs))
    limit = asyncio.Semaphore(CONCURRENCY)

    async def ask(job: str) -> QueuePollers | None:
        async with limit:
            try:
                return await job_pollers(client, task_queue=task_queue, job=job)
            except (RPCError, TimeoutError) as exc:
                log.warning("pollers.describe-failed", job=job, error=str(exc))
                return None

    answers = await asyncio.gather(*(ask(job) for job in names))
    return {
        job: found
        for job, found in zip(names, answers, strict=True)
        if found is not None and not found.polled
    }


def no_worker_cause(job: str, found: QueuePollers) -> str | None:
    """The cause line for a run of `job` that waits for a worker, or None when one polls."""
    if found.polled:
        return None
    return (
        f"no worker has job '{job}': nothing polls its task queue '{found.task_queue}'; "
        f"start a worker whose CRONWARDEN_JOBS registers '{job}'"
    )
