"""Real servers for integration tests: one embedded Postgres and one Temporal dev server per
session; a fresh database (copied from a migrated template) and a fresh task queue per test.
The fixtures live in tests/support/fixtures.py, which the fault suite shares."""

from __future__ import annotations

from tests.support.fixtures import (  # noqa: F401  (the fixtures of the integration tests)
    cli_env,
    client,
    database,
    pool,
    postgres_server,
    schedule_id,
    task_queue,
    template_db,
    temporal_server,
    worker,
)
