"""The worker's Prometheus metrics, served at `/metrics` on its health port (cronwarden/health.py).

Every count is of activity attempts on this worker: a run Temporal retries counts once per
attempt, on whichever worker ran it. A cancelled attempt (worker shutdown past its graceful
timeout, a run cancelled in Temporal) is counted by no outcome: its retry is.

The registry is the worker's own, never the library's global one: several workers in one process
(tests, the benchmark) each count their own runs. Labels stay bounded: `outcome` and `phase` take
the few values below, and `schedule_id` one per schedule, dropped altogether for large fleets
(`CRONWARDEN_METRICS_SCHEDULE_LABEL=false`).

Schedule labels become Prometheus labels only when named (`CRONWARDEN_METRICS_LABELS=team,env`,
as `label_team`, `label_env`): each one multiplies the series of the run counters, so none is
added by default. Each named key takes at most `LABEL_VALUES_BOUND` distinct values in one
worker's life; later new values are counted under `other`, so a label fed by something unbounded
(a ticket number, a commit) cannot grow the worker's memory and Prometheus's series without end.
A schedule without the label counts under the empty value, which Prometheus reads as no label.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Final

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.context_managers import Timer

from cronwarden.activities.contract import ALREADY_DONE, NOT_IN_RULE, OVERLAP_LOCKED, RAN
from cronwarden.schedules.labels import metric_label_name

LEASE_LOST_OUTCOME: Final = "lease-lost"
FAILED: Final = "failed"
OUTCOMES: Final = (RAN, ALREADY_DONE, OVERLAP_LOCKED, NOT_IN_RULE, LEASE_LOST_OUTCOME, FAILED)
PHASES: Final = ("acquire", "job", "commit")
# From a fast lease statement to a job of several minutes.
PHASE_BUCKETS: Final = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900)
LABEL_VALUES_BOUND: Final = 50
"""Distinct values one opted-in label key takes per worker before new ones count as `other`:
enough for the teams or environments a label names, far from what an id-like value reaches."""
OTHER: Final = "other"


class WorkerMetrics:
    """One per worker; `GuardedRun` records into it."""

    def __init__(
        self,
        *,
        registry: CollectorRegistry | None = None,
        schedule_label: bool = True,
        label_keys: Sequence[str] = (),
        label_values_bound: int | None = None,
    ) -> None:
        """`label_keys`: the schedule label keys counted as Prometheus labels (none by
        default); `label_values_bound`: distinct values each keeps before `other` (None:
        LABEL_VALUES_BOUND)."""
        self.registry = registry or CollectorRegistry()
        self._schedule_label = schedule_label
        self._label_keys = tuple(dict.fromkeys(label_keys))
        self._bound = LABEL_VALUES_BOUND if label_values_bound is None else label_values_bound
        self._seen: dict[str, set[str]] = {key: set() for key in self._label_keys}
        per_run = (
            *(("schedule_id",) if schedule_label else ()),
            *(metric_label_name(k) for k in self._label_keys),
            "outcome",
        )
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
        if not schedule_label and not self._label_keys:
            # Without a per-schedule label every series is known up front: show them at zero.
            for outcome in OUTCOMES:
                self._runs.labels(outcome)
                self._replays.labels(outcome)

    def run_finished(
        self,
        schedule_id: str,
        outcome: str,
        *,
        replay: bool,
        labels: Mapping[str, str] | None = None,
    ) -> None:
        """`outcome`: one of OUTCOMES; `labels`: the schedule's labels (of which only the
        opted-in keys are counted)."""
        values = (
            *((schedule_id,) if self._schedule_label else ()),
            *(self._bounded(key, (labels or {}).get(key, "")) for key in self._label_keys),
            outcome,
        )
        self._runs.labels(*values).inc()
        if replay:
            self._replays.labels(*values).inc()

    def _bounded(self, key: str, value: str) -> str:
        seen = self._seen[key]
        if value in seen or not value:
            return value
        if len(seen) >= self._bound:
            return OTHER
        seen.add(value)
        return value

    def phase(self, phase: str) -> Timer:
        """Times the block (also when it raises) into the phase's histogram."""
        return self._phases.labels(phase).time()

    def lease_taken_over(self) -> None:
        self._takeovers.inc()

    def commit_failed(self) -> None:
        self._commit_failures.inc()

    def describe_called(self) -> None:
        self._describes.inc()
