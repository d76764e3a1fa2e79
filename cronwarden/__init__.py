"""cronwarden: scheduled jobs on Temporal Schedules, guarded by lease, outbox and heartbeat.

A job module needs only this package's top: `from cronwarden import job, JobContext`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"
__all__ = ["JobContext", "job"]

if TYPE_CHECKING:
    from cronwarden.activities.jobs import JobContext, job


def __getattr__(name: str) -> Any:
    # Lazy: every `cronwarden` command imports this package, and most of them (status, backfill,
    # monitor) never load the job API or the pydantic it brings.
    if name in __all__:
        from cronwarden.activities import jobs

        return getattr(jobs, name)
    raise AttributeError(f"module 'cronwarden' has no attribute {name!r}")
