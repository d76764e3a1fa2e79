"""Scenarios about ONE logical key: runs started directly (as replays are: same workflow, same
guard), so a scenario decides exactly which executions of the key exist and when."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import asyncpg
import pytest
from temporalio.client import Client, WorkflowHandle

from cronwarden.activities.contract import RunOutcome, logical_key
from tests.support.database import fetch
from tests.support.faults.counts import tally
from tests.support.faults.tally import FaultRow
from tests.support.runs import FIRE, committed_attempts, start_run


async def outbox_of(pool: asyncpg.Pool, key: str) -> list[tuple[int, int]]:
    """(attempt, fencing token) of `key`'s outbox record, if any."""
    rows = await fetch(
        pool,
        "SELECT attempt, fencing_token FROM cronwarden.outbox WHERE logical_key = $1",
        key,
    )
    return [(r["attempt"], r["fencing_token"]) for r in rows]


@dataclass
class OneKey:
    client: Client
    pool: asyncpg.Pool
    task_queue: str
    schedule_id: str
    fault_table: list[FaultRow]

    @property
    def key(self) -> str:
        return logical_key(self.schedule_id, FIRE)

    async def start(self, **options: Any) -> WorkflowHandle[Any, RunOutcome]:
        """One execution of the key (`tests.support.runs.start_run` options)."""
        return await start_run(self.client, self.task_queue, self.schedule_id, **options)

    async def outbox(self) -> list[tuple[int, int]]:
        """(attempt, fencing token) of the key's outbox record, if any."""
        return await outbox_of(self.pool, self.key)

    async def committed_attempts(self) -> list[int]:
        return await committed_attempts(self.pool, self.key)

    async def effect_attempts(self) -> list[int]:
        """The attempt that wrote each effect row of the key."""
        rows = await fetch(
            self.pool,
            "SELECT attempt FROM test_effects WHERE logical_key = $1 ORDER BY attempt",
            self.key,
        )
        return [r["attempt"] for r in rows]

    async def tally(self, scenario: str, checks: list[str]) -> FaultRow:
        """Count the key into the table (one fire expected), then assert the verdict."""
        return await tally(
            self.fault_table,
            self.pool,
            scenario=scenario,
            schedule_id=self.schedule_id,
            expected={self.key},
            checks=checks,
        )


@pytest.fixture
def one_key(
    client: Client,
    pool: asyncpg.Pool,
    task_queue: str,
    schedule_id: str,
    fault_table: list[FaultRow],
) -> OneKey:
    return OneKey(client, pool, task_queue, schedule_id, fault_table)
