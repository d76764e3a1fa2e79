"""`schedules apply` stamps every definition history row with Temporal's time of the write.

The CLI runs with its wall clock an hour ahead (tests/support/faults/skewed_clock): the servers
and this test keep the real clock. Stamped from the host's clock, the create's row would come
after the update's (which carries Temporal's update time), and the newest row, the definition
`status` shows and a window's end is judged by, would be one Temporal no longer holds.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import asyncpg
import pytest
from temporalio.client import Client

from cronwarden.store import definitions
from tests.support.cli import cli
from tests.support.database import fetch
from tests.support.faults.worker_process import SKEWED_CLOCK
from tests.support.paths import REPO_ROOT
from tests.support.schedules import write_schedules_file

pytestmark = pytest.mark.integration

# Far beyond any drift between the test's servers: the rows cannot order right by luck.
SKEW_SECONDS = 3600


async def test_history_rows_carry_temporals_times_when_the_cli_clock_runs_ahead(
    tmp_path: Path, cli_env: dict[str, str], client: Client, pool: asyncpg.Pool
) -> None:
    sid = f"skew-{uuid.uuid4().hex[:8]}"
    body = f"schedules:\n  - id: {sid}\n    job: probe\n    cron: '0 3 * * *'\n"
    path = write_schedules_file(tmp_path, body)
    skewed = {
        **cli_env,
        "PYTHONPATH": f"{SKEWED_CLOCK}:{REPO_ROOT}",
        "CRONWARDEN_TEST_CLOCK_SKEW_SECONDS": str(SKEW_SECONDS),
    }
    handle = client.get_schedule_handle(sid)
    try:
        created = await cli(skewed, "schedules", "apply", str(path))
        assert created.code == 0, created
        assert f"{sid}: created" in created.stdout
        # The skew really was in the CLI.
        assert '"event": "test.clock_skewed"' in created.stderr
        created_at = (await handle.describe()).info.created_at

        path.write_text(body.replace("0 3 * * *", "0 4 * * *"))
        updated = await cli(skewed, "schedules", "apply", str(path))
        assert updated.code == 0, updated
        assert f"{sid}: updated" in updated.stdout
        after = await handle.describe()
        updated_at = after.info.last_updated_at
        assert updated_at is not None

        rows = await fetch(
            pool,
            "SELECT applied_at, definition FROM cronwarden.definition_history"
            " WHERE schedule_id = $1 ORDER BY applied_at",
            sid,
        )
        # Exactly Temporal's times of the two writes, so they order as Temporal applied them.
        assert [r["applied_at"] for r in rows] == [created_at, updated_at]
        assert created_at < updated_at
        assert [r["definition"]["cron"] for r in rows] == ["0 3 * * *", "0 4 * * *"]

        # The reader of the newest row, and `status` through it, show the update's definition.
        async with pool.acquire() as conn:
            latest = await definitions.latest_all(conn)
        assert latest[sid]["cron"] == "0 4 * * *"
        status = await cli(cli_env, "status", "--json")
        assert status.code == 0, status
        [row] = [r for r in json.loads(status.stdout)["schedules"] if r["schedule_id"] == sid]
        assert "0 4 * * *" in row["spec"] and "0 3 * * *" not in row["spec"]
    finally:
        await handle.delete()
