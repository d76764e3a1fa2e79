"""Job registries for tests that check schedule files without running a job."""

from __future__ import annotations

from cronwarden.activities.jobs import JobContext, JobRegistry, JobResult, JobSpec


async def _noop(ctx: JobContext) -> JobResult:
    return None


def noop_registry() -> JobRegistry:
    """A registry holding one job, `noop`, which does nothing."""
    registry = JobRegistry()
    registry.register(JobSpec(name="noop", func=_noop, read_only=False, args_model=None))
    return registry
