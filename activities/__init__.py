"""Jobs and the guarded activity that runs them."""

from __future__ import annotations

from cronwarden.activities.jobs import REGISTRY, JobContext, JobSpec, job

__all__ = ["REGISTRY", "JobContext", "JobSpec", "job"]
