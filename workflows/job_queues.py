"""Per-job activity task queues: where a run's guarded activity waits for a worker with its job.

The workflow keeps running on the schedule's task queue (any worker can decide a run), but it
hands the guarded activity to a queue named after the job, and a worker polls only the queues of
the jobs it registered. A worker without the job never sees the run, so a rolling release that
adds, removes or renames a job costs no attempt: the run waits (schedule-to-start) until a
worker that has the job polls, and nothing but the run's own bound ends that wait.

Temporal's rules for a task queue name: not empty, at most 1,000 bytes (the server's
`limit.maxIDLength`), valid UTF-8, and not starting with `/_sys/` (its partitions' prefix). A
base queue that Temporal accepts never starts with that prefix, so neither does
`{base}/job/{name}`; only the length is left to check.

Plain functions and constants only: the workflow imports this module through the sandbox.
"""

from __future__ import annotations

JOB_QUEUE_INFIX = "/job/"
MAX_TASK_QUEUE_BYTES = 1000
"""Temporal's default `limit.maxIDLength`, which bounds task queue names too."""

# Failure type of a run that no worker with its job picked up within its wait (not retried:
# Temporal never retries a schedule-to-start timeout, and a retry would wait on the same queue).
NO_WORKER_WITH_JOB = "NoWorkerWithJob"


def job_task_queue(task_queue: str, job: str) -> str:
    """The activity task queue of `job`'s runs on the schedule task queue `task_queue`."""
    return f"{task_queue}{JOB_QUEUE_INFIX}{job}"


def job_queue_problem(task_queue: str, job: str) -> str | None:
    """Why `job`'s activity queue cannot exist on Temporal, or None when it can."""
    # The infix must name exactly one split: a schedule queue `q/job/probe` would poll job
    # `probe`'s queue on `q`, and job `b/job/c` on `q` is job `c` on `q/job/b`. Either would
    # hand a run to a worker that does not have its job.
    if JOB_QUEUE_INFIX in task_queue:
        return (
            f"task queue '{task_queue[:80]}' contains '{JOB_QUEUE_INFIX}', which cronwarden "
            "keeps for the queues of jobs: choose another task queue name"
        )
    if JOB_QUEUE_INFIX in job:
        return (
            f"job '{job[:80]}' contains '{JOB_QUEUE_INFIX}', which cronwarden keeps for the "
            "queues of jobs: choose another job name"
        )
    try:
        size = len(job_task_queue(task_queue, job).encode())
    except UnicodeEncodeError:
        return f"job {job!r} cannot name a Temporal task queue: it is not valid UTF-8"
    if size > MAX_TASK_QUEUE_BYTES:
        return (
            f"job '{job[:80]}' cannot have an activity task queue on '{task_queue}': the name "
            f"would be {size} bytes, over Temporal's {MAX_TASK_QUEUE_BYTES}; use a shorter job name"
        )
    return None
