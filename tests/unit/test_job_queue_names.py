"""A job's activity queue is `{task queue}/job/{job}`: a name that holds the infix itself would
make two queues one, and hand a run to a worker without its job."""

from __future__ import annotations

from cronwarden.workflows.job_queues import job_queue_problem, job_task_queue


def test_the_infix_is_refused_in_a_task_queue_and_in_a_job_name() -> None:
    # Two spellings of one queue: job `probe` on `q/job/noop`, job `noop/job/probe` on `q`.
    assert job_task_queue("q/job/noop", "probe") == job_task_queue("q", "noop/job/probe")
    assert "task queue 'q/job/noop' contains '/job/'" in (
        job_queue_problem("q/job/noop", "probe") or ""
    )
    assert "job 'noop/job/probe' contains '/job/'" in (
        job_queue_problem("q", "noop/job/probe") or ""
    )
    # A schedule queue that is another queue's job queue.
    assert job_queue_problem("q/job/probe", "noop-digest") is not None
    assert job_queue_problem("q", "probe") is None
    assert job_queue_problem("reports/v2", "nightly/ledger") is None
