"""The replay of model walks runs on the integration tests' Postgres (tests/support/fixtures.py);
the explorer itself needs no server."""

from __future__ import annotations

from tests.support.fixtures import (  # noqa: F401  (the fixtures the replay test uses)
    database,
    pool,
    postgres_server,
    template_db,
)
