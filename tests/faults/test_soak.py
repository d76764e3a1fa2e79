"""The soak's quick form (`python -m tests.soak --quick`), run by `make test` so it cannot rot:
30 s of mixed faults on the fault suite's restartable servers, the same verdict as `make soak`.

A fixed seed, so a failure here is the same fault plan every time; `SOAK_SEED=N` draws another
(`make soak ARGS="--seed N --quick"` replays it on its own servers, with its logs kept).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from cronwarden.embedded import EmbeddedPostgres, EmbeddedTemporal
from tests.soak.plan import Kind
from tests.soak.runner import SoakConfig, fault_plan, run_soak
from tests.soak.stack import Servers

pytestmark = pytest.mark.integration

QUICK_SEED = 1
QUICK_DURATION = 30.0


@pytest.mark.timeout(900)
async def test_a_quick_soak_loses_no_fire_silently_applies_none_twice_and_costs_none_to_replays(
    postgres_server: EmbeddedPostgres,
    temporal_server: EmbeddedTemporal,
    database: str,
    tmp_path: Path,
) -> None:
    config = SoakConfig(seed=int(os.environ.get("SOAK_SEED", QUICK_SEED)), duration=QUICK_DURATION)
    # The quick plan still carries every kind of fault.
    assert {f.kind for f in fault_plan(config)} == set(Kind)
    servers = Servers(postgres_server, temporal_server)
    try:
        report = await run_soak(config, servers=servers, database=database, work_dir=tmp_path)
    finally:
        # Later tests of the session need both servers, whatever happened here.
        for server in (postgres_server, temporal_server):
            if not server.running:
                server.start()
    print(report.render())
    assert report.problems == []
    assert [(s.name, s.failures) for s in report.ledgers if s.failures] == [], report.table
