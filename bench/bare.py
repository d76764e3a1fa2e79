"""The baseline of the guard-overhead benchmark: a plain workflow calling a no-op activity, with
the same timeouts and retry policy ScheduledRunWorkflow gives the guarded activity. Also the
no-op jobs the guarded side runs."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from temporalio import activity, workflow
from temporalio.common import RetryPolicy

with workflow.unsafe.imports_passed_through():
    from workflows.scheduled_run import ACTIVITY_HEARTBEAT_TIMEOUT

BARE_ACTIVITY = "bench.bare_noop"


@dataclass
class BareInput:
    key: str
    timeout_seconds: float = 900.0


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
            retry_policy=RetryPolicy(
                initial_interval=timedelta(seconds=1),
                backoff_coefficient=2.0,
                maximum_interval=timedelta(seconds=60),
                maximum_attempts=3,
            ),
        )
        return result
