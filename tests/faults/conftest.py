"""The fault suite's own servers, and the table it prints at the end.

Faults here stop and restart Postgres and Temporal, so the suite runs against its own pair
(Temporal persisted to a SQLite file, so a restart keeps schedules and histories) instead of
the integration tests' session servers. Everything else is the integration tests' fixtures
(tests/support/fixtures.py), re-bound to these servers.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import asdict

import pytest

from cronwarden.embedded import EmbeddedPostgres, EmbeddedTemporal
from tests.support.faults.one_key import one_key  # noqa: F401  (fixture for the scenarios)
from tests.support.faults.tally import FAULT_ROW_PROPERTY, FaultRow
from tests.support.faults.worker_process import start_worker  # noqa: F401  (fixture for the scenarios)
from tests.support.fixtures import (  # noqa: F401  (fixtures, re-bound to the servers below)
    cli_env,
    client,
    database,
    pool,
    schedule_id,
    task_queue,
    template_db,
    worker,
)
from tests.support.servers import embedded_postgres, embedded_temporal


@pytest.fixture(scope="session")
def postgres_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedPostgres]:
    with embedded_postgres(tmp_path_factory.mktemp("fault-postgres")) as server:
        yield server


@pytest.fixture(scope="session")
def temporal_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedTemporal]:
    with embedded_temporal(tmp_path_factory.mktemp("fault-temporal"), persisted=True) as server:
        yield server


@pytest.fixture
def fault_table(request: pytest.FixtureRequest) -> Iterator[list[FaultRow]]:
    """Append one row per injected fault, before asserting anything.

    The rows leave with the test's report (its user properties), so the table is printed by
    the process that prints the summary, also when the tests ran in worker processes.
    """
    rows: list[FaultRow] = []
    yield rows
    for row in rows:
        request.node.user_properties.append((FAULT_ROW_PROPERTY, asdict(row)))
