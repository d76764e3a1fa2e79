"""The worker's metrics object: what it counts, under which labels, in a registry of its own."""

from __future__ import annotations

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from cronwarden.worker_metrics import OUTCOMES, PHASES, WorkerMetrics


def samples(metrics: WorkerMetrics) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = generate_latest(metrics.registry).decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def test_it_counts_runs_by_schedule_and_outcome_and_replays_apart() -> None:
    metrics = WorkerMetrics()
    metrics.run_finished("s-1", "ran", replay=False)
    metrics.run_finished("s-1", "ran", replay=True)
    metrics.run_finished("s-2", "failed", replay=False)
    got = samples(metrics)
    assert got[("cronwarden_runs_total", (("outcome", "ran"), ("schedule_id", "s-1")))] == 2
    assert got[("cronwarden_runs_total", (("outcome", "failed"), ("schedule_id", "s-2")))] == 1
    assert got[("cronwarden_replays_total", (("outcome", "ran"), ("schedule_id", "s-1")))] == 1
    assert ("cronwarden_replays_total", (("outcome", "failed"), ("schedule_id", "s-2"))) not in got


def test_without_the_schedule_label_runs_are_counted_per_outcome_and_shown_at_zero() -> None:
    metrics = WorkerMetrics(schedule_label=False)
    metrics.run_finished("s-1", "ran", replay=False)
    metrics.run_finished("s-2", "ran", replay=False)
    got = samples(metrics)
    assert got[("cronwarden_runs_total", (("outcome", "ran"),))] == 2
    for outcome in OUTCOMES:
        assert ("cronwarden_replays_total", (("outcome", outcome),)) in got
    assert not any(dict(labels).get("schedule_id") is not None for _, labels in got)


def test_it_times_phases_and_counts_takeovers_commit_failures_and_describes() -> None:
    metrics = WorkerMetrics()
    with metrics.phase("job"):
        pass
    try:
        with metrics.phase("commit"):
            raise RuntimeError("a failing commit is timed too")
    except RuntimeError:
        pass
    metrics.lease_taken_over()
    metrics.commit_failed()
    metrics.commit_failed()
    metrics.describe_called()
    got = samples(metrics)
    counts = {p: got[("cronwarden_guard_phase_seconds_count", (("phase", p),))] for p in PHASES}
    assert counts == {"acquire": 0, "job": 1, "commit": 1}
    assert got[("cronwarden_lease_takeovers_total", ())] == 1
    assert got[("cronwarden_commit_failures_total", ())] == 2
    assert got[("cronwarden_describe_calls_total", ())] == 1


def test_each_worker_has_its_own_registry() -> None:
    first, second = WorkerMetrics(), WorkerMetrics()
    first.commit_failed()
    assert samples(second)[("cronwarden_commit_failures_total", ())] == 0
