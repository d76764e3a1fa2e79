"""What a fault scenario counts, and the one table the suite prints at the end.

Every scenario records one `FaultRow` per fault it injects, BEFORE it asserts, so a failing
scenario still shows its numbers in the table. The verdict is computed from the counts alone:
any duplicate effect or any fire that is missing and not listed by `backfill plan` fails.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from tests.support.table import markdown_table

FAULT_ROW_PROPERTY = "fault_row"
"""The name a fault row travels under in a test report's user properties (tests/conftest.py
gathers them into the table)."""

COLUMNS = (
    "scenario",
    "fires expected",
    "outbox rows",
    "effect rows",
    "duplicate effects",
    "missing and unlisted",
    "pages",
    "verdict",
)


@dataclass
class FaultRow:
    scenario: str
    fires_expected: int | None
    """None (`-`) for a scenario that runs no schedule; likewise the next four counts."""
    outbox_rows: int | None
    effect_rows: int | None
    duplicate_effects: int | None
    """Effects applied twice; for a monitor scenario, pages delivered twice."""
    missing_unlisted: int | None
    pages: int | None = None
    """Pages the monitor sent; None (`-`) for a scenario that runs no monitor."""
    checks_failed: list[str] = field(default_factory=list)
    """Scenario-specific expectations that did not hold (e.g. `lease-lost not logged`)."""

    @property
    def verdict(self) -> str:
        if self.duplicate_effects or self.missing_unlisted or self.checks_failed:
            return "FAIL"
        return "pass"

    def cells(self) -> list[str]:
        counts = (
            self.fires_expected,
            self.outbox_rows,
            self.effect_rows,
            self.duplicate_effects,
            self.missing_unlisted,
            self.pages,
        )
        return [self.scenario, *("-" if c is None else str(c) for c in counts), self.verdict]


def scenario_order(row: FaultRow) -> tuple[int, str]:
    """Rows are labelled `<number><letter?> <what happened>`: sort 2b before 10."""
    label = row.scenario.split(" ", 1)[0]
    digits = "".join(ch for ch in label if ch.isdigit())
    return (int(digits) if digits else 0, row.scenario)


def render(rows: Iterable[FaultRow]) -> str:
    """A Markdown table, so the same text goes to the terminal and into the README."""
    return markdown_table(COLUMNS, [row.cells() for row in rows], right={1, 2, 3, 4, 5, 6})


_EFFECTS = """
SELECT count(*) AS rows,
       count(*) - count(DISTINCT logical_key) AS duplicates
  FROM public.test_effects
 WHERE logical_key LIKE $1 || '@%'
"""
_OUTBOX = "SELECT logical_key FROM cronwarden.outbox WHERE schedule_id = $1"


@dataclass(frozen=True)
class Effects:
    rows: int
    duplicates: int
    """Rows beyond the first per logical key: each one is an effect applied twice."""


async def effects_of(conn: Any, schedule_id: str) -> Effects:
    """The probe table has no unique constraint, so a second application is a second row."""
    row = await conn.fetchrow(_EFFECTS, schedule_id)
    return Effects(rows=int(row["rows"]), duplicates=int(row["duplicates"]))


async def outbox_keys(conn: Any, schedule_id: str) -> set[str]:
    return {r["logical_key"] for r in await conn.fetch(_OUTBOX, schedule_id)}


def missing_and_unlisted(expected: set[str], committed: set[str], listed: set[str]) -> set[str]:
    """Fires that should have happened, never committed, and that `backfill plan` did not list:
    the losses nobody would ever hear about."""
    return expected - committed - listed
