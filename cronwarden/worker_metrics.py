"""The worker's Prometheus metrics, served at `/metrics` on its health port (cronwarden/health.py).

Every count is of activity attempts on this worker: a run Temporal retries counts once per
attempt, on whichever worker ran it. A cancelled attempt (worker shutdown past its graceful
timeout, a run cancelled in Temporal) is counted by no outcome: its retry is.

The registry is the worker's own, never the library's global one: several workers in one process
(tests, the benchmark) each count their own runs. Labels stay bounded: `outcome` and `phase` take
the few values below, and `schedule_id` one per schedule, dropped altogether for large fleets
(`CRONWARDEN_METRICS_SCHEDULE_LABEL=false`).
"""

from __future__ import annotations

from typing import Final

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.context_managers import Timer

from cronwarden.activities.contract import ALREADY_DONE, NOT_IN_RULE, OVERLAP_LOCKED, RAN

LEASE_LOST_OUTCOME: Final = "lease-lost"
FAILED: Final = "failed"
OUTCOMES: Final = (RAN, ALREADY_DONE, OVERLAP_LOCKED, NOT_IN_RULE, LEASE_LOST_OUTCOME, FAILED)
PHASES: Final = ("acquire", "job", "commit")
# From a fast lease statement to a job of several minutes.
PHASE_BUCKETS: Final = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900)


class WorkerMetrics:
    """One per worker; `GuardedRun` records into it."""

    def __init__(
        self, *, registry: CollectorRegistry | None = None, schedule_label: bool = True
    ) -> None:
        self.registry = registry or CollectorRegistry()
        self._schedule_label = schedule_label
        per_run = ("schedule_id", "outcome") if schedule_label else ("outcome",)
        self._runs = Counter(
            "cronwarden_runs",
            "Guarded run attempts finished, by outcome (replays included).",
            per_run,
            registry=self.registry,
        )
        self._replays = Counter(
            "cronwarden_replays",
            "Guarded run attempts of `backfill run` replays finished, by outcome.",
            per_run,
            registry=self.registry,
        )
        self._phases = Histogram(
            "cronwarden_guard_phase_seconds",
            "Time spent in each phase of a guarded run: acquire (the lease, with any wait for "
            "it), job, commit (the wait for the next fire times and the commit statement).",
            ("phase",),
            buckets=PHASE_BUCKETS,
            registry=self.registry,
        )
        self._takeovers = Counter(
            "cronwarden_lease_takeovers",
            "Leases taken from a holder that had not released them: expired, or held by an "
            "earlier attempt of the same run.",
            registry=self.registry,
        )
        self._commit_failures = Counter(
            "cronwarden_commit_failures",
            "Commits that raised and did not land (the run is retried).",
            registry=self.registry,
        )
        self._describes = Counter(
            "cronwarden_describe_calls",
            "Temporal describe calls the guard made for schedules' next fire times.",
            registry=self.registry,
        )
        for phase in PHASES:
            self._phases.labels(phase)
        if not schedule_label:
            # Without a per-schedule label every series is known up front: show them at zero.
            for outcome in OUTCOMES:
                self._runs.labels(outcome)
                self._replays.labels(outcome)

    def run_finished(self, schedule_id: str, outcome: str, *, replay: bool) -> None:
        """`outcome`: one of OUTCOMES."""
        labels = (schedule_id, outcome) if self._schedule_label else (outcome,)
        self._runs.labels(*labels).inc()
        if replay:
            self._replays.labels(*labels).inc()

    def phase(self, phase: str) -> Timer:
        """Times the block (also when it raises) into the phase's histogram."""
        return self._phases.labels(phase).time()

    def lease_taken_over(self) -> None:
        self._takeovers.inc()

    def commit_failed(self) -> None:
        self._commit_failures.inc()

    def describe_called(self) -> None:
        self._describes.inc()
