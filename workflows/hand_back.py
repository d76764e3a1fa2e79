"""Runs handed back by a stopping worker, and how the workflow runs them again.

A worker that stops (SIGTERM: a rolling release, a drain, a scale-down) gives its running jobs
the graceful-shutdown time, then cancels them. Left to Temporal, that cut is a failed attempt
(the SDK reports it as `WorkerShutdown`, retryable), so three drains fail the run and pause a
`pause_on_failure` schedule although the job itself never failed. Instead the guard releases the
lease and fails its activity as `HandedBack`; the workflow's retry policy lists that type (and
`WorkerShutdown`, from a worker released before this) as not retried, so Temporal spends no
attempt on it, and the workflow schedules the activity again: a new activity, whose attempts
start over from what the run had really spent.

Plain functions and constants only: the workflow imports this module through the sandbox.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

HANDED_BACK = "HandedBack"
"""A run the guard gave back because its worker is stopping: the lease is released, nothing
was committed, and the job's failure (`last_error`) is untouched. Retryable as far as the error
goes, so a workflow from before hand-backs retries it as it retried the cut before."""
WORKER_SHUTDOWN = "WorkerShutdown"
"""The SDK's failure type for an activity cut at the graceful timeout that ended cancelled (a
worker released before hand-backs): handed back too, its attempt unknown so counted as spent."""
HAND_BACK_TYPES = (HANDED_BACK, WORKER_SHUTDOWN)
HANDED_BACK_TOO_OFTEN = "HandedBackTooOften"
"""The run was handed back MAX_HAND_BACKS times and fails (not retried)."""

MAX_HAND_BACKS = 20
"""How many times one run may be handed back; the next cut fails it as before. Each hand-back
also spends the run's time (the job ran until the cut), and the run's execution timeout still
bounds the whole run."""
HAND_BACK_LEASE_MARGIN_SECONDS = 10.0
"""Beyond the lease's TTL, how long a run handed back waits for its lease once more: a stopping
worker whose release failed leaves the lease to expire by itself within one TTL."""


def attempts_spent(failure_type: str | None, details: Sequence[Any]) -> int:
    """How many of the run's attempts the handed-back activity had spent before the cut (its
    earlier attempts, which failed for real; the attempt that was cut is not one of them)."""
    if failure_type != HANDED_BACK or not details or not isinstance(details[0], int):
        # A `WorkerShutdown` from an older worker says nothing of its attempt: count it spent,
        # so a run never gets more real attempts than its schedule allows.
        return 1
    return max(details[0] - 1, 0)


def remaining_attempts(max_attempts: int, spent: int) -> int:
    """The retry policy's maximum for the run's next activity (0 stays Temporal's unlimited)."""
    if max_attempts <= 0:
        return max_attempts
    return max(max_attempts - spent, 1)
