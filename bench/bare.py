"""The baseline of the guard-overhead benchmark: a plain workflow calling a no-op activity, with
the same timeouts and retry policy ScheduledRunWorkflow gives the guarded activity. Also the
no-op jobs the guarded side runs."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from temporalio import activity, workflow

with workflow.unsafe.imports_passed_through():
    from cronwarden.workflows.scheduled_run import ACTIVITY_HEARTBEAT_TIMEOUT, run_retry_policy

BARE_ACTIVITY = "bench.bare_noop"


@dataclass
class BareInput:
    key: str
    timeout_seconds: float = 900.0
    max_attempts: int = 3


@activity.defn(name=BARE_ACTIVITY)
async def bare_noop(inp: BareInput) -> str:
    return inp.key


@workflow.defn(name="BenchBareWorkflow")
class BareWorkflow:
    @workflow.run
    async def run(self, inp: BareInput) -> str:
        timeout = timedelta(seconds=inp.timeout_seconds)
        result: str = await workflow.execute_activity(
            BARE_ACTIVITY,
            inp,
            result_type=str,
            start_to_close_timeout=timeout,
            heartbeat_timeout=min(ACTIVITY_HEARTBEAT_TIMEOUT, timeout),
            retry_policy=run_retry_policy(inp.max_attempts),
        )
        return result
