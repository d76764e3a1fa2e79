"""Recording the failure of a run that never reached its guarded activity.

A run whose job no worker has waits in the job's task queue (workflows/job_queues.py) and, at
the end of its wait, fails without any guarded activity having run, so nothing would write the
schedule's `last_error`. The workflow then asks any worker on the schedule's task queue to
record it, so `status`, `describe` and the overdue page say why, as they do for a job's own
failure. A replay's failure is recorded as the replay's (the live picture shows live fires).
"""

from __future__ import annotations

from dataclasses import dataclass

import asyncpg
from temporalio import activity

from cronwarden.logs import get_logger
from cronwarden.store import heartbeats
from cronwarden.store.pool import own_statements

RECORD_NO_WORKER = "cronwarden.record_no_worker"

log = get_logger("cronwarden.run")


@dataclass
class NoWorkerInput:
    schedule_id: str
    logical_key: str
    job: str
    error: str
    replay: bool = False


class RunFailures:
    """Holds the pool; `worker_runtime.py` registers `record_no_worker` on the schedule's queue."""

    def __init__(self, *, pool: asyncpg.Pool) -> None:
        self._pool = pool

    @activity.defn(name=RECORD_NO_WORKER)
    async def record_no_worker(self, inp: NoWorkerInput) -> None:
        log.error(
            "run.no-worker-with-job",
            schedule_id=inp.schedule_id,
            logical_key=inp.logical_key,
            job=inp.job,
            replay=inp.replay,
        )
        async with own_statements(self._pool) as conn:
            if inp.replay:
                await heartbeats.record_replay_failure(
                    conn, schedule_id=inp.schedule_id, logical_key=inp.logical_key, error=inp.error
                )
            else:
                await heartbeats.record_failure(conn, schedule_id=inp.schedule_id, error=inp.error)
