"""Counting one scenario's outcome into its `FaultRow`, the same way for every scenario."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TypeVar

import asyncpg

from tests.support.faults.tally import FaultRow, effects_of, missing_and_unlisted, outbox_keys
from tests.support.waiting import wait_for

T = TypeVar("T")

# An effect row whose key has no outbox record was written without passing the commit's
# fencing check: a stale or unguarded writer got through.
_UNFENCED = """
SELECT count(*) FROM public.test_effects e
 WHERE e.logical_key LIKE $1 || '@%'
   AND NOT EXISTS (SELECT 1 FROM cronwarden.outbox o WHERE o.logical_key = e.logical_key)
"""


async def unrecorded_effects(conn: asyncpg.Connection, schedule_id: str) -> int:
    """Effect rows of `schedule_id` whose key has no outbox record."""
    return int(await conn.fetchval(_UNFENCED, schedule_id))


async def count_row(
    pool: asyncpg.Pool,
    *,
    scenario: str,
    schedule_id: str,
    expected: set[str],
    listed: set[str] | None = None,
    checks: list[str],
) -> FaultRow:
    """The row for `schedule_id`: `expected` are the keys that should have run, `listed` the
    ones `backfill plan` lists. Effects without an outbox record are added to `checks`."""
    async with pool.acquire() as conn:
        effects = await effects_of(conn, schedule_id)
        committed = await outbox_keys(conn, schedule_id)
        unfenced = await unrecorded_effects(conn, schedule_id)
    if unfenced:
        checks = [*checks, f"{unfenced} effect rows without an outbox record"]
    return FaultRow(
        scenario=scenario,
        fires_expected=len(expected),
        outbox_rows=len(committed),
        effect_rows=effects.rows,
        duplicate_effects=effects.duplicates,
        missing_unlisted=len(missing_and_unlisted(expected, committed, listed or set())),
        checks_failed=checks,
    )


async def tally(
    fault_table: list[FaultRow],
    pool: asyncpg.Pool,
    *,
    scenario: str,
    schedule_id: str,
    expected: set[str],
    checks: list[str],
    listed: set[str] | None = None,
) -> FaultRow:
    """Count, add the row to the suite's table, THEN assert its verdict: a failing scenario
    still shows its numbers."""
    row = await count_row(
        pool,
        scenario=scenario,
        schedule_id=schedule_id,
        expected=expected,
        listed=listed,
        checks=checks,
    )
    fault_table.append(row)
    assert row.verdict == "pass", row
    return row


def check(checks: list[str], holds: bool, failure: str) -> None:
    """Record a scenario-specific expectation that did not hold (the row says FAIL)."""
    if not holds:
        checks.append(failure)


async def within(check: Callable[[], Awaitable[T]], *, timeout: float, what: str) -> T | None:
    """`wait_for`, but None at the deadline: for an expectation the scenario records as a
    failed check (so its row still reaches the table) instead of raising before counting."""
    try:
        return await wait_for(check, timeout=timeout, what=what)
    except AssertionError:
        return None
