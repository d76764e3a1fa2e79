"""Jobs the benchmarks run through the full guard (importing this module registers them)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from temporalio import activity

from cronwarden import JobContext, job

NOOP_JOB = "bench-noop"
LAG_JOB = "bench-lag"


@job(NOOP_JOB, read_only=True)
async def bench_noop(ctx: JobContext) -> None:
    """No writes of its own: every Postgres round trip of its run is the guard's."""
    return None


@job(LAG_JOB, read_only=True)
async def bench_lag(ctx: JobContext) -> dict[str, Any]:
    """Records, in its outbox record, when Temporal scheduled and started the activity and
    when the job itself started: the fire-lag benchmark reads them back."""
    info = activity.info()
    return {
        "started_at": datetime.now(UTC).isoformat(),
        "activity_started_at": info.started_time.isoformat(),
        "activity_scheduled_at": info.current_attempt_scheduled_time.isoformat(),
    }
