"""Real servers for the tests (an embedded Postgres, a Temporal dev server) and workers on them,
in process or as `cronwarden worker` would be configured."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import asyncpg
from temporalio.client import Client
from temporalio.worker import Worker

import tests.support.jobs  # noqa: F401  (registers the test jobs for in-process workers)
from cronwarden.activities.jobs import REGISTRY, JobRegistry
from cronwarden.config import Settings
from cronwarden.embedded import EmbeddedPostgres, EmbeddedTemporal, free_port
from cronwarden.worker_runtime import build_worker

TEST_JOBS = "tests.support.jobs"
"""The job module a worker of the tests loads (CRONWARDEN_JOBS)."""


def embedded_postgres(root: Path) -> EmbeddedPostgres:
    """A throwaway Postgres under `root` (fsync off: tests never survive a host crash)."""
    return EmbeddedPostgres(
        data_dir=root / "data", port=free_port(), fast_unsafe=True, log_file=root / "pg.log"
    )


def embedded_temporal(root: Path, *, persisted: bool = False) -> EmbeddedTemporal:
    """A Temporal dev server; `persisted` keeps its state in a SQLite file across restarts."""
    return EmbeddedTemporal(
        port=free_port(),
        ui_port=None,
        db_file=root / "temporal.db" if persisted else None,
        log_file=root / "temporal.log",
    )


def in_process_worker(
    client: Client,
    pool: asyncpg.Pool,
    task_queue: str,
    registry: JobRegistry = REGISTRY,
    *,
    before_job_queues: bool = False,
) -> Worker:
    """`before_job_queues`: a worker as released before per-job task queues, for the path the
    runs it starts still take (their activity on the schedule's queue, for any worker)."""
    return build_worker(
        client=client,
        pool=pool,
        registry=registry,
        task_queue=task_queue,
        graceful_shutdown=timedelta(seconds=5),
        before_job_queues=before_job_queues,
    )


def worker_settings(temporal_server: EmbeddedTemporal, task_queue: str, **values: Any) -> Settings:
    """Settings for an in-process `run_worker` on this test's servers and task queue."""
    return Settings(
        _env_file=None,  # type: ignore[call-arg]
        temporal_address=temporal_server.address,
        task_queue=task_queue,
        jobs=TEST_JOBS,
        **values,
    )
