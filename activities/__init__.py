"""Jobs and the guarded activity that runs them."""

from __future__ import annotations

from activities.jobs import REGISTRY, JobContext, JobSpec, job

__all__ = ["REGISTRY", "JobContext", "JobSpec", "job"]
